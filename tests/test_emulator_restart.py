"""An emulator restarted on its --state-file tells the story its restart made: what it kept (Secret Manager's
secrets, a Slurm cluster's munge key among them, written where only its owner reads them) and what died with
its old process (every job's processes: their nodes are lost to a host error, so a job reads FAILED with that
cause, or is recovered, and never RUNNING for ever)."""

from __future__ import annotations

import base64
import json
import shutil
import stat
import tempfile
import urllib.request
from pathlib import Path

import pytest
from click.testing import CliRunner
from helpers import wait_for

from gcpgpu.cli import main
from gcpgpu.fakes.guest.slurm import slurm_installed
from gcpgpu.fakes.server import Emulator
from gcpgpu.gcp.clients import Clients
from gcpgpu.jobs.cluster.loss import loss_causes
from gcpgpu.trainer import ckpt_rule

GLOBAL = ["--project", "test-proj", "--region", "us-central1"]
UP = ["cluster", "up", "q", "--machine-type", "a2-highgpu-1g", "--nodes", "2", "--zone", "us-central1-a", "--yes"]
needs_slurm = pytest.mark.skipif(slurm_installed() is not None, reason=str(slurm_installed()))


def cli(*argv: str, fmt: str | None = None):
    return CliRunner().invoke(main, [*GLOBAL, *(["--format", fmt] if fmt else []), *argv])


def _status(jid: str) -> dict:
    got = cli("job", "status", jid, fmt="json")
    assert got.exit_code in (0, 1), got.output
    return json.loads(got.stdout)


def test_secrets_come_back_after_a_restart_in_a_file_only_its_owner_reads(tmp_path: Path):
    state = tmp_path / "emu.json"
    with Emulator(state_file=state) as first:
        first.secretmanager.create_secret("test-proj", "gcpgpu-munge-c", {"replication": {"automatic": {}}})
        first.secretmanager.add_version("test-proj", "gcpgpu-munge-c", {"data": base64.b64encode(b"k3y").decode()})
    assert stat.S_IMODE(state.stat().st_mode) == 0o600
    with Emulator(state_file=state) as second, urllib.request.urlopen(  # noqa: S310 - the emulator on loopback
            f"{second.url}/v1/projects/test-proj/secrets/gcpgpu-munge-c/versions/latest:access", timeout=10) as r:
        assert base64.b64decode(json.loads(r.read())["payload"]["data"]) == b"k3y"


def test_a_job_running_when_the_emulator_stopped_is_lost_to_a_host_error_not_running_for_ever(tmp_path, monkeypatch):
    state = tmp_path / "emu.json"
    with Emulator(state_file=state) as first:
        monkeypatch.setenv("GCPGPU_EMULATOR", first.address)
        first.faults.update({"operation_seconds": 0})
        first.jobs.agent.simulated_run_s = 3600.0  # still running when the emulator stops
        assert cli("cluster", "up", "c", "--machine-type", "a2-highgpu-1g", "--nodes", "2", "--zone", "us-central1-a",
                   "--yes").exit_code == 0
        submitted = cli("job", "submit", "--cluster", "c", "--image", "us-docker.pkg.dev/p/r/mine:1")
        assert submitted.exit_code == 0, submitted.output
        jid = submitted.stdout.splitlines()[0]
        wait_for(lambda: _status(jid)["state"] == "RUNNING", timeout=60, what="the job running")
    with Emulator(state_file=state) as second:
        monkeypatch.setenv("GCPGPU_EMULATOR", second.address)
        final = wait_for(lambda: (s := _status(jid))["state"] not in ("RUNNING", "PENDING") and s, timeout=60,
                         what="the job's record to converge after the restart")
        assert final["state"] == "FAILED", final
        assert "lost while the job ran" in final["error"]
        assert {row["node_status"] for row in final["per_node"]} == {"TERMINATED"}
        # Compute says why, as for any host error: what the follower reads to recover the job (--recover).
        causes = loss_causes(Clients(emulator=second.address), "test-proj", "c", final["per_node"])
        assert causes == {"c-0": "host error", "c-1": "host error"}


@needs_slurm
def test_a_checkpointing_slurm_job_resumes_after_the_emulator_restarts_and_the_cluster_comes_back(request, monkeypatch):
    """Before, the restarted emulator had no munge key (Secret Manager was not saved), so the cluster's Slurm never
    came back and the job ended FAILED. Now the nodes' daemons come back by themselves on their RUNNING VMs with
    the kept key, slurmctld reads its queue from the state disk, and Slurm requeues the job, which runs again."""
    # A short folder: slurmd's sockets live under the state file's storage, and a socket's path has 108 bytes.
    short = Path(tempfile.mkdtemp(prefix="gcpgpu-r-", dir="/tmp"))
    request.addfinalizer(lambda: shutil.rmtree(short, ignore_errors=True))
    state = short / "e.json"
    with Emulator(state_file=state) as first:
        monkeypatch.setenv("GCPGPU_EMULATOR", first.address)
        first.faults.update({"operation_seconds": 0})
        assert cli(*UP, "--scheduler", "slurm").exit_code == 0
        submitted = cli("job", "submit", "--cluster", "q", "--nodes", "1", "--", "--model", "tiny", "--steps", "60",
                        "--seq-len", "16",
                        "--batch-size", "2", "--vocab-size", "256", "--ckpt-dir", "gs://ckpt/kept", "--ckpt-every", "2",
                        "--log-every", "1")
        assert submitted.exit_code == 0, submitted.output
        jid = submitted.stdout.splitlines()[0]
        wait_for(lambda: ckpt_rule.complete(ckpt_rule.folder(first.storage.object_path("ckpt", "kept"), 4)),
                 timeout=600, what="the job past a checkpoint")
    with Emulator(state_file=state) as second:
        monkeypatch.setenv("GCPGPU_EMULATOR", second.address)
        second.faults.update({"operation_seconds": 0})  # nothing asked of it: the nodes' daemons come back
        final = wait_for(lambda: (s := _status(jid))["state"] in ("SUCCEEDED", "FAILED", "CANCELLED") and s,
                         timeout=600, interval=0.5, what="the job resumed and ended")
        assert final["state"] == "SUCCEEDED", final
        assert final["attempt"] >= 1, final  # requeued by the loss, not run to its end before the restart
        folder = second.jobs.slurm.folder("test-proj", "q")
        out = (folder / "jobs" / f"{jid.rsplit(':', 1)[-1]}.out").read_text(errors="replace") if folder else ""
        assert "(Slurm job 1, restart 1)" in out, out  # Slurm requeued it; its trainer ran again with --resume
        assert cli("cluster", "down", "q", "--yes").exit_code == 0
