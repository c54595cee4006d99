"""Goodput that means what it says (issues 49 and 50), and step lines that cannot break a job's status.

A job that never ran has no productive time; a queue's wait is `queued`; one step line with its own step
time counts; steps run twice after a recovery are `redone`, and the retry table says the same number;
numbering steps from 1,000,000 inflates nothing; a step number of 5,000 digits is a line like any other.
Made-up JobStates and Timelines (every second placed by hand), then the emulator.
"""

from __future__ import annotations

import json

import pytest

from gcpgpu.jobs import goodput
from gcpgpu.jobs.cluster.record import stamp
from gcpgpu.jobs.goodput import Attempt, Timeline
from gcpgpu.jobs.state import CANCELLED, RUNNING, SUCCEEDED, JobState

T0 = 1_800_000_000.0  # a made-up job's submission
GLOBAL = ["--project", "test-proj", "--region", "us-central1"]


def step(i: int, ms: float = 1000.0) -> str:
    return f"step {i:>6} | loss 5.0000 | lr 1.00e-03 | 9.1k tok/s/gpu | mfu n/a | {ms:.1f} ms | data 0.1%"


def at(s: float) -> str:
    return stamp(T0 + s)


def total(got: dict) -> float:
    return got["productive_s"] + sum(got["lost_s"].values())


def cluster_state(state: str, ended: float | None, **kw) -> JobState:
    return JobState(id="cluster:q:train-abc123", target="cluster", name="train", state=state, created=at(0),
                    ended=None if ended is None else at(ended), nnodes=2, **kw)


def of(state: JobState, lines: list[tuple[float, str]], now: float) -> dict:
    tl = goodput.timeline(state, [(T0 + t, "q-0", text) for t, text in lines], T0 + now)
    assert tl is not None
    return goodput.split(tl)


def cli(*argv: str, fmt: str | None = None):
    from click.testing import CliRunner

    from gcpgpu.cli import main

    return CliRunner().invoke(main, [*GLOBAL, *(["--format", fmt] if fmt else []), *argv])


# -- a job that never ran ----------------------------------------------------------------------------------
@pytest.mark.parametrize("in_queue", [True, False], ids=["slurm", "plain"])
def test_a_job_cancelled_while_queued_has_no_productive_time(in_queue):
    got = of(cluster_state(CANCELLED, 20, waits_in_queue=in_queue), [], now=20)
    assert got["productive_s"] == 0 and got["node_s"] == 2 * 20
    assert got["percent"] is None and got["reason"] == "never started"
    # On Slurm its wait was the queue's; a plain cluster's job that never reached its program never started up.
    assert got["lost_s"]["queued" if in_queue else "startup"] == 2 * 20 == total(got)


def test_a_vertex_job_cancelled_before_its_machines_came_has_no_productive_time():
    state = JobState(id="vertex:us-central1:1", target="vertex", state=CANCELLED, created=at(0), ended=at(40),
                     nodes=1, pools=[{"replicas": 1}])
    got = of(state, [], now=40)
    assert got["productive_s"] == 0 and got["lost_s"]["capacity"] == 40 and got["percent"] is None


def test_a_running_job_has_no_goodput_before_its_first_step_and_a_killed_one_none_productive():
    started = [{"node": "q-0", "started": at(5)}]
    before = of(cluster_state(RUNNING, None, per_node=started), [(6.0, "loading the data")], now=30)
    assert before["percent"] is None and before["reason"] == "no step logged yet" and before["productive_s"] == 0
    killed = of(cluster_state("FAILED", 30, per_node=started), [(6.0, "loading the data")], now=30)
    assert killed["productive_s"] == 0 and killed["percent"] == 0.0  # it ran, and nothing it did lasted


def test_a_command_without_step_lines_counts_its_run_only_when_it_succeeded():
    def run(succeeded: bool) -> dict:
        return goodput.split(Timeline(1, 0.0, 100.0, [Attempt(0.0, 100.0, started=25.0)], [(30.0, "epoch 1 done")],
                                      succeeded=succeeded))

    assert run(True)["productive_s"] == 75 and run(True)["lost_s"]["startup"] == 25 and run(True)["percent"] == 75.0
    assert run(False)["productive_s"] == 0 and run(False)["lost_s"]["startup"] == 100


