"""Synthetic metrics follow what runs (issue 14 item 7) and GPU memory reads the used state (item 5).

A fresh cluster with no job is idle in `metrics tail`; a job the emulator's agent runs makes its
nodes busy and leaves the others idle; GPU memory is used / (used + free) of the series the
emulator writes per memory_state, as the Ops Agent does.
"""

from __future__ import annotations

import json
import re
import time

import pytest
from click.testing import CliRunner

from gcpgpu.cli import main
from gcpgpu.fakes.monitoring.testing import emulated_cluster
from gcpgpu.gcp.clients import Clients

PROJECT = "metrics-test"
UTIL = "agent.googleapis.com/gpu/utilization"
MEMORY = "agent.googleapis.com/gpu/memory/bytes_used"


def cli(*argv: str):
    return CliRunner().invoke(main, ["--project", PROJECT, "--region", "us-central1", *argv])


def tail_rows(*argv: str) -> list[dict]:
    result = cli("metrics", "tail", "--once", "--format", "json", *argv)
    assert result.exit_code == 0, result.output
    return [json.loads(line) for line in result.stdout.splitlines()]


def latest(client, metric_type: str, end: float, flt: str = "") -> dict[str, float]:
    """The newest point per VM of one metric (GPUs of a VM averaged), from the emulator's clock."""
    series = client.list_time_series(request={
        "name": f"projects/{PROJECT}", "filter": f'metric.type = "{metric_type}"' + flt,
        "interval": {"start_time": {"seconds": int(end - 600)}, "end_time": {"seconds": int(end)}},
        "aggregation": {"alignment_period": {"seconds": 60}, "per_series_aligner": "ALIGN_MEAN",
                        "cross_series_reducer": "REDUCE_MEAN", "group_by_fields": ["metric.instance_name",
                                                                                  "resource.instance_id"]}})
    return {s.resource.labels["instance_id"]: s.points[0].value.double_value for s in series}


def test_a_fresh_cluster_with_no_job_is_idle(gcp):
    emulated_cluster(gcp, "fresh", 4, busy=False)
    rows = tail_rows("--cluster", "fresh")
    nodes = [r for r in rows if r["kind"] == "node"]
    assert len(nodes) == 4
    for node in nodes:
        assert node["gpu_util_pct"] < 1 and node["gpu_mem_pct"] < 2
        assert node["net_sent_gbps"] < 0.01 and node["net_recv_gbps"] < 0.01
        assert node["straggler"] is False  # idle is not slow


def test_gpu_memory_is_used_over_used_plus_free_of_the_agents_series(gcp):
    (vm,) = emulated_cluster(gcp, "mem", 1)
    client = Clients(emulator=gcp.address, project=PROJECT).monitoring()
    end = time.time()
    states = {}
    for state in ("used", "free"):
        got = client.list_time_series(request={
            "name": f"projects/{PROJECT}", "filter": f'metric.type = "{MEMORY}" AND metric.labels.memory_state = "{state}"',
            "interval": {"start_time": {"seconds": int(end - 300)}, "end_time": {"seconds": int(end)}},
            "aggregation": {"alignment_period": {"seconds": 60}, "per_series_aligner": "ALIGN_MEAN",
                            "cross_series_reducer": "REDUCE_SUM", "group_by_fields": ["resource.instance_id"]}})
        (series,) = list(got)
        states[state] = series.points[0].value.double_value
    expected = states["used"] / (states["used"] + states["free"]) * 100
    assert 60 < expected < 80  # a training job holds most of its GPUs' memory
    (node,) = [r for r in tail_rows("--cluster", "mem") if r["kind"] == "node"]
    assert node["gpu_mem_pct"] == pytest.approx(expected, rel=0.02)
    gpus = [r for r in tail_rows("--cluster", "mem", "--gpus") if r["kind"] == "gpu"]
    assert len(gpus) == 8 and all(60 < g["gpu_mem_pct"] < 80 for g in gpus)  # per GPU too, not ~100 %
    # Each GPU's two series add up to its memory (80 GiB on an H100): summing them all is not "used".
    all_series = list(client.list_time_series(request={
        "name": f"projects/{PROJECT}", "filter": f'metric.type = "{MEMORY}" AND resource.labels.instance_id = "{vm["id"]}"',
        "interval": {"start_time": {"seconds": int(end - 60)}, "end_time": {"seconds": int(end)}}}))
    assert {s.metric.labels["memory_state"] for s in all_series} == {"used", "free"} and len(all_series) == 16
    gpu0 = [s.points[0].value.double_value for s in all_series if s.metric.labels["gpu_number"] == "0"]
    assert sum(gpu0) == pytest.approx(80 * 2**30, rel=1e-6)


