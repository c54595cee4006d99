"""Goodput (jobs/goodput.py): a job's node-time split into productive time and what was lost, and where.

The arithmetic on made-up timelines (every second placed by hand), then on the emulator: a cluster
job preempted once and a Vertex job, whose parts add up to their node-time within 5 %.
"""

from __future__ import annotations

import pytest

from gcpgpu.jobs import goodput
from gcpgpu.jobs.goodput import Attempt, Timeline


def step(i: int) -> str:
    return f"step {i:>6} | loss 5.0000 | lr 1.00e-03 | 9.1k tok/s/gpu | mfu n/a | 1000.0 ms | data 0.1%"


def saved(i: int, blocked: float) -> str:
    return f"saved checkpoint gs://b/run/checkpoints/step_{i:08d} (sync) in {blocked:.2f} s; steps blocked {blocked:.3f} s"


def total(got: dict) -> float:
    return got["productive_s"] + sum(got["lost_s"].values())


def preempted_once() -> Timeline:
    """2 nodes. Attempt 0: put on the nodes at 0, first step line at 10 (steps 0..29 at 10..39, one a second,
    a save at step 10 blocking 0.5 s), its node lost and seen at 45. Back on the nodes at 60; resumed from
    step 20 at 70, steps 20..39 at 72..91 (a save at step 30), the last save (1 s) at 92, the end at 95."""
    lines = [(5.0, "no checkpoint in /gcs/b/run/checkpoints: starting from step 0")]
    lines += [(10.0 + i, step(i)) for i in range(30)]
    lines += [(20.2, saved(10, 0.5)), (70.0, "resumed from gs://b/run/checkpoints/step_00000020 at step 20")]
    lines += [(72.0 + i - 20, step(i)) for i in range(20, 40)]
    lines += [(82.3, saved(30, 0.5)), (92.5, saved(40, 1.0))]
    attempts = [Attempt(0.0, 45.0, "preempted"), Attempt(60.0, 95.0)]
    return Timeline(2, 0.0, 95.0, attempts, sorted(lines), pull_s=6.0)


def test_a_preempted_job_s_parts_add_up_to_its_node_time_and_each_lands_where_it_happened():
    got = goodput.split(preempted_once())
    assert got["node_s"] == 2 * 95
    assert total(got) == pytest.approx(got["node_s"], abs=0.5)
    lost = got["lost_s"]
    # Steps 20..29 ran twice (10 s); each step logs a line, so none ran unlogged past the last: on 2 nodes.
    assert lost["redone"] == pytest.approx(2 * 10)
    # The loss seen (45) -> back on the nodes (60), and the last line (39) -> the loss seen.
    assert lost["recovery"] == pytest.approx(2 * (15 + 6))
    assert lost["checkpoint"] == pytest.approx(2 * (0.5 + 0.5 + 1.0))
    # Start-up: 0->10 and 60->72 less one step each, and the exit after the last step (91 -> 95) less the
    # last save (1 s): 9 + 11 + 3 s on 2 nodes, of which the nodes' pull (6 node-s) is image_pull.
    assert lost["image_pull"] == 6.0
    assert lost["startup"] == pytest.approx(2 * 23 - 6)
    assert lost["capacity"] == lost["stalled"] == 0
    assert got["productive_s"] == pytest.approx(2 * (20 - 0.5 + 20 - 0.5))  # steps 0..19 and 20..39, less 2 saves
    assert got["percent"] == pytest.approx(100 * got["productive_s"] / got["node_s"], abs=0.1)


def test_a_vertex_job_s_wait_for_its_machines_is_capacity():
    lines = [(40.0 + i, step(i)) for i in range(50)]
    got = goodput.split(Timeline(4, 0.0, 100.0, [Attempt(30.0, 100.0, started=30.0)], lines))
    assert got["lost_s"]["capacity"] == 4 * 30
    assert got["lost_s"]["startup"] == pytest.approx(4 * (9 + 11))  # 30 -> 40 less step 0, and the end's 11 s
    assert got["productive_s"] == pytest.approx(4 * 50)
    assert total(got) == pytest.approx(got["node_s"])


