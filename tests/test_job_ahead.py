"""Issue 28: a followed job is warned before a node's known end (a calendar-mode reservation's window
closing, scheduled host maintenance) and stopped while every node is up, so its trainers checkpoint on
SIGTERM (the path a recovery uses), rather than losing the steps since the last periodic checkpoint."""

from __future__ import annotations

from click.testing import CliRunner
from helpers import PROJECT, clients, wait_for

from gcpgpu import times
from gcpgpu.cli import main
from gcpgpu.cluster.session import Reporter
from gcpgpu.jobs.cluster import ahead, backend, nodes, recover
from gcpgpu.jobs.spec import JobSpec, validate

ZONE = "us-central1-a"


def cli(*argv: str):
    result = CliRunner().invoke(main, ["--project", PROJECT, *argv])
    assert result.exit_code == 0, result.output
    return result


class Said(Reporter):
    def __init__(self) -> None:
        self.lines: list[str] = []

    def step(self, key: str, text: str) -> None:
        self.lines.append(text)


def _submit(gcp, cluster: str, run_s: float = 3600.0):
    gcp.jobs.agent.simulated_run_s = run_s
    gcp.storage.insert_bucket(PROJECT, {"name": "bkt"})  # a job mounts only a bucket that exists, as on Google
    job = validate(JobSpec(target="cluster", cluster=cluster, image="busybox",
                           output_dir="gs://bkt/run"), project=PROJECT, region="us-central1", zone=None)
    jid = backend.submit(clients(gcp), PROJECT, job).jid
    wait_for(lambda: nodes.status(clients(gcp), PROJECT, jid)["state"] == "RUNNING", what="job running")
    return jid


def _follow(gcp, jid, monkeypatch) -> tuple[dict, list[str]]:
    monkeypatch.setattr(ahead, "clock", gcp.clock.now)
    said = Said()
    state = recover.Follower(clients(gcp), PROJECT, jid, 0, reporter=said, poll_s=0.1).run()
    return state, said.lines


def test_due_picks_the_soonest_end_within_the_lead_on_running_nodes():
    rows = [{"node": "c-0", "node_status": "RUNNING", "ends_at": "2026-01-01T00:20:00Z", "maintenance": {}},
            {"node": "c-1", "node_status": "RUNNING", "ends_at": "",
             "maintenance": {"window_start": "2026-01-01T00:05:00Z"}},
            {"node": "c-2", "node_status": "TERMINATED", "ends_at": "2026-01-01T00:01:00Z", "maintenance": {}}]
    from gcpgpu.times import parse_timestamp

    now = parse_timestamp("2026-01-01T00:00:00Z")
    soon = ahead.due(rows, lead_s=600, now=now)
    assert (soon.node, soon.what, int(soon.left_s)) == ("c-1", "host maintenance starts", 300)
    assert ahead.due(rows, lead_s=60, now=now) is None  # c-2's end is not the job's: the node is down
    assert ahead.due(rows, lead_s=1800, now=now).node == "c-1"


def test_a_followed_job_checkpoints_ahead_of_scheduled_maintenance(gcp, monkeypatch):
    cli("cluster", "up", "c", "--machine-type", "a2-highgpu-1g", "--nodes", "2", "--zone", ZONE, "--yes")
    jid = _submit(gcp, "c")
    gcp.faults.update({"maintenance": "c-1@5m"})
    state, said = _follow(gcp, jid, monkeypatch)
    assert any("host maintenance starts on c-1" in s and "checkpoint (SIGTERM) to gs://bkt/run" in s for s in said), said
    assert state["state"] == "CANCELLED" and state["cause"] == "stopped ahead", state
    assert "stopped ahead: host maintenance starts on c-1" in state["error"] and "--resume" in state["error"]
    assert {r["state"] for r in state["per_node"]} == {"CANCELLED"}  # every node's agent stopped it
    assert {r["node_status"] for r in state["per_node"]} == {"RUNNING"}  # before the window, not after


def test_maintenance_further_off_than_the_lead_leaves_the_job_alone(gcp, monkeypatch):
    cli("cluster", "up", "c", "--machine-type", "a2-highgpu-1g", "--nodes", "1", "--zone", ZONE, "--yes")
    jid = _submit(gcp, "c", run_s=2.0)
    gcp.faults.update({"maintenance": "c-0@2h"})
    state, said = _follow(gcp, jid, monkeypatch)
    assert state["state"] == "SUCCEEDED" and not [s for s in said if "maintenance" in s], (state, said)


def test_a_followed_job_on_a_calendar_reservation_checkpoints_before_its_window_ends(gcp, monkeypatch):
    from gcpgpu.cluster import reservations

    zone, mt = "us-central1-b", "a3-ultragpu-8g"
    cli("--zone", zone, "reservation", "create", "wk", "--machine-type", mt, "--count", "1",
        "--start", "1h", "--duration", "1d")
    monkeypatch.setattr(reservations, "POLL_SECONDS", 0.0)
    monkeypatch.setattr(reservations, "_sleep", lambda s: gcp.clock.advance(1800))
    cli("cluster", "up", "w", "--machine-type", mt, "--nodes", "1", "--zone", zone, "--reservation", "wk",
        "--wait-for-start", "--yes")
    ends = gcp.compute.get(PROJECT, f"zones/{zone}/instances", "w-0")["resourceStatus"]["scheduling"]["terminationTimestamp"]
    gcp.clock.advance(times.parse_timestamp(ends) - gcp.clock.now() - 5 * 60)
    jid = _submit(gcp, "w")
    state, said = _follow(gcp, jid, monkeypatch)
    assert any(f"its run ends on w-0 at {ends}" in s for s in said), said
    assert state["state"] == "CANCELLED" and state["cause"] == "stopped ahead", state
