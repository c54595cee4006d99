"""A Slurm cluster runs the same job command as any cluster: a user's script with its workdir, setup, mounts,
secrets and a gs:// --output-dir, and `job logs` reads what it said.

The script and its bucket are test_job_user_command.py's; only the cluster (--scheduler slurm) differs.
"""

from __future__ import annotations

import json

import pytest
from helpers import PROJECT, wait_for
from test_job_user_command import (
    BUCKET,
    LAUNCH,
    check,
    cli,
    gcs,
    job_flags,
    needs_bwrap,
    put_code,
    put_secret,
    results,
)

from gcpgpu.fakes.guest.slurm import slurm_installed

__all__ = ["gcs"]  # the fixture, imported for this module's tests
needs_slurm = pytest.mark.skipif(slurm_installed() is not None, reason=str(slurm_installed()))


@needs_slurm
@needs_bwrap
def test_users_script_on_a_slurm_cluster_sees_its_workdir_setup_mounts_secret_and_writes_to_gs(gcp, gcs, tmp_path):
    src = put_code(gcs, tmp_path)
    assert cli("cluster", "up", "s", "--machine-type", "a2-highgpu-1g", "--nodes", "2", "--zone", "us-central1-a",
               "--scheduler", "slurm", "--yes").exit_code == 0
    # The script also writes where --output-dir says, through the variable Vertex AI's contract names (a gs://
    # URI, read at /gcs/BUCKET/... as the node mounts the bucket).
    launch = f"{LAUNCH} && d=/gcs/${{AIP_MODEL_DIR#gs://}} && mkdir -p $d && touch $d/rank$NODE_RANK.done"
    result = cli("job", "submit", "--cluster", "s", "--image", "us-docker.pkg.dev/p/r/mine:1", "--wait",
                 "--output-dir", f"gs://{BUCKET}/model", "--command", f"bash -c '{launch}'", *job_flags(src),
                 "--secret", f"HF_TOKEN={put_secret(gcp)}", fmt="json")
    job = json.loads(result.stdout[result.stdout.index("{"):])["id"] if "{" in result.stdout else ""
    assert result.exit_code == 0, result.output + (cli("job", "logs", job).output if job else "")
    check(gcs)  # both nodes met, from /workdir, after the setup, with /data read-only and /out written
    assert all(r["token_ok"] for r in results(gcs).values())  # the secret, read inside the sandbox
    names = {b.name for b in gcs.bucket(BUCKET).list_blobs(prefix="model/")}
    assert {"model/model/rank0.done", "model/model/rank1.done"} <= names, names
    def said() -> str | None:
        out = cli("job", "logs", job).output
        return out if "rank 0 sum 15.0" in out else None

    logs = wait_for(said, timeout=60, what="the script's words in job logs")
    assert "unpacked into /workdir" in logs
    # What the nodes' tasks wrote to their batch output: no runpy warning from the engine client they run.
    outs = [f.read_text() for f in gcp.jobs.slurm.folder(PROJECT, "s").rglob("*.out")]
    assert outs and not [o for o in outs if "RuntimeWarning" in o], outs
    assert cli("cluster", "down", "s", "--yes").exit_code == 0