def test_a_user_command_s_documented_step_lines_count_its_steps():
    lines = [(20.0 + 2 * i, f"step {i} loss={5 - i / 100:.2f}") for i in range(10)]
    got = goodput.split(Timeline(1, 0.0, 50.0, [Attempt(0.0, 50.0, started=5.0)], lines))
    assert got["productive_s"] == pytest.approx(20)  # 10 steps of 2 s: step 0 took 18 -> 20, the rest 20 -> 38
    assert got["lost_s"]["startup"] == pytest.approx(30)


def test_a_stalled_attempt_s_silence_is_stalled_not_recovery():
    lines = [(10.0 + i, step(i)) for i in range(10)]
    lines += [(200.0, "resumed from gs://b/c/step_00000005 at step 5")] + [(201.0 + i - 5, step(i)) for i in range(5, 10)]
    got = goodput.split(Timeline(1, 0.0, 210.0, [Attempt(0.0, 150.0, "stalled"), Attempt(160.0, 210.0)], lines))
    assert got["lost_s"]["stalled"] == pytest.approx(150 - 19)  # after step 9's line
    assert got["lost_s"]["recovery"] == pytest.approx(10)
    assert got["lost_s"]["redone"] == pytest.approx(5)
    assert total(got) == pytest.approx(got["node_s"])


def test_a_lost_attempt_s_unlogged_steps_are_redone_unless_its_successor_resumed_past_them():
    def lost_after(resumed: int) -> dict:
        lines = [(10.0 + i, step(i)) for i in range(0, 20, 5)]  # steps 0, 5, 10, 15 at 10, 15, 20, 25
        lines += [(60.0, f"resumed from gs://b/c/step_{resumed:08d} at step {resumed}"), (61.0, step(resumed))]
        return goodput.split(Timeline(1, 0.0, 62.0, [Attempt(0.0, 40.0, "preempted", log_every=5),
                                                     Attempt(50.0, 62.0)], lines))

    # Resumed at 16: steps 16..19 may have run after step 15's line and were lost (4 x 1 s).
    assert lost_after(16)["lost_s"]["redone"] == pytest.approx(4)
    # Resumed at 18: steps 16 and 17 ran and were kept (the checkpoint says so); 18 and 19 at most were lost.
    assert lost_after(18)["lost_s"]["redone"] == pytest.approx(2)
    assert lost_after(18)["productive_s"] == pytest.approx(lost_after(16)["productive_s"] + 2)


def test_a_running_job_s_last_silence_past_a_step_is_stalled():
    lines = [(10.0 + i, step(i)) for i in range(10)]
    got = goodput.split(Timeline(1, 0.0, 60.0, [Attempt(0.0, 60.0)], lines, ended=False))
    assert got["lost_s"]["stalled"] == pytest.approx(60 - 19 - 1)
    assert total(got) == pytest.approx(got["node_s"])


def test_the_series_written_to_monitoring_name_the_job_and_each_part():
    from gcpgpu.jobs import ids
    from gcpgpu.metrics.sources import NAMESPACE

    got = goodput.split(preempted_once())
    series = goodput.series("p", ids.parse("cluster:c:train-abc123"), got, 1000.0)
    by = {(s["metric"]["type"].rsplit("/", 1)[1], s["metric"]["labels"].get("part")): s for s in series}
    assert by[("goodput", None)]["points"][0]["value"]["double_value"] == got["percent"]
    assert by[("lost_s", "redone")]["points"][0]["value"]["double_value"] == got["lost_s"]["redone"]
    labels = by[("node_s", None)]["resource"]["labels"]
    assert labels["namespace"] == NAMESPACE["cluster"] == goodput.NAMESPACE["cluster"] and labels["job"] == "c"
    assert {s["metric"]["labels"]["job_id"] for s in series} == {"train-abc123"}


# -- on the emulator -------------------------------------------------------------------------------------------
GLOBAL = ["--project", "test-proj", "--region", "us-central1"]
STEPS = 20
CKPT_EVERY = 5  # the preemption lands after the second checkpoint (step 10), ten steps before the end


def cli(*argv: str, fmt: str | None = None):
    from click.testing import CliRunner

    from gcpgpu.cli import main

    return CliRunner().invoke(main, [*GLOBAL, *(["--format", fmt] if fmt else []), *argv])


def trainer(run: str) -> list[str]:
    return ["--model", "tiny", "--parallel", "ddp", "--precision", "fp32", "--data", "synthetic", "--steps",
            str(STEPS), "--batch-size", "8", "--seq-len", "32", "--lr", "1e-3", "--warmup-steps", "5",
            "--log-every", "1", "--ckpt-every", str(CKPT_EVERY)]