# -- one step line --------------------------------------------------------------------------------------------
def test_one_step_line_counts_the_steps_it_covers_at_its_own_step_time():
    """The README's first job (--steps 10, the trainer's default --log-every 10) logs one line, step 9, whose
    120 ms per step covers the ten steps since the program started."""
    lines = [(20.0, step(9, ms=120.0)), (20.5, "gcpgpu-train: 10 steps; too few after the 3 warm-up steps to report speed")]
    got = goodput.split(Timeline(2, 0.0, 22.0, [Attempt(0.0, 22.0, started=10.0)], lines))
    assert got["productive_s"] == pytest.approx(2 * 10 * 0.12)
    assert got["percent"] == pytest.approx(100 * 2.4 / 44, abs=0.1) and got["percent"] > 0
    assert total(got) == pytest.approx(got["node_s"])


def test_a_running_job_s_steps_after_its_only_line_are_in_flight_not_stalled():
    """The trainer's first line (step 9 of a fresh start) covers ten steps: its cadence. Until ten more steps'
    time has passed since it, the job is stepping, not stalled; past that, its silence is stalled."""
    def at_now(now: float) -> dict:
        return goodput.split(Timeline(1, 0.0, now, [Attempt(0.0, now, started=5.0)], [(20.0, step(9, ms=1000.0))],
                                      ended=False))

    assert at_now(28.0)["lost_s"]["stalled"] == 0 and at_now(28.0)["productive_s"] == pytest.approx(18)
    assert at_now(40.0)["lost_s"]["stalled"] == pytest.approx(10) and at_now(40.0)["productive_s"] == pytest.approx(20)


# -- Slurm: queued, requeued, steps run twice ------------------------------------------------------------------
def test_a_preempted_slurm_job_s_queue_waits_are_queued_and_its_steps_run_again_are_redone():
    """2 nodes. Submitted at 0, it waits in Slurm's queue until its program starts at 30; steps 0..29 at
    35..64, one a second. Preempted (seen at 66) it is requeued and waits again until 100; resumed from step 20,
    steps 20..49 at 110..139; it ends at 142."""
    history = [{"attempt": 1, "at": at(66), "cause": "preempted", "node": "q-1", "delivered": at(100)}]
    lines = [(30.0, "no checkpoint in /ckpt: starting from step 0")] + [(35.0 + i, step(i)) for i in range(30)]
    lines += [(105.0, "resumed from /ckpt/step_00000020 at step 20")] + [(110.0 + i - 20, step(i)) for i in range(20, 50)]
    got = of(cluster_state(SUCCEEDED, 142, waits_in_queue=True, history=history, attempt=1), lines, now=142)
    lost = got["lost_s"]
    assert got["node_s"] == 2 * 142
    assert abs(total(got) - got["node_s"]) <= 0.05 * got["node_s"]
    assert lost["queued"] == pytest.approx(2 * (30 + 34))  # 0 -> 30 and the requeue's 66 -> 100, never productive
    assert lost["redone"] == pytest.approx(2 * 10)  # steps 20..29 ran twice
    assert got["productive_s"] == pytest.approx(2 * 50)  # steps 0..49, a second each: what its steps ran
    assert lost["capacity"] == lost["stalled"] == 0


# -- step numbers ---------------------------------------------------------------------------------------------
def test_numbering_steps_from_a_million_does_not_inflate_goodput():
    def run(first: int) -> dict:  # a user's command logging every 10th step, a second a step, from t=50
        lines = [(50.0 + 10 * i, f"step {first + 9 + 10 * i} loss=2.31") for i in range(5)]
        return goodput.split(Timeline(1, 0.0, 100.0, [Attempt(0.0, 100.0, started=5.0)], lines))

    assert run(1_000_000)["percent"] == run(0)["percent"] == 50.0
    assert run(1_000_000)["lost_s"] == run(0)["lost_s"]


@pytest.mark.parametrize("digits", [400, 5000])
def test_a_step_number_of_thousands_of_digits_is_ignored(digits):
    huge = "9" * digits
    lines = [(10.0 + i, step(i)) for i in range(5)] + [(20.0, f"step {huge} | loss 1.0 | lr 1e-3 | 1 tok/s/gpu | "
                                                               "mfu n/a | 1.0 ms | data 0%"), (21.0, f"step {huge} loss=1")]
    lines += [(22.0, f"resumed from x at step {huge}"), (23.0, f"saved checkpoint x (sync) in 1 s; steps blocked {huge} s")]
    got = goodput.split(Timeline(1, 0.0, 30.0, [Attempt(0.0, 30.0, started=5.0)], lines))
    assert got["productive_s"] == pytest.approx(5) and total(got) == pytest.approx(got["node_s"])