def test_a_job_the_agent_runs_makes_its_nodes_busy_and_the_rest_stay_idle(gcp):
    vms = emulated_cluster(gcp, "c", 4, busy=False)
    gcp.jobs.agent.simulated_run_s = 600  # a job the emulator does not run itself: RUNNING until cancelled
    submitted = cli("job", "submit", "--cluster", "c", "--nodes", "2",
                    "--image", "busybox", "--command", "sleep 600")
    assert submitted.exit_code == 0, submitted.output
    job_id = submitted.stdout.splitlines()[0]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        status = json.loads(cli("--format", "json", "job", "status", job_id).stdout)
        if [n["state"] for n in status["per_node"]] == ["RUNNING", "RUNNING"]:
            break
        time.sleep(0.2)
    assert [n["state"] for n in status["per_node"]] == ["RUNNING", "RUNNING"]

    gcp.clock.advance(120)  # two of the agents' minutes later, by the emulator's clock
    client = Clients(emulator=gcp.address, project=PROJECT).monitoring()
    util = latest(client, UTIL, gcp.clock.now())
    ids = [vm["id"] for vm in vms]
    assert all(util[i] > 80 for i in ids[:2]), util  # ranks 0 and 1 run the job
    assert all(util[i] < 1 for i in ids[2:]), util  # the others run nothing

    assert cli("job", "cancel", job_id, "--wait").exit_code == 0
    gcp.clock.advance(120)
    util = latest(client, UTIL, gcp.clock.now())
    assert all(v < 1 for v in util.values()), util  # the job is over: every node idle again


def test_a_jobs_tail_says_no_data_yet_then_ended_and_never_shows_old_numbers_as_live(gcp):
    """Issue 24 item 6: `metrics tail` showed 0 % GPU for the first minute of a job (the idle minute before it)
    and went on showing the trainer's tokens/s after the job had ended."""
    from gcpgpu.node.reporter import Reporter

    emulated_cluster(gcp, "c", 2, busy=False)
    gcp.jobs.agent.simulated_run_s = 600
    reporter = Reporter("/nonexistent", project=PROJECT, kind="cluster", name="c",
                        client=Clients(emulator=gcp.address, project=PROJECT).monitoring())
    reporter.pending.add({"step": 90, "tokens_per_s": 5000.0, "world_size": 2, "mfu": 0.4})
    assert reporter.flush()  # an earlier job's throughput, still in the cluster's series
    gcp.clock.advance(1.1)  # job start times are whole seconds: the job starts in a later second than that point
    submitted = cli("job", "submit", "--cluster", "c", "--image", "busybox", "--command", "sleep 600")
    assert submitted.exit_code == 0, submitted.output
    job_id = submitted.stdout.splitlines()[0]
    deadline = time.monotonic() + 30
    while json.loads(cli("--format", "json", "job", "status", job_id).stdout)["state"] != "RUNNING":
        assert time.monotonic() < deadline
        time.sleep(0.2)

    *nodes, total = tail_rows("--job", job_id)
    for node in nodes:  # the newest GPU sample is the idle minute before the job: not the job's 0 %
        assert node["gpu_util_pct"] is None and node["note"].startswith("no data yet (job started "), node
    assert total["tokens_per_s"] is None and total["note"].startswith("no data yet"), total

    assert cli("job", "cancel", job_id, "--wait").exit_code == 0
    *_, total = tail_rows("--job", job_id)
    assert total["tokens_per_s"] is None and total["mfu"] is None
    assert total["note"].startswith("no data yet"), total  # the job ended without reporting: still not its numbers
    table = cli("metrics", "tail", "--once", "--job", job_id)
    assert table.exit_code == 0, table.output
    assert f"job {job_id} ended CANCELLED at " in " ".join(table.stdout.split())  # the title says so


