"""A cluster job's --output-dir outlives the job: gs:// through Cloud Storage FUSE, a node path bind-mounted.

The node side is checked in the rendered scripts (what runs on a real node); the emulator side by
running two jobs on one cluster and finding the first one's checkpoints when the second runs.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from gcpgpu.cli import main
from gcpgpu.resources import render

GLOBAL = ["--project", "test-proj", "--region", "us-central1"]


def cli(*argv: str, fmt: str | None = None):
    return CliRunner().invoke(main, [*GLOBAL, *(["--format", fmt] if fmt else []), *argv])


def test_agent_mounts_the_bucket_and_binds_node_paths(tmp_path):
    script = render("job_agent.sh.j2", job_id="t-abc123", container="gcpgpu-job-t-abc123", rank=0, nnodes=2,
                    master_addr="10.0.0.2", master_port=29500, image="img:1", command=[], args=[], env={},
                    mounts=[], gcs_buckets=["my-bucket"], node_dirs=["/mnt/shared/run 1"], timeout=0)
    path = tmp_path / "agent.sh"
    path.write_text(script)
    assert subprocess.run(["bash", "-n", str(path)], capture_output=True).returncode == 0
    # The bucket is mounted on the node, then seen by the container at the same /gcs path as on Vertex AI.
    assert "/usr/local/bin/gcpgpu-gcs-mount my-bucket" in script
    assert "--volume /gcs/my-bucket:/gcs/my-bucket" in script
    assert script.index("gcpgpu-gcs-mount my-bucket") < script.index('docker run "${run_args[@]}"')
    # A node path exists on the host and is bind-mounted (quoted: it holds a space).
    assert "install -d -m 0755 '/mnt/shared/run 1'" in script
    assert "--volume '/mnt/shared/run 1:/mnt/shared/run 1'" in script
    # The node's local SSDs, where it has them, reach the container for the trainer's async checkpoints; the
    # variable names the folder (gcpgpu/trainer/ckpt_local.py), before the job's own env that may override it.
    ssd = script.index("if mountpoint -q /mnt/localssd; then\n  install -d -m 1777 /mnt/localssd/gcpgpu-ckpt")
    assert ssd < script.index("--volume /mnt/localssd/gcpgpu-ckpt:/mnt/localssd/gcpgpu-ckpt") < script.index("fi", ssd)
    assert "--env GCPGPU_CKPT_LOCAL_DIR=/mnt/localssd/gcpgpu-ckpt" in script
    assert script.index("GCPGPU_CKPT_LOCAL_DIR") < script.index("--env NNODES=")


def test_startup_script_sets_up_cloud_storage_fuse_for_checkpoints(tmp_path):
    from gcpgpu.cluster.plan import plan
    from gcpgpu.cluster.spec import ClusterSpec

    p = plan(ClusterSpec(name="c", machine_type="a2-highgpu-8g", nodes=2).validate(default_region="us-central1"),
             "test-proj")
    script = next(i["value"] for i in p.instance_properties["metadata"]["items"] if i["key"] == "startup-script")
    path = tmp_path / "startup.sh"
    path.write_text(script)
    assert subprocess.run(["bash", "-n", str(path)], capture_output=True).returncode == 0
    assert "cat > /usr/local/bin/gcpgpu-gcs-mount" in script
    assert "--profile=aiml-checkpointing" in script and 'dir=/gcs/$bucket' in script
    assert "apt-get install -y -q gcsfuse" in script


@pytest.mark.parametrize("bad", ["/mnt/a:b", "/", "/gcs", "/mnt/with space", "relative/path"])
def test_bad_node_output_dir_is_refused_before_any_call(gcp, bad):
    result = cli("job", "submit", "--cluster", "c", "--image", "busybox", "--output-dir", bad)
    assert result.exit_code == 2, result.output
    assert "--output-dir" in result.output
    assert len(gcp.requests) == 0


@pytest.mark.slow
def test_outputs_outlive_the_job_on_the_same_cluster(gcp):
    pytest.importorskip("torch")
    assert cli("cluster", "up", "c", "--machine-type", "a2-highgpu-1g", "--nodes", "2", "--zone", "us-central1-a",
               "--yes").exit_code == 0
    train = ["--model", "tiny", "--parallel", "ddp", "--precision", "fp32", "--data", "synthetic", "--steps", "4",
             "--batch-size", "8", "--seq-len", "32", "--log-every", "1"]
    storage = gcp.jobs.agent.storage.root
    gcp.storage.insert_bucket("test-proj", {"name": "ckpt-bucket"})  # a job mounts only a bucket that exists, as on Google

    first = cli("job", "submit", "--cluster", "c", "--output-dir", "gs://ckpt-bucket/exp1", "--wait", "--", *train)
    assert first.exit_code == 0, first.output
    ckpts = storage / "gcs" / "ckpt-bucket" / "exp1" / "checkpoints"
    assert (ckpts / "step_00000004" / ".metadata").is_file()

    # A second job on the same cluster resumes from the first one's checkpoint in the bucket.
    second = cli("job", "submit", "--cluster", "c", "--output-dir", "gs://ckpt-bucket/exp1", "--wait", "--",
                 *[a if a != "4" else "6" for a in train], "--resume")
    assert second.exit_code == 0, second.output
    logs = cli("job", "logs", second.stdout.splitlines()[0]).output
    assert "resumed from" in logs and "at step 4" in logs
    assert (ckpts / "step_00000004" / ".metadata").is_file() and (ckpts / "step_00000006" / ".metadata").is_file()

    # A node path is that node's own disk: a one-node job's checkpoints are still there after another job.
    node = cli("job", "submit", "--cluster", "c", "--nodes", "1", "--output-dir", "/mnt/runs/exp2", "--wait", "--",
               *train, "--batch-size", "4")
    assert node.exit_code == 0, node.output
    c0 = gcp.compute.get("test-proj", "zones/us-central1-a/instances", "c-0")
    disk = storage / "nodes" / c0["id"] / "mnt" / "runs" / "exp2" / "checkpoints"
    assert (disk / "step_00000004" / ".metadata").is_file()
    status = json.loads(cli("job", "status", node.stdout.splitlines()[0], fmt="json").stdout)
    assert status["output_dir"] == "/mnt/runs/exp2"
    other = cli("job", "submit", "--cluster", "c", "--image", "busybox", "--command", "true", "--wait")
    assert other.exit_code == 0, other.output
    assert (disk / "step_00000004" / ".metadata").is_file()
    assert not Path("/mnt/runs/exp2").exists()  # the emulator never writes to this machine's own /mnt


@pytest.mark.slow
def test_the_bundled_trainers_own_paths_land_on_the_emulated_node_never_on_this_machine(gcp, tmp_path):
    # Issue 36: the trainer runs outside any sandbox, and wrote wherever --ckpt-dir or --log-json pointed here.
    pytest.importorskip("torch")
    host = tmp_path / "host"
    host.mkdir()
    train = ["--model", "tiny", "--parallel", "ddp", "--precision", "fp32", "--data", "synthetic", "--steps", "2",
             "--batch-size", "4", "--seq-len", "32", "--log-every", "1", "--ckpt-dir", f"{host}/ck",
             "--log-json", f"{host}/m.jsonl"]
    nodes = gcp.jobs.agent.storage.root / "nodes"
    assert cli("cluster", "up", "c", "--machine-type", "a2-highgpu-1g", "--nodes", "1", "--zone", "us-central1-a",
               "--yes").exit_code == 0
    on_node = cli("job", "submit", "--cluster", "c", "--wait", "--", *train)
    assert on_node.exit_code == 0, on_node.output
    disk = nodes / gcp.compute.get("test-proj", "zones/us-central1-a/instances", "c-0")["id"] / str(host).lstrip("/")
    assert (disk / "m.jsonl").is_file() and (disk / "ck" / "step_00000002" / ".metadata").is_file()

    on_vertex = cli("job", "submit", "--vertex", "--machine-type", "a2-highgpu-1g", "--wait", "--", *train)
    assert on_vertex.exit_code == 0, on_vertex.output
    (replica,) = nodes.glob("*-workerpool0-0")  # a Vertex AI replica's own disk
    assert (replica / str(host).lstrip("/") / "m.jsonl").is_file()
    assert list(host.iterdir()) == []