# -- the retry table and goodput count the same steps -----------------------------------------------------------
def test_the_retry_table_and_goodput_agree_on_the_steps_redone(gcp, monkeypatch):
    """A user's command (no resume line) lost at step 29 starts again at step 20: the retry table said
    `STEPS REDONE -` while goodput counted 10 s of redone; both say 10 steps now."""
    from gcpgpu.jobs import logs, route
    from gcpgpu.jobs.cluster import spent

    history = [{"attempt": 1, "at": at(45), "lost": ["q-1"], "cause": "preempted", "delivered": at(60),
                "last_step": 29, "log_every": 1}]
    state = cluster_state(SUCCEEDED, 95, history=history, attempt=1, recoveries=1)
    lines = [(10.0 + i, f"step {i} loss=2.0") for i in range(30)] + [(72.0 + i - 20, f"step {i} loss=1.9")
                                                                      for i in range(20, 40)]
    entries = [{"timestamp": at(t), "textPayload": text, "labels": {"ml.googleapis.com/task_name": "q-0"}}
               for t, text in lines]
    monkeypatch.setattr(route, "status", lambda *a: state)
    monkeypatch.setattr(spent, "with_spent", lambda clients, project, s: s)
    monkeypatch.setattr(logs, "entries", lambda *a, **k: iter(entries))
    shown = json.loads(cli("job", "status", state.id, fmt="json").stdout)
    (entry,) = shown["history"]
    assert entry["resumed_at"] == 20 and entry["steps_redone"] == entry["steps_redone_max"] == 10
    assert shown["goodput"]["lost_s"]["redone"] == pytest.approx(2 * 10)  # 10 steps of 1 s on 2 nodes
    table = cli("job", "status", state.id).output
    assert "STEPS REDONE" in table and "lost: redone" in table
    row = next(line for line in table.splitlines() if "preempted" in line)
    assert row.split()[-1] == "10", table
    # GOODPUT and the table's productive share are one figure, computed once.
    assert f"{shown['goodput']['percent']:.1f}% of" in table
    assert next(line for line in table.splitlines() if line.startswith("productive")).split()[-1] == \
        f"{shown['goodput']['percent']:.1f}%"


# -- on the emulator --------------------------------------------------------------------------------------------
def shown(job: str) -> dict:
    got = cli("job", "status", job, fmt="json")
    assert got.exit_code == 0 and got.exception is None, got.output
    return json.loads(got.stdout)


@pytest.mark.slow
def test_the_readme_s_first_cluster_job_has_goodput_above_zero(gcp):
    """README "Training jobs": `job submit --cluster jobs --wait -- --model tiny --steps 10 --seq-len 32` logs one
    step line (step 9, the trainer's default --log-every 10): it reported 0.0 %."""
    pytest.importorskip("torch")
    assert cli("cluster", "up", "jobs", "--machine-type", "a2-highgpu-1g", "--nodes", "2", "--yes").exit_code == 0
    run = cli("job", "submit", "--cluster", "jobs", "--wait", "--", "--model", "tiny", "--steps", "10", "--seq-len", "32")
    assert run.exit_code == 0, run.output
    got = shown(run.stdout.splitlines()[0])["goodput"]
    assert got["percent"] > 0 and got["productive_s"] > 0 and got["reason"] is None
    assert abs(total(got) - got["node_s"]) <= 0.05 * got["node_s"], got