def test_the_trainers_numbers_go_stale_when_it_falls_silent(gcp):
    """Without a job to watch (--cluster), tokens/s the reporter last wrote minutes ago are not live."""
    from gcpgpu.metrics.tail import Tail
    from gcpgpu.node.reporter import Reporter

    emulated_cluster(gcp, "c", 2)
    client = Clients(emulator=gcp.address, project=PROJECT)
    reporter = Reporter("/nonexistent", project=PROJECT, kind="cluster", name="c", client=client.monitoring())
    reporter.pending.add({"step": 10, "tokens_per_s": 5000.0, "world_size": 2, "mfu": 0.4})
    assert reporter.flush()
    written = time.time()
    fresh = Tail(client, PROJECT, "cluster", "c", clock=lambda: written + 60).refresh()
    assert fresh.rows[-1].values["tokens_per_s"] == 10000.0
    later = Tail(client, PROJECT, "cluster", "c", clock=lambda: written + 400).refresh()
    assert later.rows[-1].values["tokens_per_s"] is None
    assert not fresh.rows[-1].note
    assert re.match(r"trainer silent for over [56] min; last 10\.0k tok/s", later.rows[-1].note), later.rows[-1].note


def test_once_a_job_has_ended_its_runs_averages_are_held_and_said_to_be_so(gcp):
    """A Vertex job that reported 8k tokens/s, watched during its run and after its end (the emulator's clock).
    Issue 38: after the end every cell was `-`, and later "no data yet" for a job that had data: its last
    numbers stay, from its run (its averages, issue 50), however long ago it ended, and its rows say so."""
    from gcpgpu.metrics.render import records
    from gcpgpu.metrics.tail import Tail
    from gcpgpu.node.reporter import Reporter

    gcp.vertex.timings["simulated_run_s"] = 600.0
    # An image with no command stays simulated: its run follows the emulator's clock, which the test moves.
    submitted = cli("job", "submit", "--vertex", "--machine-type", "a2-highgpu-1g", "--nodes", "2",
                    "--image", "busybox")
    assert submitted.exit_code == 0, submitted.output
    job_id = submitted.stdout.splitlines()[0]
    number = job_id.rsplit(":", 1)[1]
    client = Clients(emulator=gcp.address, project=PROJECT)
    gcp.clock.advance(300)
    reporter = Reporter("/nonexistent", project=PROJECT, kind="job", name=number, client=client.monitoring(),
                        clock=gcp.clock.now)
    reporter.pending.add({"step": 50, "tokens_per_s": 4000.0, "world_size": 2, "mfu": 0.3})
    assert reporter.flush()
    session = Tail(client, PROJECT, "job", number, clock=gcp.clock.now, job=job_id)

    running = session.refresh()
    *tasks, total = running.rows
    assert total.values["tokens_per_s"] == 8000.0 and not total.note  # its own numbers, live
    assert all(t.values["gpu_util_pct"] is not None and not t.note for t in tasks)

    gcp.clock.advance(400)  # it ended 100 s ago
    for later in (0, 3600):  # and an hour after that, long past the tail's 15 minutes
        gcp.clock.advance(later)
        ended = session.refresh()
        *tasks, total = ended.rows
        assert total.values["tokens_per_s"] == 8000.0
        assert re.fullmatch(r"job ended \d\d:\d\d:\d\d: averages over its run", total.note), total.note
        assert all(t.values["gpu_util_pct"] > 80 and t.note == total.note for t in tasks), tasks  # busy to its end
        assert ended.job is not None and ended.job.state == "SUCCEEDED"
    table = Tail(client, PROJECT, "job", number, clock=gcp.clock.now, job=job_id)
    rows = [r for r in records(table.refresh())]
    assert all(r["gpu_util_pct"] is not None and r["note"].endswith("averages over its run") for r in rows), rows