def check_adds_up(got: dict) -> None:
    assert set(got) == {"percent", "reason", "productive_s", "node_s", "lost_s", "share"}
    assert set(got["lost_s"]) == set(goodput.PARTS) and set(got["share"]) == {"productive", *goodput.PARTS}
    assert got["node_s"] > 0 and 0 < got["percent"] <= 100
    assert abs(total(got) - got["node_s"]) <= 0.05 * got["node_s"], got


def written(gcp, job: str) -> dict[str, float]:
    """The goodput series Cloud Monitoring holds for `job` (an id's last part): figure -> value."""
    from gcpgpu.gcp.clients import Clients

    client = Clients(emulator=gcp.address, project="test-proj").monitoring()
    now = int(gcp.clock.now()) + 60
    out = {}
    for figure in ("goodput", "node_s", "lost_s"):
        for ts in client.list_time_series(request={
                "name": "projects/test-proj", "filter": f'metric.type = "{goodput.METRIC}{figure}" AND '
                f'metric.labels.job_id = "{job}"', "interval": {"start_time": {"seconds": now - 3600},
                                                                "end_time": {"seconds": now}}}):
            out[figure + (f":{ts.metric.labels['part']}" if "part" in ts.metric.labels else "")] = \
                ts.points[0].value.double_value
    return out


@pytest.mark.slow
def test_a_cluster_job_preempted_once_has_its_goodput_and_its_parts_add_up(gcp):
    import json
    import threading

    pytest.importorskip("torch")
    gcp.faults.preempt_grace_s = 3.0
    gcp.jobs.agent.pull_s = 1.0  # a node's first pull of the image; it holds it after
    up = cli("cluster", "up", "c", "--machine-type", "a2-highgpu-1g", "--nodes", "2", "--zone", "us-central1-a",
             "--spot", "--prepull", "none", "--yes")  # cold pulls, each counted (tests/test_cluster_prepull.py: warm)
    assert up.exit_code == 0, up.output
    gcp.storage.insert_bucket("test-proj", {"name": "bkt"})  # a job mounts only a bucket that exists, as on Google
    bucket = gcp.jobs.agent.storage.root / "gcs" / "bkt"

    def preempt_mid_run() -> None:
        from helpers import wait_for

        wait_for(lambda: (bucket / "run" / "checkpoints" / f"step_{2 * CKPT_EVERY:08d}").is_dir(), 300,
                 "the second checkpoint")
        gcp.faults.preempt("c-1")

    threading.Thread(target=preempt_mid_run, daemon=True).start()
    run = cli("job", "submit", "--cluster", "c", "--output-dir", "gs://bkt/run", "--wait",
              "--env", "GCPGPU_METRICS=0", "--", *trainer("run"))
    assert run.exit_code == 0, run.output
    job_id = run.stdout.splitlines()[0]
    status = json.loads(cli("job", "status", job_id, fmt="json").stdout)
    assert status["state"] == "SUCCEEDED" and status["recoveries"] == 1
    assert status["history"][0]["delivered"] >= status["history"][0]["at"]
    got = status["goodput"]
    check_adds_up(got)
    lost = got["lost_s"]
    assert lost["recovery"] > 0 and lost["checkpoint"] > 0 and lost["startup"] > 0
    # Both nodes pulled for the first attempt; for the second only the new c-1 did (c-0 holds the image).
    assert status["history"][0]["pull_s"] == pytest.approx(2.0)
    assert {r["node"]: r["pull_s"] for r in status["per_node"]} == {"c-0": 0.0, "c-1": pytest.approx(1.0)}
    assert lost["image_pull"] == pytest.approx(3.0)
    if status["steps_redone"]:  # the preemption's own checkpoint may leave nothing to redo
        assert lost["redone"] > 0
    table = cli("job", "status", job_id).output
    assert "GOODPUT" in table and f"{got['percent']:.1f}%" in table and "lost: recovery" in table
    assert "PULL S" in table and "lost: image pull" in table
    # The leader that wrote the end wrote its goodput to Cloud Monitoring too.
    seen = written(gcp, job_id.rsplit(":", 1)[1])
    assert seen["goodput"] == pytest.approx(got["percent"], abs=2)
    assert seen["lost_s:recovery"] > 0 and seen["node_s"] > 0


