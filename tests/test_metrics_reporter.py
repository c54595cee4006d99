"""The trainer's numbers reach Cloud Monitoring through the reporter: bounded, batched, off-thread, soft."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import time

import pytest

from gcpgpu.gcp.clients import Clients
from gcpgpu.metrics.sources import TRAINER
from gcpgpu.node.reporter import JsonLinesTail, Reporter, main

PROJECT = "reporter-test"


class FakeClock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def record(step: int, tok: float = 1000.0, **kw) -> dict:
    return {"step": step, "loss": 4.0 - step / 100, "lr": 3e-4, "tokens_per_s": tok, "mfu": 0.4, "step_time_s": 0.5,
            "data_wait_frac": 0.02, "peak_mem_bytes": 2**30 + step, "world_size": 8, "warmup": False, **kw}


def append(path, *records: dict) -> None:
    with open(path, "a") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")


def written(gcp, metric: str, job: str = "demo") -> list[float]:
    """Every point stored for one trainer metric (newest last)."""
    return [p[2] for s in gcp.monitoring.series.values()
            if s.metric_type == TRAINER + metric and s.resource_labels["job"] == job for p in s.points]


@pytest.fixture
def client(gcp):
    return Clients(emulator=gcp.address, project=PROJECT).monitoring()


def test_json_lines_tail_reads_whole_lines_and_survives_a_restart(tmp_path):
    path = tmp_path / "log.jsonl"
    tail = JsonLinesTail(path)
    assert tail.read() == []  # not written yet
    path.write_text('{"step": 1}\n{"step": 2')
    assert tail.read() == [{"step": 1}]
    with open(path, "a") as f:
        f.write('}\nnot json\n[1, 2]\n{"step": 3}\n')
    assert tail.read() == [{"step": 2}, {"step": 3}]
    path.write_text('{"step": 1}\n')  # a new run truncates the log
    assert tail.read() == [{"step": 1}]


def test_one_batched_write_per_interval_with_the_intervals_averages(gcp, client, tmp_path):
    log = tmp_path / "train.jsonl"
    clock = FakeClock(time.time())
    rep = Reporter(log, project=PROJECT, kind="cluster", name="demo", client=client, clock=clock, interval_s=10)
    append(log, record(1, warmup=True, tok=10.0), record(2, tok=1000.0), record(3, tok=3000.0))
    assert rep.poll() is True
    assert len(gcp.requests.all(api="monitoring", contains="CreateTimeSeries")) == 1
    assert written(gcp, "tokens_per_s") == [2000.0 * 8]  # warm-up left out, per-GPU x world size
    assert written(gcp, "tokens_per_s_per_gpu") == [2000.0]
    assert written(gcp, "loss") == [pytest.approx((3.99 + 3.98 + 3.97) / 3)]
    assert written(gcp, "step") == [3.0] and written(gcp, "peak_memory") == [2**30 + 3]
    append(log, record(4), record(5))
    clock.t += 4
    assert rep.poll() is False  # inside the interval: nothing is sent, the records wait
    clock.t += 6
    assert rep.poll() is True
    assert written(gcp, "step") == [3.0, 5.0]
    clock.t += 30
    assert rep.poll() is False  # nothing new: nothing written
    assert len(gcp.requests.all(api="monitoring", contains="CreateTimeSeries")) == 2


def test_unknown_numbers_are_not_written_as_zeros(gcp, client, tmp_path):
    log = tmp_path / "train.jsonl"
    rep = Reporter(log, project=PROJECT, kind="job", name="123", client=client)
    append(log, record(1, mfu=None, tokens_per_s=float("nan")))
    assert rep.poll()
    assert written(gcp, "mfu", job="123") == [] and written(gcp, "tokens_per_s", job="123") == []
    (series,) = [s for s in gcp.monitoring.series.values() if s.metric_type == TRAINER + "loss"]
    assert series.resource_type == "generic_task"
    assert series.resource_labels == {"project_id": PROJECT, "location": "global", "namespace": "gcpgpu-vertex",
                                      "job": "123", "task_id": "0"}


def test_a_monitoring_outage_never_raises_is_logged_once_and_recovers(gcp, client, tmp_path, caplog):
    log = tmp_path / "train.jsonl"
    clock = FakeClock(time.time())
    rep = Reporter(log, project=PROJECT, kind="cluster", name="demo", client=client, clock=clock)
    gcp.faults.update({"error_rate": 1.0, "error_methods": ["POST"]})
    caplog.set_level(logging.DEBUG, logger="gcpgpu.node.reporter")
    for step in range(1, 6):
        append(log, record(step))
        clock.t += 400  # past any back-off
        assert rep.poll() is False
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "training goes on" in warnings[0].message
    gcp.faults.update({"error_rate": 0.0})
    clock.t += 400
    assert rep.poll() is True
    assert written(gcp, "step") == [5.0]  # what piled up is sent as one point, not five
    assert "again" in caplog.records[-1].message


def test_a_broken_client_factory_is_soft_too(tmp_path):
    def broken():
        raise RuntimeError("no credentials")

    log = tmp_path / "train.jsonl"
    append(log, record(1))
    rep = Reporter(log, project=PROJECT, kind="cluster", name="demo", client_factory=broken)
    assert rep.poll() is False and rep.failures == 1


def test_the_background_thread_sends_while_training_goes_on(gcp, client, tmp_path):
    gcp.monitoring.min_point_spacing_s = 0.0  # this test writes faster than the real API allows
    log = tmp_path / "train.jsonl"
    now = [1_000_000.0]  # the reporter's clock: each record comes a whole interval after the last write
    rep = Reporter(log, project=PROJECT, kind="cluster", name="demo", client=client, interval_s=0.2,
                   clock=lambda: now[0]).start()
    try:
        for step in range(1, 4):
            now[0] += 1
            append(log, record(step))
            deadline = time.monotonic() + 10
            while step not in written(gcp, "step") and time.monotonic() < deadline:
                time.sleep(0.05)
            assert step in written(gcp, "step")
    finally:
        now[0] += 1
        append(log, record(9))  # perhaps after the thread's last poll: stop() still sends it
        rep.stop()
    assert written(gcp, "step")[-1] == 9.0  # stop() sends what was left


def test_the_sidecar_follows_the_trainer_until_it_exits(gcp, tmp_path):
    log = tmp_path / "train.jsonl"
    append(log, record(7))
    trainer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1.5)"])
    code = main(["--log-json", str(log), "--cluster", "demo", "--project", PROJECT, "--pid", str(trainer.pid),
                 "--emulator", gcp.address, "--task-id", "0", "--location", "us-central1-a"])
    trainer.wait()
    assert code == 0
    assert written(gcp, "step") == [7.0]


@pytest.mark.parametrize("args, words", [
    (["--log-json", "x"], "exactly one of --cluster NAME or --job ID"),
    (["--log-json", "x", "--cluster", "Bad!"], "not a cluster name"),
    (["--log-json", "x", "--job", "abc"], "not a Vertex AI custom job"),
    (["--log-json", "x", "--cluster", "demo", "--interval", "2"], "below 10 s"),
])
def test_the_sidecar_refuses_bad_input_with_exit_2(args, words, capsys, monkeypatch):
    for var in ("GCPGPU_CLUSTER", "CLOUD_ML_JOB_ID"):
        monkeypatch.delenv(var, raising=False)
    assert main(args) == 2
    err = capsys.readouterr().err
    assert words in err and len(err.strip().splitlines()) == 1


def test_the_trainer_package_imports_nothing_of_googles():
    code = ("import sys, gcpgpu.trainer, gcpgpu.trainer.metrics; "
            "print([m for m in sys.modules if m.startswith(('google.api', 'google.cloud.', 'google.protobuf', 'grpc'))])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
