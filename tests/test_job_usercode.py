"""A user's own command with --workdir, --setup, --mount and --secret: the same GCPGPU_* environment on a
cluster's nodes and in a Vertex AI CustomJob, the image's entrypoint kept, secrets by name only, the
node's Cloud Storage FUSE mounts, and GCPGPU_RESUME / GCPGPU_RESTART after a recovery."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from gcpgpu.cli import main
from gcpgpu.resources import render
from tests.test_node_scripts import lint

REPO = Path(__file__).resolve().parents[1]
GLOBAL = ["--project", "test-proj", "--region", "us-central1"]
IMAGE = "us-docker.pkg.dev/test-proj/repo/mine:1"
USER = ["--setup", "pip install -r requirements.txt", "--mount", "gs://data-b/imagenet:/data:ro",
        "--mount", "gs://out-b/run1:/out", "--secret", "HF_TOKEN=projects/test-proj/secrets/hf"]
MOUNTS = [{"source": "gs://data-b/imagenet", "target": "/data", "ro": True},
          {"source": "gs://out-b/run1", "target": "/out", "ro": False}]


def cli(*argv: str, fmt: str | None = None):
    return CliRunner().invoke(main, [*GLOBAL, *(["--format", fmt] if fmt else []), *argv])


def _metadata(gcp, node: str) -> dict[str, str]:
    inst = gcp.compute.projects["test-proj"].coll("zones/us-central1-a/instances")[node]
    return {i["key"]: i["value"] for i in inst["metadata"]["items"]}


def test_vertex_keeps_the_image_entrypoint_and_carries_the_user_environment(gcp, tmp_path):
    (tmp_path / "train.py").write_text("print(1)\n")
    result = cli("job", "submit", "--vertex", "--machine-type", "a3-highgpu-8g", "--nodes", "2", "--image", IMAGE,
                 "--workdir", str(tmp_path), *USER, "--command", "torchrun --nnodes 2 train.py", "--dry-run")
    assert result.exit_code == 0, result.output
    assert "looks like a secret" not in result.output  # a --secret is the way, not a plain --env
    pools = yaml.safe_load(result.stdout)["customJob"]["jobSpec"]["workerPoolSpecs"]
    for pool in pools:
        spec = pool["containerSpec"]
        assert "command" not in spec or not spec["command"]  # the entrypoint unpacks, mounts, reads secrets
        assert spec["args"] == ["torchrun", "--nnodes", "2", "train.py"]
        env = {e["name"]: e["value"] for e in spec["env"]}
        assert env["GCPGPU_SETUP"] == "pip install -r requirements.txt"
        assert json.loads(env["GCPGPU_MOUNTS"]) == MOUNTS
        assert json.loads(env["GCPGPU_SECRETS"]) == {"HF_TOKEN": "projects/test-proj/secrets/hf/versions/latest"}
        assert env["GCPGPU_WORKDIR"].startswith("gs://test-proj-gcpgpu-staging/gcpgpu-staging/workdir-")
        assert "HF_TOKEN" not in env


def test_a_command_without_user_code_still_replaces_the_entrypoint(gcp):
    result = cli("job", "submit", "--vertex", "--machine-type", "a3-highgpu-8g", "--image", IMAGE,
                 "--command", "python x.py", "--dry-run")
    assert result.exit_code == 0, result.output
    spec = yaml.safe_load(result.stdout)["customJob"]["jobSpec"]["workerPoolSpecs"][0]["containerSpec"]
    assert spec["command"] == ["python", "x.py"]


def test_on_gcpgpus_image_every_command_keeps_the_entrypoint_that_becomes_the_unprivileged_user(gcp):
    # The image starts as root (a top-level mount point needs it) and its entrypoint becomes GCPGPU_USER:
    # replacing the entrypoint would run the command as root, so it goes in args behind it (both targets
    # share usercode.container_call); the emulator still runs `python -m gcpgpu.trainer` as the trainer.
    from gcpgpu.trainer.argv import trainer_args

    image = "us-central1-docker.pkg.dev/test-proj/gcpgpu/gcpgpu-trainer:none-0123456789ab"
    for line, words in (("all_reduce_perf -b 8", ["all_reduce_perf", "-b", "8"]),
                        ("python -m gcpgpu.trainer --steps 5", ["python", "-m", "gcpgpu.trainer", "--steps", "5"])):
        result = cli("job", "submit", "--vertex", "--machine-type", "a2-highgpu-1g", "--image", image,
                     "--command", line, "--dry-run")
        assert result.exit_code == 0, result.output
        spec = yaml.safe_load(result.stdout)["customJob"]["jobSpec"]["workerPoolSpecs"][0]["containerSpec"]
        assert not spec.get("command") and spec["args"] == words
    assert trainer_args(image, [], ["python", "-m", "gcpgpu.trainer", "--steps", "5"]) == ["--steps", "5"]


def test_a_cluster_job_mounts_the_buckets_on_the_node_and_binds_them(gcp, tmp_path):
    (tmp_path / "train.py").write_text("print(1)\n")
    up = cli("cluster", "up", "u", "--machine-type", "a2-highgpu-1g", "--nodes", "2", "--zone", "us-central1-a",
             "--yes")
    assert up.exit_code == 0, up.output
    result = cli("job", "submit", "--cluster", "u", "--image", "busybox", "--workdir", str(tmp_path), *USER,
                 "--command", "sleep 1")
    assert result.exit_code == 0, result.output
    meta = _metadata(gcp, "u-1")
    record = json.loads(meta["gcpgpu-job"])
    assert (record["command"], record["args"]) == ([], ["sleep", "1"])
    assert json.loads(record["env"]["GCPGPU_MOUNTS"]) == MOUNTS
    assert "HF_TOKEN" not in record["env"] and "GCPGPU_RESUME" not in record["env"]
    agent = meta["gcpgpu-job-agent"]
    assert "--entrypoint" not in agent
    # Writable buckets (the staging bucket, /out's) through the node's checkpoint-tuned mount at /gcs/BUCKET.
    assert "gcpgpu-gcs-mount test-proj-gcpgpu-staging" in agent and "gcpgpu-gcs-mount out-b" in agent
    assert "--volume /gcs/out-b/run1:/out" in agent
    assert "gcpgpu-gcs-mount data-b" not in agent  # the read-only input has its own read-only mount
    assert "gcsfuse -o ro" in agent and "--volume /gcs-ro/data-b/imagenet:/data:ro" in agent
    # The file cache only on the startup script's mounted local SSDs, never on a bare folder of the boot disk.
    assert "if mountpoint -q /mnt/localssd; then" in agent and "[ -d /mnt/localssd ]" not in agent


def test_the_agent_with_mounts_passes_shellcheck(tmp_path):
    script = render("job_agent.sh.j2", job_id="t-abc123", container="gcpgpu-job-t-abc123", rank=0, nnodes=2,
                    master_addr="10.0.0.2", master_port=29500, image="busybox", command=[], args=["sh", "-c", "x"],
                    env={}, mounts=[], gcs_buckets=["out-b"], node_dirs=[], timeout=0,
                    user_mounts=[{"bucket": "data-b", "path": "a b", "target": "/data", "ro": True},
                                 {"bucket": "out-b", "path": "", "target": "/out", "ro": False}])
    assert "'/gcs-ro/data-b/a b:/data:ro'" in script
    lint(tmp_path, script)


def test_a_recovered_attempt_tells_the_command_to_resume(gcp):
    gcp.faults.preempt_grace_s = 0.2
    gcp.jobs.agent.simulated_run_s = 4.0
    assert cli("cluster", "up", "r", "--machine-type", "a2-highgpu-1g", "--nodes", "2", "--zone", "us-central1-a",
               "--spot", "--yes").exit_code == 0
    gcp.faults.preempt("r-1", after_s=0.5)
    result = cli("job", "submit", "--cluster", "r", "--image", "busybox", "--command", "sleep 4", "--recover", "1")
    assert result.exit_code == 0, result.output
    env = json.loads(_metadata(gcp, "r-0")["gcpgpu-job"])["env"]
    assert (env["GCPGPU_RESUME"], env["GCPGPU_RESTART"]) == ("1", "1")


def test_a_command_line_with_variables_runs_under_a_shell_where_the_job_runs(gcp, tmp_path):
    (tmp_path / "train.py").write_text("print(1)\n")
    line = ("torchrun --nnodes $NNODES --node-rank $NODE_RANK --nproc-per-node $NPROC_PER_NODE "
            "--master-addr $MASTER_ADDR --master-port $MASTER_PORT train.py")
    result = cli("job", "submit", "--vertex", "--machine-type", "a3-highgpu-8g", "--image", IMAGE,
                 "--workdir", str(tmp_path), "--command", line, "--dry-run")
    assert result.exit_code == 0, result.output
    spec = yaml.safe_load(result.stdout)["customJob"]["jobSpec"]["workerPoolSpecs"][0]["containerSpec"]
    assert spec["args"] == ["sh", "-c", line]
    plain = cli("job", "submit", "--vertex", "--machine-type", "a3-highgpu-8g", "--image", IMAGE,
                "--command", "sh -c 'echo $HOME'", "--dry-run")
    spec = yaml.safe_load(plain.stdout)["customJob"]["jobSpec"]["workerPoolSpecs"][0]["containerSpec"]
    assert spec["command"] == ["sh", "-c", "echo $HOME"]  # already a shell: kept as written


def test_gcpgpus_own_variables_are_refused_in_env_and_only_the_documented_ones_pass():
    from gcpgpu.errors import UsageProblem
    from gcpgpu.jobs.spec import parse_env
    from gcpgpu.jobs.usercode import USER_SETTABLE, parse_secrets

    # The ones a job may set are the ones containers/README.md lists for it, and no others.
    doc = (REPO / "containers" / "README.md").read_text()
    listed = doc[doc.index("refuses every `GCPGPU_` name"):].split("\n\n")[0]
    assert set(re.findall(r"`(GCPGPU_\w+)`", listed)) - {"GCPGPU_USER", "GCPGPU_MOUNTS", "GCPGPU_WORKDIR"} \
        == USER_SETTABLE
    assert parse_env([f"{name}=1" for name in sorted(USER_SETTABLE)]) == dict.fromkeys(USER_SETTABLE, "1")
    for name in ("GCPGPU_USER", "GCPGPU_MOUNTS", "GCPGPU_WORKDIR", "GCPGPU_SETUP", "GCPGPU_SECRETS",
                 "GCPGPU_PYTHON", "GCPGPU_RESUME", "GCPGPU_SECRETMANAGER_URL", "GCPGPU_REPORTER_CMD"):
        for parse, value in ((parse_env, [f"{name}="]), (parse_env, {name: "x"}),
                             (parse_secrets, [f"{name}=projects/my-proj/secrets/s"])):
            with pytest.raises(UsageProblem, match=f"{name} is gcpgpu's own variable, which a job may not set"):
                parse(value)
    assert parse_env(["GCPGPUX=1", "MY_GCPGPU_USER=2"]) == {"GCPGPUX": "1", "MY_GCPGPU_USER": "2"}


def test_a_command_of_several_processes_without_a_launcher_is_told_where_rank_comes_from():
    """Issue 51: `python train.py` on a 2-node job saw RANK None with no hint."""
    from gcpgpu.node.launcher_hint import launcher_hint

    two_nodes = {"GCPGPU_NNODES": "2", "GCPGPU_NPROC_PER_NODE": "1"}
    hint = launcher_hint(["python", "train.py"], two_nodes)
    assert hint is not None and "RANK" in hint and "torchrun" in hint and '--nnodes "$NNODES"' in hint
    assert launcher_hint(["torchrun", "--nnodes", "2", "train.py"], two_nodes) is None
    assert launcher_hint(["sh", "-c", "cd x && accelerate launch train.py"], two_nodes) is None
    assert launcher_hint(["python", "train.py"], {"GCPGPU_NNODES": "1", "GCPGPU_NPROC_PER_NODE": "1"}) is None
    assert launcher_hint(["python", "train.py"], {**two_nodes, "RANK": "0"}) is None  # set by whoever started it
