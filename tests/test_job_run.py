"""Jobs the emulator really runs: the tiny trainer on CPU, as Vertex AI replicas and as cluster nodes.

Each test starts real processes (torchrun + the trainer, gloo on loopback), so they are few and
small: a tiny model, a few steps, two replicas.
"""

from __future__ import annotations

import json
import random
import re

import pytest
from click.testing import CliRunner
from helpers import alive, wait_for

from gcpgpu.cli import main

pytest.importorskip("torch")

GLOBAL = ["--project", "test-proj", "--region", "us-central1"]


@pytest.fixture(scope="module")
def text_file(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Repetitive text a byte-level model learns within a few steps, so the loss visibly falls."""
    rng = random.Random(0)
    words = "the quick brown fox jumps over the lazy dog and runs into a forest of tall trees".split()
    path = tmp_path_factory.mktemp("data") / "small.txt"
    path.write_text("\n".join(" ".join(rng.choice(words) for _ in range(12)) for _ in range(2000)) + "\n")
    return str(path)


def trainer(data: str, steps: int = 6) -> list[str]:
    return ["--model", "tiny", "--parallel", "ddp", "--precision", "fp32", "--data", data, "--steps", str(steps),
            "--batch-size", "8", "--seq-len", "64", "--lr", "1e-3", "--warmup-steps", "2", "--log-every", "1"]


def cli(*argv: str, fmt: str | None = None):
    args = [*GLOBAL, *(["--format", fmt] if fmt else []), *argv]
    return CliRunner().invoke(main, args)


def losses(log_text: str) -> list[float]:
    return [float(m) for m in re.findall(r"step\s+\d+ \| loss ([0-9.]+)", log_text)]


@pytest.mark.slow
def test_vertex_job_of_two_replicas_trains_to_succeeded(gcp, text_file):
    result = cli("job", "submit", "--vertex", "--machine-type", "a2-highgpu-1g", "--nodes", "2", "--name", "tiny",
                 "--wait", "--", *trainer(text_file))
    assert result.exit_code == 0, result.output
    job_id = result.stdout.splitlines()[0]
    assert job_id.startswith("vertex:us-central1:")

    status = json.loads(cli("job", "status", job_id, fmt="json").stdout)
    assert status["state"] == "SUCCEEDED" and status["error"] is None
    assert [p["replicas"] for p in status["pools"]] == [1, 1] and status["started"] and status["ended"]

    # The replicas got what Vertex gives: CLUSTER_SPEC on loopback ports, the job id, output dirs.
    run = gcp.jobs.runner.get(status["resource"])
    specs = [json.loads(r.spec.env["CLUSTER_SPEC"]) for r in run.replicas]
    assert [s["task"] for s in specs] == [{"type": "workerpool0", "index": 0, "trial": ""},
                                          {"type": "workerpool1", "index": 0, "trial": ""}]
    assert all(h.startswith("127.0.0.1:") for s in specs for hosts in s["cluster"].values() for h in hosts)
    assert {r.spec.env["CLOUD_ML_JOB_ID"] for r in run.replicas} == {job_id.rsplit(":", 1)[1]}
    assert all(r.returncode == 0 for r in run.replicas)

    logs = cli("job", "logs", job_id).output
    assert "[workerpool0-0]" in logs and "[workerpool1-0]" in logs and "ddp x 2 on cpu" in logs
    curve = losses(logs)
    assert len(curve) == 6 and curve[-1] < curve[0] - 0.3, curve  # the trainer's own log: the loss falls

    listed = json.loads(cli("job", "list", "--vertex", fmt="json").stdout)
    assert [(j["id"], j["state"]) for j in listed] == [(job_id, "SUCCEEDED")]


def test_vertex_job_whose_trainer_fails_ends_failed_with_its_error(gcp):
    # The data file is checked where the job runs, so this passes submit and fails in the trainer.
    result = cli("job", "submit", "--vertex", "--machine-type", "a2-highgpu-1g", "--nodes", "2", "--wait",
                 "--", "--model", "tiny", "--data", "/nonexistent/train.txt", "--batch-size", "8")
    assert result.exit_code == 1, result.output
    assert "ended FAILED" in result.output and "no such file /nonexistent/train.txt" in result.output
    job_id = result.stdout.splitlines()[0]
    status = json.loads(cli("job", "status", job_id, fmt="json").stdout)
    assert status["state"] == "FAILED"
    assert re.search(r"replica workerpool\d-0 exited with a non-zero status of 2", status["error"])
    # Both replicas fail alike; whichever fails first gets the other stopped, so either may be the one that logs.
    assert re.search(r"\[workerpool\d-0\] gcpgpu\.trainer: error: --data: no such file", cli("job", "logs", job_id).output)


@pytest.mark.slow
def test_cancel_stops_the_local_processes(gcp, text_file):
    result = cli("job", "submit", "--vertex", "--machine-type", "a2-highgpu-1g", "--nodes", "2",
                 "--", *trainer(text_file, steps=100000))
    assert result.exit_code == 0, result.output
    job_id = result.stdout.splitlines()[0]
    name = json.loads(cli("job", "status", job_id, fmt="json").stdout)["resource"]
    run = wait_for(lambda: (r := gcp.jobs.runner.get(name)) and len(r.alive()) == 2 and r, what="2 replicas")
    pids = run.pids()

    result = cli("job", "cancel", job_id, "--wait")
    assert result.exit_code == 0, result.output
    status = json.loads(cli("job", "status", job_id, fmt="json").stdout)
    assert status["state"] == "CANCELLED"
    assert run.alive() == [] and not any(alive(p) for p in pids)  # the replicas' process groups are gone


@pytest.mark.slow
def test_cluster_job_on_two_nodes_runs_ranks_0_and_1(gcp, text_file):
    up = cli("cluster", "up", "c", "--machine-type", "a2-highgpu-1g", "--nodes", "2", "--zone", "us-central1-a", "--yes")
    assert up.exit_code == 0, up.output
    result = cli("job", "submit", "--cluster", "c", "--wait", "--", *trainer(text_file))
    assert result.exit_code == 0, result.output
    job_id = result.stdout.splitlines()[0]
    assert re.fullmatch(r"cluster:c:train-[0-9a-f]{6}", job_id)

    status = json.loads(cli("job", "status", job_id, fmt="json").stdout)
    assert status["state"] == "SUCCEEDED"
    assert [(n["node"], n["rank"], n["state"], n["exit_code"]) for n in status["per_node"]] == [
        ("c-0", 0, "SUCCEEDED", 0), ("c-1", 1, "SUCCEEDED", 0)]

    # Each node's process got the rank, node count and master the agent gives (master on loopback here).
    runs = [r for r in gcp.jobs.runner.all_runs() if r.id.startswith("cluster/")]
    envs = sorted((r.replicas[0].spec.env for r in runs), key=lambda e: e["NODE_RANK"])
    assert [(e["NODE_RANK"], e["NNODES"], e["MASTER_ADDR"]) for e in envs] == [("0", "2", "127.0.0.1"),
                                                                                ("1", "2", "127.0.0.1")]
    assert envs[0]["MASTER_PORT"] == envs[1]["MASTER_PORT"]
    inst = gcp.compute.get("test-proj", "zones/us-central1-a/instances", "c-1")
    meta = {i["key"]: i["value"] for i in inst["metadata"]["items"]}
    assert meta["gcpgpu-node-rank"] == "1" and meta["gcpgpu-master-addr"] == status["master"].split(":")[0]
    assert "NODE_RANK=1" in meta["gcpgpu-job-agent"]

    logs = cli("job", "logs", job_id).output
    assert "[c-0]" in logs and "ddp x 2 on cpu" in logs
    curve = losses(logs)
    assert curve and curve[-1] < curve[0]

    # The nodes are free again: a user's command (run in the emulator's sandbox) goes on and can be cancelled.
    other = cli("job", "submit", "--cluster", "c", "--image", "busybox", "--command", "sleep 600")
    assert other.exit_code == 0, other.output
    other_id = other.stdout.splitlines()[0]
    busy = cli("job", "submit", "--cluster", "c", "--", *trainer(text_file))
    assert busy.exit_code == 1 and "is still running job" in busy.output
    assert cli("job", "cancel", other_id, "--wait").exit_code == 0
    assert json.loads(cli("job", "status", other_id, fmt="json").stdout)["state"] == "CANCELLED"
    listed = {j["id"]: j["state"] for j in json.loads(cli("job", "list", "--clusters", fmt="json").stdout)}
    assert listed == {job_id: "SUCCEEDED", other_id: "CANCELLED"}  # the cluster's earlier job is kept


@pytest.mark.slow
def test_submit_wait_shows_steps_loss_and_throughput_as_they_come(gcp, text_file):
    """Issue 24 item 6: `job submit --wait` printed nothing but RUNNING for a whole 20-step job; now each
    step the trainer logs shows (from the job's log), before the job's final state."""
    up = cli("cluster", "up", "c", "--machine-type", "a2-highgpu-1g", "--nodes", "2", "--zone", "us-central1-a", "--yes")
    assert up.exit_code == 0, up.output
    result = cli("job", "submit", "--cluster", "c", "--wait", "--", *trainer(text_file, steps=4))
    assert result.exit_code == 0, result.output
    job_id = result.stdout.splitlines()[0]
    steps = [line for line in result.stderr.splitlines() if re.search(r" step \d+ \| loss ", line)]
    assert [re.search(r" step (\d+) ", line).group(1) for line in steps] == ["0", "1", "2", "3"], result.stderr
    assert all(line.startswith(tuple("0123456789")) and f" {job_id}: step " in line and line.endswith(" tok/s/gpu")
               for line in steps), steps
    err = result.stderr
    assert err.index(f"{job_id}: model tiny") < err.index(f"{job_id}: step 0 ") < err.index(f"{job_id}: step 3 ")
    assert err.index(f"{job_id}: step 3 ") < err.index(f"{job_id}: SUCCEEDED")
    assert "median over" in err  # the trainer's summary, then the end