def test_a_step_line_of_thousands_of_digits_breaks_no_job_status(gcp, tmp_path):
    """Issue 49: one line whose step has 400 or 5,000 digits ended `job status` (table and json) and `metrics
    report --job` in a traceback (OverflowError; ValueError: Exceeds the limit (4300 digits))."""
    from helpers import wait_for

    gcp.jobs.agent.simulated_run_s = 600.0  # of the emulator's clock: it runs until the test is done
    assert cli("cluster", "up", "t", "--machine-type", "a2-highgpu-1g", "--nodes", "1", "--zone", "us-central1-a",
               "--yes").exit_code == 0
    submitted = cli("job", "submit", "--cluster", "t", "--image", "busybox")
    assert submitted.exit_code == 0, submitted.output
    job = submitted.stdout.splitlines()[0]
    wait_for(lambda: shown(job)["state"] == "RUNNING", timeout=60, what="the job running")
    run = next(r for r in gcp.jobs.runner.all_runs() if r.id.startswith("cluster/"))
    for digits in (400, 5000):
        run.log("", "stdout", step(0).replace("step      0", "step " + "9" * digits))
        run.log("", "stdout", f"step {'9' * digits} loss=1.0")
    wait_for(lambda: "9" * 5000 in cli("job", "logs", job).output, timeout=60, what="the lines in the job's log")
    got = shown(job)["goodput"]
    assert got["productive_s"] == 0 and got["percent"] is None and got["reason"] == "no step logged yet"
    table = cli("job", "status", job)
    assert table.exit_code == 0 and table.exception is None, table.output
    assert "GOODPUT" in table.output and "- (no step logged yet)" in table.output
    report = cli("metrics", "report", "--job", job, "-o", str(tmp_path / "r.html"))
    assert report.exit_code == 0 and report.exception is None, report.output


@pytest.mark.slow
def test_a_slurm_job_cancelled_while_pending_shows_its_wait_as_queued_and_nothing_productive(gcp):
    """Issue 50: a job cancelled while queued showed 100 % of its node-time productive."""
    from helpers import wait_for

    from gcpgpu.fakes.guest.slurm import slurm_installed

    if slurm_installed() is not None:
        pytest.skip(str(slurm_installed()))
    quick = ["--model", "tiny", "--steps", "3", "--seq-len", "16", "--batch-size", "2", "--vocab-size", "256"]
    assert cli("cluster", "up", "q", "--machine-type", "a2-highgpu-1g", "--nodes", "2", "--zone", "us-central1-a",
               "--scheduler", "slurm", "--yes").exit_code == 0

    def submitted(*argv: str) -> str:
        got = cli("job", "submit", "--cluster", "q", *argv, fmt="json")
        assert got.exit_code == 0, got.output
        return json.loads(got.output[got.output.index("{"):])["id"]

    first = submitted("--name", "a", "--", "--model", "tiny", "--steps", "100000", "--seq-len", "16", "--batch-size", "2")
    second = submitted("--name", "b", "--", *quick)
    wait_for(lambda: shown(first)["state"] == "RUNNING", timeout=120, what="A running, B waiting behind it")
    assert cli("job", "cancel", second).exit_code == 0
    wait_for(lambda: shown(second)["state"] == "CANCELLED", timeout=60, what="B cancelled while pending")
    got = shown(second)["goodput"]
    assert got["productive_s"] == 0 and got["percent"] is None and got["reason"] == "never started"
    assert got["lost_s"]["queued"] == got["node_s"] > 0
    assert "- (never started)" in cli("job", "status", second).output
    assert cli("job", "cancel", first).exit_code == 0
    wait_for(lambda: shown(first)["state"] == "CANCELLED", timeout=60, what="A cancelled while running")
    assert cli("cluster", "down", "q", "--yes").exit_code == 0


def test_a_requeue_its_history_does_not_tell_of_is_read_from_the_log():
    """A Slurm job's record keeps its last start only. Without a history entry for its requeue, its log
    tells it: steps 0..29 at 35..64, then the program starting again (resumed at step 30, at 105; the record's
    start 100) and steps 30..49 at 110..129. The wait between is queued, not 46 s of steps (the `sweep` job's
    319.7 productive node-s of 402 while it ran about 206)."""
    lines = [(30.0, "no checkpoint in /ckpt: starting from step 0")] + [(35.0 + i, step(i)) for i in range(30)]
    lines += [(64.5, "gcpgpu.trainer: SIGTERM: stopped after step 29, checkpoint saved"), (101.0, "loading the data")]
    lines += [(105.0, "resumed from /ckpt/step_00000030 at step 30")] + [(110.0 + i - 30, step(i)) for i in range(30, 50)]
    got = of(cluster_state(SUCCEEDED, 132, waits_in_queue=True, started=at(100)), sorted(lines), now=132)
    assert got["lost_s"]["queued"] == pytest.approx(2 * (30 + 36))  # 0 -> 30, and its last line (64) -> 100
    assert got["productive_s"] == pytest.approx(2 * 50)
    assert total(got) == pytest.approx(got["node_s"])
