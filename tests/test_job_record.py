"""A cluster job's life, told truthfully by `job status` while it happens: the done-when tests of its
record (jobs/cluster/store.py).

A script polls `job status --format json` once a second through a job's loss of a node, or its retried
failure: it never sees a final state before the last one, it sees RECOVERING (or RETRYING) with the node
and the cause, and a recovery starts within seconds of the node leaving RUNNING: RECOVERING within 15 s,
the job RUNNING again within 60 s, at the emulator's default operation time.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import replace

import pytest
from click.testing import CliRunner
from helpers import PROJECT, clients, followers_log, wait_for, webhook_server

from gcpgpu.cli import main
from gcpgpu.errors import CloudError
from gcpgpu.jobs import ids
from gcpgpu.jobs.cluster import store, view
from gcpgpu.jobs.cluster.record import JobRecord
from gcpgpu.jobs.state import JobState

GLOBAL = ["--project", PROJECT, "--region", "us-central1"]
UP = ["--machine-type", "a2-highgpu-1g", "--nodes", "2", "--zone", "us-central1-a", "--yes"]
FINAL = ("SUCCEEDED", "FAILED", "CANCELLED")
TO_RECOVERING_S = 15.0
TO_RUNNING_S = 60.0


def cli(*argv: str, fmt: str | None = None):
    return CliRunner().invoke(main, [*GLOBAL, *(["--format", fmt] if fmt else []), *argv])


class Poller:
    """What a script polling `job status --format json` saw: (emulator clock, state) pairs. It polls once a
    second, and at once when the job's record changes (a loop that waits for events, so a state that lasts
    less than a second, a recovery on the emulator's instant operations, is seen all the same)."""

    def __init__(self, gcp, job_id: str) -> None:
        self.gcp, self.job_id = gcp, job_id
        self.seen: list[tuple[float, dict]] = []

    def poll(self) -> dict:
        got = cli("job", "status", self.job_id, fmt="json")
        assert got.exit_code == 0, got.output
        state = json.loads(got.stdout)
        self.seen.append((self.gcp.clock.now(), state))
        return state

    def _record(self) -> str | None:
        items = self.gcp.compute.project_resource(PROJECT)["commonInstanceMetadata"].get("items", [])
        cluster = self.job_id.split(":")[1]
        return next((i["value"] for i in items if i["key"] == f"gcpgpu-jobs-{cluster}"), None)

    def until(self, done, timeout: float, what: str) -> dict:
        """Poll until `done(state)`; the state that was."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            before = self._record()
            state = self.poll()
            if done(state):
                return state
            next_poll = time.monotonic() + 1.0
            while time.monotonic() < next_poll and self._record() == before:
                time.sleep(0.02)
        raise AssertionError(f"timed out waiting for {what}: {self.states()}")

    def states(self) -> list[tuple[str, int]]:
        """The (state, attempt) changes, in order."""
        out: list[tuple[str, int]] = []
        for _t, s in self.seen:
            if not out or out[-1] != (s["state"], s["attempt"]):
                out.append((s["state"], s["attempt"]))
        return out

    def first(self, pred) -> tuple[float, dict]:
        return next((t, s) for t, s in self.seen if pred(s))

    def no_early_end(self) -> None:
        ends = [i for i, (_t, s) in enumerate(self.seen) if s["state"] in FINAL]
        assert not ends or all(self.seen[i][1]["state"] == self.seen[-1][1]["state"] for i in ends) and \
            ends == list(range(ends[0], len(self.seen))), f"a final state before the last: {self.states()}"


def leader_node(gcp, cluster: str) -> str | None:
    items = gcp.compute.project_resource(PROJECT)["commonInstanceMetadata"].get("items", [])
    raw = next((i["value"] for i in items if i["key"] == f"gcpgpu-leader-{cluster}"), None)
    holder = json.loads(raw)["holder"] if raw else ""
    return holder.removeprefix("node ").rsplit("-", 1)[0] if holder.startswith("node ") else None


needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None,
                                 reason="bubblewrap (bwrap) is not installed: the emulator cannot run users' commands")
# A job that runs until it is stopped; the recovered attempt (told GCPGPU_RESTART) runs 5 s and ends: the
# poller, which looks as soon as the job's record changes, sees it RUNNING well before that.
RUNS_ON = "sh -c 'n=600; [ -n \"$GCPGPU_RESTART\" ] && n=5; sleep $n'"


@needs_bwrap
@pytest.mark.slow
@pytest.mark.parametrize("loss,cause", [("preempt", "preempted"), ("fail_host", "host error")])
def test_status_polled_through_the_loss_of_the_leader_s_node_of_a_detached_job(gcp, loss, cause):
    """The node whose follower leads is lost: preempted (Compute's default 30 s notice, as SIGTERM to its
    services: the follower hands the lead over) or to a host error (no notice: the others take the lead
    from what Compute says of its VM). `job status` goes RUNNING -> RECOVERING (that node, the cause) ->
    RUNNING (attempt 1) -> SUCCEEDED, within the timings."""
    assert cli("cluster", "up", "q", *UP, "--spot").exit_code == 0
    submitted = cli("job", "submit", "--cluster", "q", "--image", "busybox", "--command", RUNS_ON,
                    "--detach", "--recover", "2")
    assert submitted.exit_code == 0, submitted.output
    job_id = submitted.stdout.splitlines()[0]
    watch = Poller(gcp, job_id)
    watch.until(lambda s: s["state"] == "RUNNING", timeout=60, what="RUNNING")
    victim = wait_for(lambda: leader_node(gcp, "q"), timeout=60, what="a leading follower")

    lost_at = gcp.clock.now()
    getattr(gcp.faults, loss)(victim)
    watch.until(lambda s: s["attempt"] >= 1 and s["state"] in ("RUNNING", *FINAL), timeout=300, what="attempt 1")
    back_at, _ = watch.first(lambda s: s["state"] == "RUNNING" and s["attempt"] == 1)
    recovering = [(t, s) for t, s in watch.seen if s["state"] == "RECOVERING"]
    print(f"loss -> RECOVERING: {recovering[0][0] - lost_at if recovering else None} s; "
          f"loss -> RUNNING: {back_at - lost_at:.1f} s")
    end = watch.until(lambda s: s["state"] in FINAL, timeout=120, what="the job's end")
    print(f"states seen: {watch.states()}")

    assert end["state"] == "SUCCEEDED", (watch.states(), followers_log(gcp))
    watch.no_early_end()
    assert recovering, watch.states()
    t, seen = recovering[0]
    assert t - lost_at <= TO_RECOVERING_S, (t - lost_at, watch.states())
    assert seen["node"] == victim and seen["cause"] == cause, seen
    assert back_at - lost_at <= TO_RUNNING_S, (back_at - lost_at, watch.states())
    assert end["attempt"] == 1 and end["recoveries"] == 1 and end["history"][0]["lost"] == [victim]


FLAKY = "sh -c 'if [ -z \"$GCPGPU_RESTART\" ]; then echo failing; exit 3; fi; sleep 2; echo resumed'"


@needs_bwrap
@pytest.mark.slow
def test_status_polled_through_a_retry_under_wait_on_a_cluster_whose_nodes_follow(gcp, request):
    """`--wait` on a cluster with --autostop (its nodes' followers lead): the retry the nodes run is
    followed to its end, and `--wait` exits with the job's true outcome."""
    assert cli("cluster", "up", "w", *UP, "--autostop", "30d").exit_code == 0
    wait_for(lambda: leader_node(gcp, "w"), timeout=60, what="a leading node follower")
    submit = subprocess.Popen(
        [sys.executable, "-c", "from gcpgpu.cli import main; main()", *GLOBAL, "job", "submit", "--cluster", "w",
         "--image", "busybox", "--command", FLAKY, "--max-restarts-on-errors", "1", "--wait"],
        env={**os.environ, "GCPGPU_EMULATOR": gcp.address}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    request.addfinalizer(submit.kill)
    job_id = submit.stdout.readline().strip()
    assert job_id.startswith("cluster:w:"), submit.communicate(timeout=60)
    watch = Poller(gcp, job_id)
    end = watch.until(lambda s: s["state"] in FINAL, timeout=120, what="the job's end")
    out, err = submit.communicate(timeout=120)
    print(f"states seen: {watch.states()}")
    assert end["state"] == "SUCCEEDED", (watch.states(), err)
    assert submit.returncode == 0, err
    assert f"Job {job_id} SUCCEEDED." in err
    watch.no_early_end()
    retrying = [s for _t, s in watch.seen if s["state"] == "RETRYING"]
    assert end["attempt"] == 1 and end["restarts"] == 1 and end["history"][0]["cause"] == "exit code 3"
    assert retrying and all(s["cause"] == "exit code 3" and s["node"] in ("w-0", "w-1") for s in retrying), \
        watch.states()


# -- the rule every view reads a job by (view.shown), and the record's writes ------------------------
JID = ids.parse("cluster:c:j")
LED = store.Seen([], {"holder": "node c-0-1234", "expires": 2e9}, None)  # a leader follows the cluster
ALONE = store.Seen([], None, None)  # nobody does


def row(name: str, rank: int, state: str, node_status: str = "RUNNING", exit_code: int | None = None) -> dict:
    return {"node": name, "rank": rank, "state": state, "node_status": node_status, "exit_code": exit_code,
            "started": "2026-11-25T04:00:00Z", "ended": None, "message": None, "zone": "us-central1-a"}


def nodes_say(state: str, *rows: dict, attempt: int = 0) -> JobState:
    return JobState(id=str(JID), target="cluster", state=state, cluster="c", per_node=list(rows), nnodes=2,
                    attempt=attempt, restarts=0)


def said(state: str, attempt: int = 0, **kw) -> JobRecord:
    return JobRecord(**{"id": "j", "state": state, "attempt": attempt, "history": [], "recover": 2,
                        "policy": {"max_restarts_on_errors": 1}, **kw})


def preempted(_lost: list[dict]) -> dict[str, str]:
    return {r["node"]: "preempted" for r in _lost}


def test_a_lost_node_is_recovering_while_a_recovery_is_left_and_the_job_is_followed():
    lost = nodes_say("FAILED", row("c-0", 0, "RUNNING"), row("c-1", 1, "FAILED", node_status="STOPPING"))
    shown = view.shown(JID, lost, said("RUNNING"), LED, preempted)
    assert (shown.state, shown.attempt, shown.node, shown.cause) == ("RECOVERING", 1, "c-1", "preempted")
    assert shown.to_dict()["node"] == "c-1" and shown.to_dict()["cause"] == "preempted"
    # Nobody follows it: the nodes' word is the job's.
    assert view.shown(JID, lost, said("RUNNING"), ALONE, preempted).state == "FAILED"
    # Its own nodes follow a detached job, leader or not this instant.
    assert view.shown(JID, lost, said("RUNNING", detached=True), ALONE, preempted).state == "RECOVERING"
    # No recovery left: the leader writes the end; until then the job is what its record said.
    spent = said("RUNNING", recover=0)
    assert view.shown(JID, lost, spent, LED, preempted).state == "RUNNING"
    assert view.shown(JID, lost, spent.but(state="FAILED", error="gave up"), LED, preempted).state == "FAILED"


def test_a_failure_with_a_retry_left_is_retrying_and_the_end_is_the_leader_s_to_write():
    failed = nodes_say("FAILED", row("c-0", 0, "SUCCEEDED", exit_code=0), row("c-1", 1, "FAILED", exit_code=3))
    shown = view.shown(JID, failed, said("RUNNING"), LED, preempted)
    assert (shown.state, shown.attempt, shown.node, shown.cause) == ("RETRYING", 1, "c-1", "exit code 3")
    none_left = said("RUNNING", policy={})
    assert view.shown(JID, failed, none_left, LED, preempted).state == "RUNNING"
    assert view.shown(JID, failed, none_left, ALONE, preempted).state == "FAILED"


def test_the_record_s_later_word_stands_over_what_the_nodes_report():
    stopped = nodes_say("CANCELLED", row("c-0", 0, "CANCELLED"), row("c-1", 1, "CANCELLED"))
    verdict = said("FAILED", cause="stalled", error="stalled: no progress for 5s; suspect node c-1")
    shown = view.shown(JID, stopped, verdict, ALONE, preempted)
    assert (shown.state, shown.cause, shown.error) == ("FAILED", "stalled", verdict.error)
    assert view.shown(JID, stopped, said("STALLED", node="c-1"), LED, preempted).state == "STALLED"
    running = nodes_say("RUNNING", row("c-0", 0, "RUNNING"), row("c-1", 1, "RUNNING"))
    assert view.shown(JID, running, said("STALLED", node="c-1"), LED, preempted).state == "STALLED"
    # A recovery's next attempt: RECOVERING until that attempt runs, whatever the old one's nodes say.
    recovering = said("RECOVERING", attempt=1, node="c-1", cause="preempted")
    assert view.shown(JID, stopped, recovering, LED, preempted).state == "RECOVERING"
    pending = nodes_say("PENDING", row("c-0", 0, "PENDING"), row("c-1", 1, "PENDING"), attempt=1)
    assert view.shown(JID, pending, recovering, LED, preempted).state == "RECOVERING"
    back = view.shown(JID, replace(running, attempt=1), recovering, LED, preempted)
    assert (back.state, back.attempt, back.cause) == ("RUNNING", 1, None)
    # No node holds the job any more: its record alone tells it; with no record either, it is unknown.
    assert view.shown(JID, None, said("SUCCEEDED", attempt=1), ALONE, preempted).state == "SUCCEEDED"
    with pytest.raises(CloudError, match="not on cluster c"):
        view.shown(JID, None, None, ALONE, preempted)


def test_the_record_is_written_once_per_change_and_its_end_once(gcp):
    c = clients(gcp)
    base = JobRecord(id="j", name="train", nnodes=2, recover=1)
    assert store.advance(c, PROJECT, JID, "RUNNING", 0, base=base)
    assert not store.advance(c, PROJECT, JID, "RUNNING", 0, base=base)  # another leader says it again
    assert store.advance(c, PROJECT, JID, "RECOVERING", 1, node="c-1", cause="preempted")
    assert not store.advance(c, PROJECT, JID, "RUNNING", 0)  # an older attempt's news comes too late
    assert store.advance(c, PROJECT, JID, "RUNNING", 1)
    assert store.advance(c, PROJECT, JID, "FAILED", 1, error="gave up")
    assert not store.advance(c, PROJECT, JID, "SUCCEEDED", 1)  # there is one end
    (kept,) = store.read(c, PROJECT, "c").records
    assert (kept.state, kept.attempt, kept.error, kept.name) == ("FAILED", 1, "gave up", "train")
    assert kept.started and kept.ended


def test_a_cluster_keeps_its_last_jobs_records(gcp, monkeypatch):
    monkeypatch.setattr(store, "KEEP", 2)
    gcp.jobs.agent.simulated_run_s = 0.2
    assert cli("cluster", "up", "l", *UP).exit_code == 0
    done = []
    for _ in range(3):
        result = cli("job", "submit", "--cluster", "l", "--image", "busybox", "--wait")
        assert result.exit_code == 0, result.output
        done.append(result.stdout.splitlines()[0])
    listed = json.loads(cli("job", "list", "--clusters", fmt="json").stdout)
    assert [(j["id"], j["state"]) for j in listed] == [(done[2], "SUCCEEDED"), (done[1], "SUCCEEDED")]
    earlier = json.loads(cli("job", "status", done[1], fmt="json").stdout)  # no node holds it now
    assert earlier["state"] == "SUCCEEDED" and earlier["name"] == "train"
    assert cli("job", "status", done[0]).exit_code != 0  # past the bound


def test_a_lease_whose_node_is_going_is_taken_over_at_once(gcp, monkeypatch):
    from gcpgpu.cluster import lease as leases

    gcp.faults.preempt_grace_s = 30.0
    assert cli("cluster", "up", "g", *UP, "--spot").exit_code == 0
    node = gcp.compute.get(PROJECT, "zones/us-central1-a/instances", "g-0")
    monkeypatch.setattr(leases, "_NODE", {"name": "g-0", "zone": "us-central1-a", "id": str(node["id"])})
    held = leases.Lease(clients(gcp), PROJECT, "g", holder="on-g-0", op="follow")
    assert held.try_acquire() is None
    monkeypatch.setattr(leases, "_NODE", None)
    other = leases.Lease(clients(gcp), PROJECT, "g", holder="elsewhere", op="follow")
    assert other.try_acquire() is not None  # its node runs: the lease holds
    gcp.faults.preempt("g-0")
    wait_for(lambda: gcp.compute.get(PROJECT, "zones/us-central1-a/instances", "g-0")["status"] == "STOPPING",
             what="g-0 STOPPING")
    assert other.try_acquire() is None  # the notice is enough: no lease lifetime waited out
    assert not held.renew() and held.lost


def test_an_attempt_that_ended_before_its_leader_looked_was_running_all_the_same(gcp):
    """RUNNING is written (and told) from the nodes' own `started`, not from what a poll happened to see:
    a job that ended before its follower's first look still goes RUNNING, then its end."""
    from gcpgpu.jobs.cluster import backend, nodes
    from gcpgpu.jobs.spec import JobSpec, validate

    gcp.jobs.agent.simulated_run_s = 0.05
    assert cli("cluster", "up", "e", *UP).exit_code == 0
    with webhook_server(fail_first=False) as (url, hook):
        job = validate(JobSpec(target="cluster", cluster="e", image="busybox", notify=[url]), project=PROJECT,
                       region="us-central1", zone=None)
        jid = backend.submit(clients(gcp), PROJECT, job).jid  # nobody follows it yet
        wait_for(lambda: nodes.status(clients(gcp), PROJECT, jid).state == "SUCCEEDED", what="its end")
        followed = cli("job", "follow", str(jid))
        assert followed.exit_code == 0, followed.output
        assert [m["event"] for m in hook.got] == ["RUNNING", "SUCCEEDED"], hook.got
    (kept,) = store.read(clients(gcp), PROJECT, "e").records
    assert kept.state == "SUCCEEDED" and kept.started


def test_a_queue_longer_than_keep_loses_no_queued_or_running_job_and_only_ended_ones_age_out(gcp):
    """A Slurm cluster's queue (jobs/cluster/slurm.py) is records too: twelve queued jobs and one running are all
    kept past KEEP (10); the ended ones go first, and once the queue has drained the cluster keeps its last KEEP."""
    from gcpgpu.jobs.cluster.record import QueuePlace

    c = clients(gcp)
    ended = [JobRecord(id=f"old-{i}", state="SUCCEEDED") for i in range(3)]
    running = [JobRecord(id="run", state="RUNNING", queue=QueuePlace("normal", 2))]
    queued = [JobRecord(id=f"q-{i}", state="PENDING", queue=QueuePlace("low", 1)) for i in range(12)]
    store.update(c, PROJECT, "s", lambda now: [*now, *ended, *running, *queued])
    kept = [r.id for r in store.read(c, PROJECT, "s").records]
    assert kept == ["run", *(r.id for r in queued)]  # 13 open jobs: no ended one fits, none open is lost
    store.update(c, PROJECT, "s", lambda now: [r.but(state="SUCCEEDED") for r in now])
    store.update(c, PROJECT, "s", lambda now: [*now, JobRecord(id="new", state="PENDING", queue=QueuePlace("low"))])
    kept = [r.id for r in store.read(c, PROJECT, "s").records]
    assert kept == [*(r.id for r in queued[-9:]), "new"]  # the last KEEP in all, oldest ended gone first