@pytest.mark.slow
def test_a_vertex_job_has_its_goodput_and_its_parts_add_up(gcp):
    import json

    pytest.importorskip("torch")
    result = cli("job", "submit", "--vertex", "--machine-type", "a2-highgpu-1g", "--nodes", "2", "--wait",
                 "--", *trainer("v")[:-2])
    assert result.exit_code == 0, result.output
    job_id = result.stdout.splitlines()[0]
    status = json.loads(cli("job", "status", job_id, fmt="json").stdout)
    got = status["goodput"]
    check_adds_up(got)
    assert got["productive_s"] > 0 and got["lost_s"]["recovery"] == got["lost_s"]["redone"] == 0
    assert written(gcp, job_id.rsplit(":", 1)[1])["goodput"] == pytest.approx(got["percent"], abs=2)


def test_a_recovered_job_s_times_are_all_on_the_clock_its_record_is_stamped_by(gcp, monkeypatch):
    """Every time a job's records hold is stamped on gcpgpu.gcp.clock (jobs/cluster/record.py's stamp): with the
    emulator's clock a day ahead of this machine's, a job recovered from a preemption still has its loss seen
    after it was created, its next attempt delivered after the loss, and goodput's parts that add up, the
    recovery taking what the record says it took and no day of it; the attempt's delivery is stamped before its
    nodes were told, not when the follower got round to writing it down."""
    import json
    import threading

    from helpers import clients, wait_for

    from gcpgpu.jobs.cluster import backend, recover
    from gcpgpu.jobs.cluster.placement import Asked
    from gcpgpu.jobs.spec import JobSpec, validate
    from gcpgpu.times import parse_timestamp

    gcp.faults.preempt_grace_s = 0.0
    gcp.jobs.agent.simulated_run_s = 600.0  # of the emulator's clock: each attempt runs until the test moves it
    assert cli("cluster", "up", "t", "--machine-type", "a2-highgpu-1g", "--nodes", "2", "--zone", "us-central1-a",
               "--spot", "--yes").exit_code == 0
    gcp.clock.advance(86400.0)  # the cloud's clock a day ahead of the wall's
    c = clients(gcp)
    job = validate(JobSpec(target="cluster", cluster="t", image="busybox"), project="test-proj",
                   region="us-central1", zone=None)
    jid = backend.submit(c, "test-proj", job, Asked(recover=1)).jid
    moved = threading.Event()
    put_on_nodes = recover.deliver

    def deliver_then_lag(*a, **k):  # the nodes run attempt 1 (and the clock moves on) before deliver returns
        got = put_on_nodes(*a, **k)
        if got.attempt == 1:
            wait_for(moved.is_set, timeout=120, what="the clock moved past attempt 1's run")
        return got

    monkeypatch.setattr(recover, "deliver", deliver_then_lag)
    ended: list = []
    follower = threading.Thread(target=lambda: ended.append(recover.Follower(c, "test-proj", jid, 1, poll_s=0.1).run()),
                                daemon=True)
    follower.start()

    def shown() -> dict:
        got = cli("job", "status", str(jid), fmt="json")
        assert got.exit_code == 0, got.output
        return json.loads(got.stdout)

    wait_for(lambda: shown()["state"] == "RUNNING", timeout=60, what="attempt 0 running")
    gcp.clock.advance(120.0)
    gcp.faults.preempt("t-1")
    wait_for(lambda: (s := shown())["attempt"] == 1 and s["state"] == "RUNNING", timeout=120, what="attempt 1")
    gcp.clock.advance(601.0)  # attempt 1's run ends
    moved.set()
    follower.join(timeout=120)
    assert ended and ended[0].state == "SUCCEEDED", ended
    status = shown()
    created, done = parse_timestamp(status["created"]), parse_timestamp(status["ended"])
    (entry,) = status["history"]
    seen, delivered = parse_timestamp(entry["at"]), parse_timestamp(entry["delivered"])
    assert created + 120 <= seen <= delivered <= done, (status["created"], entry, status["ended"])
    got = status["goodput"]
    assert total(got) == pytest.approx(got["node_s"], rel=0.01)
    assert got["node_s"] == pytest.approx(2 * (done - created), abs=2)
    assert got["lost_s"]["recovery"] <= 2 * (delivered - seen) + 2  # the recovery as its record tells it
    assert got["productive_s"] >= 2 * 600  # attempt 1 ran its 600 s on both nodes, productive (no step lines)
