"""The trainer's numbers from jobs the emulator runs: a metrics reporter beside rank 0, writing to its Monitoring.

One real job (the tiny trainer on one CPU node, a few steps); the rest checks the runner's sidecars
with plain sleeping processes and the Vertex AI mapping without starting any.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from helpers import alive, wait_for

from gcpgpu.cli import main
from gcpgpu.fakes.host.runner import ReplicaSpec, Runner
from gcpgpu.fakes.jobs import LocalJobs

GLOBAL = ["--project", "test-proj", "--region", "us-central1"]
TRAINER_METRIC = "custom.googleapis.com/gcpgpu/trainer/"


def cli(*argv: str, fmt: str | None = None):
    return CliRunner().invoke(main, [*GLOBAL, *(["--format", fmt] if fmt else []), *argv])


def trainer_series(gcp) -> dict[str, object]:
    return {s.metric_type[len(TRAINER_METRIC):]: s for s in gcp.monitoring.series.values()
            if s.metric_type.startswith(TRAINER_METRIC)}


@pytest.mark.slow
def test_a_cluster_jobs_trainer_numbers_reach_monitoring(gcp, tmp_path):
    pytest.importorskip("torch")
    rng = random.Random(0)
    words = "the quick brown fox jumps over the lazy dog".split()
    data = tmp_path / "small.txt"
    data.write_text("\n".join(" ".join(rng.choice(words) for _ in range(12)) for _ in range(300)) + "\n")
    up = cli("cluster", "up", "m", "--machine-type", "a2-highgpu-1g", "--nodes", "1", "--zone", "us-central1-a", "--yes")
    assert up.exit_code == 0, up.output

    result = cli("job", "submit", "--cluster", "m", "--wait", "--",
                 "--model", "tiny", "--parallel", "ddp", "--precision", "fp32", "--data", str(data), "--steps", "4",
                 "--batch-size", "4", "--seq-len", "32", "--log-every", "1", "--timing-warmup", "0",
                 "--log-json", "train.jsonl")  # fmt: skip
    assert result.exit_code == 0, result.output

    (run,) = [r for r in gcp.jobs.runner.all_runs() if r.id.startswith("cluster/")]
    (reporter,) = [s for s in run.sidecars if "gcpgpu.node.reporter" in s.spec.argv]
    argv = reporter.spec.argv
    assert argv[1:3] == ["-m", "gcpgpu.node.reporter"]
    assert argv[argv.index("--cluster") + 1] == "m" and argv[argv.index("--emulator") + 1] == gcp.address
    assert argv[argv.index("--pid") + 1] == str(run.replicas[0].popen.pid)
    assert reporter.returncode is not None and run.sidecars_alive() == []  # ended (and flushed) before the job did

    # The trainer wrote its JSON lines where it ran; the reporter sent them on, as the cluster's numbers.
    records = [json.loads(line) for line in (run.workdir / "train.jsonl").read_text().splitlines()]
    steps = [r for r in records if "loss" in r]  # the last line is the run's summary
    assert [r["step"] for r in steps] == [0, 1, 2, 3]
    series = trainer_series(gcp)
    said = [line.text for line in run.log_lines() if "gcpgpu-metrics-reporter" in line.text]
    assert {"loss", "step", "tokens_per_s", "tokens_per_s_per_gpu", "step_time"} <= set(series), (
        sorted(series), f"reporter exit {reporter.returncode}", said)  # why, when it fails under load
    loss = series["loss"]
    assert loss.project == "test-proj" and loss.resource_type == "generic_task"
    assert {k: loss.resource_labels[k] for k in ("namespace", "job", "task_id", "location")} == {
        "namespace": "gcpgpu-cluster", "job": "m", "task_id": "0", "location": "us-central1-a"}
    assert min(r["loss"] for r in steps) <= loss.points[-1][2] <= max(r["loss"] for r in steps)

    # ... which is what `gcpgpu metrics tail` reads back for the cluster.
    tail = CliRunner().invoke(main, ["--project", "test-proj", "metrics", "tail", "--cluster", "m", "--once",
                                     "--format", "json"])
    assert tail.exit_code == 0, tail.output
    shown = json.loads(tail.stdout.splitlines()[-1])["tokens_per_s"]
    measured = [r["tokens_per_s"] for r in steps if r.get("tokens_per_s")]
    assert measured and min(measured) * 0.999 <= shown <= max(measured) * 1.001  # the trainer's own, not made up

    # While the trainer ran, the agent recorded its node busy, and only then (Monitoring reads this).
    node = gcp.compute.get("test-proj", "zones/us-central1-a/instances", "m-0")
    ((began, ended),) = gcp.activity.spans(node["id"])
    assert ended is not None and began < ended
    # ... with the steps its trainer logged, which its made-up GPU and network series follow (issue 38).
    ((_spans, (steps,)),) = gcp.activity.work_of([node["id"]])
    assert [s for _t, s in steps][-1] == 3 and all(began <= t <= ended for t, _s in steps), steps


def test_a_vertex_jobs_reporter_writes_for_its_numeric_job_id(gcp):
    from gcpgpu.fakes.host.runner import Replica

    gcp.vertex.timings.update(queued_s=600.0)  # created, never started: only the mapping is looked at
    result = cli("job", "submit", "--vertex", "--machine-type", "a2-highgpu-1g", "--nodes", "2", "--",
                 "--model", "tiny", "--data", "/tmp/x.txt", "--log-json", "/tmp/m.jsonl")
    assert result.exit_code == 0, result.output
    job_id = result.stdout.splitlines()[0]
    name = json.loads(cli("job", "status", job_id, fmt="json").stdout)["resource"]
    run = gcp.jobs.runner.get(name)

    class Started:
        pid = 4242

    first, second = (Replica(r.spec, Started()) for r in run.replicas)  # type: ignore[arg-type]
    argv = gcp.jobs.reporter_argv(run, first)
    assert argv is not None and argv[1:3] == ["-m", "gcpgpu.node.reporter"]
    # The trainer's --log-json is on that replica's own disk in the emulator's storage, never this machine's /tmp.
    log_json = gcp.jobs.agent.storage.root / "nodes" / f"{name.rsplit('/', 1)[1]}-workerpool0-0" / "tmp" / "m.jsonl"
    assert argv[3:] == ["--log-json", str(log_json), "--job", job_id.rsplit(":", 1)[1], "--project", "test-proj",
                        "--location", "us-central1", "--task-id", "0", "--emulator", gcp.address, "--pid", "4242"]
    assert gcp.jobs.reporter_argv(run, second) is None  # workerpool1-0 is rank 1
    assert cli("job", "cancel", job_id).exit_code == 0


# --- the runner's sidecars, with sleeping processes -------------------------------------------------------------

SLEEP = [sys.executable, "-c", "import time; time.sleep(60)"]
# Says when it got SIGTERM (the reporter flushes then), so a test sees a stop rather than a kill; once
# its handler is in place it prints ready and leaves a file in the run's folder (replicas' cwd too).
SIDECAR = [sys.executable, "-c", "import signal, sys, time\n"
           "signal.signal(signal.SIGTERM, lambda *_: (print('stopped', flush=True), sys.exit(0)))\n"
           "open('sidecar-ready', 'w').close()\nprint('ready', flush=True)\ntime.sleep(60)"]
# A replica that ends (0) once the sidecar is ready, however slowly this machine starts processes.
UNTIL_READY = [sys.executable, "-c", "import os, time\nwhile not os.path.exists('sidecar-ready'): time.sleep(0.02)"]


@pytest.fixture
def runner(tmp_path):
    runner = Runner(tmp_path, stop_grace_s=2.0, sidecar=lambda run, replica: SIDECAR if replica.spec.task == "rank0" else None)
    yield runner
    runner.kill_all()


def start(runner: Runner, rank0: list[str], rank1: list[str] = SLEEP):
    run = runner.start("job", [ReplicaSpec("rank0", rank0, {}), ReplicaSpec("rank1", rank1, {})])
    wait_for(lambda: run.sidecars and any(line.text == "ready" for line in run.log_lines()), what="the sidecar")
    return run


def test_a_sidecar_beside_rank_0_is_stopped_once_the_job_ends(runner):
    run = start(runner, UNTIL_READY, UNTIL_READY)
    assert [s.spec.task for s in run.sidecars] == ["rank0"]
    assert run.wait(20) and run.state == "succeeded"
    (side,) = run.sidecars
    assert side.returncode == 0 and "stopped" in [line.text for line in run.log_lines()]  # SIGTERM, not a kill


def test_cancel_and_reset_stop_the_sidecar(runner):
    run = start(runner, SLEEP)
    pid = run.sidecars[0].popen.pid
    runner.cancel("job")
    assert run.wait(20) and run.state == "cancelled"
    assert not alive(pid) and "stopped" in [line.text for line in run.log_lines()]

    again = start(runner, SLEEP)
    pid = again.sidecars[0].popen.pid
    runner.reset()
    assert again.done and not alive(pid)


def test_a_sidecar_that_cannot_start_never_fails_the_job(runner):
    runner.sidecar = lambda run, replica: ["/nonexistent/reporter"] if replica.spec.task == "rank0" else None
    run = runner.start("job", [ReplicaSpec("rank0", [sys.executable, "-c", "pass"], {})])
    assert run.wait(20) and run.state == "succeeded" and run.sidecars == []
    assert any("reporter did not start beside rank0" in line.text for line in run.log_lines())


def test_no_reporter_without_log_json_or_when_turned_off():
    from gcpgpu.fakes.host.runner import MetricsTarget, Replica, Run

    jobs = LocalJobs(compute=None, address=lambda: "127.0.0.1:1")
    target = MetricsTarget("p", "us-central1-a", "cluster", "c")

    class Started:
        pid = 7

    def argv_for(args: list[str], env: dict[str, str]):
        spec = ReplicaSpec("c-0", [sys.executable, "-m", "torch.distributed.run", "-m", "gcpgpu.trainer", *args], env)
        run = Run("r", [spec], Path("."), iter(()), metrics=target)  # type: ignore[arg-type]
        return jobs.reporter_argv(run, Replica(spec, Started()))  # type: ignore[arg-type]

    assert argv_for(["--steps", "3"], {}) is None
    assert argv_for(["--log-json", "t.jsonl"], {"GCPGPU_METRICS": "0"}) is None
    argv = argv_for(["--log-json=t.jsonl"], {})
    assert argv is not None and argv[3:7] == ["--log-json", "t.jsonl", "--cluster", "c"]
    assert argv[-4:] == ["--emulator", "127.0.0.1:1", "--pid", "7"]


@pytest.mark.slow
def test_a_vertex_jobs_steps_are_what_its_made_up_metrics_follow(gcp):
    """Issue 38: the emulator's series of a job's replicas follow the steps they log (as a cluster's nodes do)."""
    pytest.importorskip("torch")
    result = cli("job", "submit", "--vertex", "--machine-type", "a2-highgpu-1g", "--nodes", "1", "--wait",
                 "--env", "GCPGPU_METRICS=0", "--", "--model", "tiny", "--data", "synthetic", "--steps", "3",
                 "--batch-size", "2", "--seq-len", "16", "--log-every", "1")
    assert result.exit_code == 0, result.output
    (job,) = gcp.vertex.started_jobs("test-proj")
    assert [s for _t, s in job["steps"]][-1] == 2 and all(job["start"] <= t for t, _s in job["steps"]), job
