"""Many jobs on one cluster: `job submit` on a Slurm cluster queues the job, Slurm orders and runs it.

The jobs run the bundled trainer under the emulator's real Slurm (tests/test_cluster_slurm.py). Tests
that start Slurm skip, saying what to install, where it is missing.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from helpers import PROJECT, wait_for

from gcpgpu.cli import main
from gcpgpu.fakes.guest.slurm import slurm_installed
from gcpgpu.jobs.cluster import store as records
from gcpgpu.jobs.cluster.record import JobRecord
from gcpgpu.jobs.cluster.slurm import position
from gcpgpu.slurm.queue import parse_jobs, queue_places, seen_fields
from gcpgpu.trainer import ckpt_rule

GLOBAL = ["--project", PROJECT, "--region", "us-central1"]
UP = ["cluster", "up", "--machine-type", "a2-highgpu-1g", "--nodes", "2", "--zone", "us-central1-a", "--yes"]
# A job that only has to run and end: the tiny model over a 256-token vocabulary (its output layer 50,304 x 128
# at the default), so its steps take little of the CPU the queue's other processes share.
QUICK = ["--model", "tiny", "--steps", "3", "--seq-len", "16", "--batch-size", "2", "--vocab-size", "256"]
LONG = ["--model", "tiny", "--steps", "100000", "--seq-len", "16", "--batch-size", "2"]
needs_slurm = pytest.mark.skipif(slurm_installed() is not None, reason=str(slurm_installed()))


def cli(*argv: str, fmt: str | None = None):
    return CliRunner().invoke(main, [*GLOBAL, *(["--format", fmt] if fmt else []), *argv])


def submitted(*argv: str) -> str:
    result = cli("job", "submit", "--cluster", "q", *argv, fmt="json")
    assert result.exit_code == 0, result.output
    return json.loads(result.output[result.output.index("{"):])["id"]


def recorded(gcp, job: str) -> dict:
    from helpers import clients

    found = records.read(clients(gcp), PROJECT, "q").of(job.rsplit(":", 1)[-1])
    return found.to_json() if found is not None else {}


def status_of(job: str) -> dict:
    """`job status --format json` of the job."""
    shown = cli("job", "status", job, fmt="json")
    assert shown.exit_code == 0, shown.output
    return json.loads(shown.output)


def state(gcp, job: str) -> str | None:
    return recorded(gcp, job).get("state")


# -- bad input: one line, exit 2, nothing queued -----------------------------------------------------
def test_an_unknown_priority_is_refused_before_anything(gcp):
    result = cli("job", "submit", "--cluster", "q", "--priority", "urgent", "--", *QUICK)
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1
    assert "--priority 'urgent'" in result.output and "high, normal, low" in result.output


def test_priority_on_a_cluster_without_slurm_is_refused_and_nothing_is_queued(gcp):
    assert cli(*UP[:2], "plain", *UP[2:]).exit_code == 0
    result = cli("job", "submit", "--cluster", "plain", "--priority", "high", "--", *QUICK)
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1
    assert "--scheduler slurm" in result.output
    from helpers import clients

    assert records.read(clients(gcp), PROJECT, "plain").records == []
    assert cli("cluster", "down", "plain", "--yes").exit_code == 0


# -- the queue as records and scontrol say it (no Slurm needed) ------------------------------------------
def test_a_new_job_joins_the_queue_behind_its_tier_and_above_lower_ones():
    queued = [JobRecord.from_json(r) for r in ({"id": "a", "state": "PENDING", "queue": {"priority": "normal"}},
                                               {"id": "b", "state": "PENDING", "queue": {"priority": "low"}},
                                               {"id": "c", "state": "RUNNING", "queue": {"priority": "high"}})]
    assert position(queued, "high") == 1 and position(queued, "normal") == 2 and position(queued, "low") == 3


def test_scontrols_view_becomes_states_places_and_reasons():
    text = ("JobId=7 JobName=b-1 Priority=10 Partition=low JobState=PENDING Reason=Priority Restarts=0 NodeList=(null)\n"
            "JobId=8 JobName=c-1 Priority=10 Partition=high JobState=PENDING Reason=Resources Restarts=1 "
            "NodeList=(null)\n"
            "JobId=6 JobName=a-1 Priority=10 Partition=normal JobState=RUNNING Reason=None Restarts=0 "
            "NodeList=q-[0-1]\n")
    jobs = parse_jobs(text)
    assert queue_places(jobs) == {"8": 1, "7": 2}  # high before low, whatever the order submitted
    assert seen_fields(jobs["8"], 1) == {"state": "PENDING", "attempt": 1, "reason": "waiting for free nodes",
                                         "slurm_nodes": None, "position": 1}
    assert seen_fields(jobs["6"], None)["state"] == "RUNNING" and seen_fields(jobs["6"], None)["slurm_nodes"] == "q-[0-1]"


def test_a_queued_or_running_slurm_job_is_work_that_keeps_autostop_away(gcp):
    from helpers import clients

    from gcpgpu.node.agent import job_running

    c = clients(gcp)
    records.update(c, PROJECT, "q", lambda now: [*now, JobRecord.from_json({
        "id": "w-1", "state": "PENDING", "queue": {"priority": "low", "nodes": 1}})])
    assert job_running(c, PROJECT, "q")
    records.update(c, PROJECT, "q", lambda now: [r.but(state="SUCCEEDED") for r in now])
    assert not job_running(c, PROJECT, "q")


def test_wait_tells_each_state_and_requeue_once_and_returns_the_end():
    from types import SimpleNamespace

    from gcpgpu.jobs.cluster.slurm import wait

    seen = iter([("PENDING", 0), ("PENDING", 0), ("RUNNING", 0), ("PENDING", 1), ("RUNNING", 1), ("SUCCEEDED", 1)])
    told = []
    final = wait(lambda: SimpleNamespace(state=(n := next(seen))[0], attempt=n[1]),
                 lambda st: told.append((st.state, st.attempt)), poll_s=0)
    assert final.state == "SUCCEEDED"
    assert told == [("PENDING", 0), ("RUNNING", 0), ("PENDING", 1), ("RUNNING", 1), ("SUCCEEDED", 1)]


# -- the whole queue on the emulator's Slurm -------------------------------------------------------------
@needs_slurm
def test_jobs_queue_by_priority_on_a_two_node_slurm_cluster(gcp):
    assert cli(*UP[:2], "q", *UP[2:], "--scheduler", "slurm").exit_code == 0
    too_many = cli("job", "submit", "--cluster", "q", "--nodes", "3", "--", *QUICK)
    assert too_many.exit_code == 2 and len(too_many.output.strip().splitlines()) == 1
    a = submitted("--name", "a", "--", *LONG)  # both nodes, normal
    wait_for(lambda: state(gcp, a) == "RUNNING", timeout=120, what="A running on both nodes")
    b = submitted("--name", "b", "--nodes", "1", "--priority", "low", "--", *QUICK)
    c = submitted("--name", "c", "--nodes", "2", "--priority", "high", "--", *QUICK)
    # Both wait for A: C (high) first in the queue although B came first.
    wait_for(lambda: recorded(gcp, c).get("queue", {}).get("position") == 1
             and recorded(gcp, b).get("queue", {}).get("position") == 2, timeout=30, what="C ahead of B")
    listed = cli("job", "list", "--cluster", "q", fmt="json")
    rows = {r["name"]: r for r in json.loads(listed.output)}
    assert set(rows) == {"a", "b", "c"}
    assert (rows["a"]["state"], rows["b"]["priority"], rows["c"]["priority"]) == ("RUNNING", "low", "high")
    assert rows["b"]["state"] == rows["c"]["state"] == "PENDING" and rows["c"]["reason"]
    # A ends (cancelled while running): C runs while B still waits, then B.
    assert cli("job", "cancel", a).exit_code == 0
    wait_for(lambda: state(gcp, a) == "CANCELLED", timeout=60, what="A cancelled")
    wait_for(lambda: state(gcp, c) in ("RUNNING", "SUCCEEDED"), timeout=60, what="C started")
    assert state(gcp, b) == "PENDING"
    wait_for(lambda: state(gcp, b) == "SUCCEEDED", timeout=180, what="B done after C")
    assert state(gcp, c) == "SUCCEEDED"
    assert recorded(gcp, b)["started"] >= recorded(gcp, c)["ended"]
    status = cli("job", "status", c, fmt="json")
    assert status.exit_code == 0 and json.loads(status.output)["state"] == "SUCCEEDED"
    assert cli("cluster", "down", "q", "--yes").exit_code == 0


@needs_slurm
def test_a_pending_job_is_cancelled_before_it_runs(gcp):
    assert cli(*UP[:2], "q", *UP[2:], "--scheduler", "slurm").exit_code == 0
    a = submitted("--name", "a", "--", *LONG)
    b = submitted("--name", "b", "--", *QUICK)
    wait_for(lambda: recorded(gcp, b).get("slurm_id") and state(gcp, a) == "RUNNING", timeout=120,
             what="A running, B handed to Slurm")
    assert cli("job", "cancel", b).exit_code == 0
    wait_for(lambda: state(gcp, b) == "CANCELLED", timeout=60, what="B cancelled while pending")
    assert state(gcp, a) == "RUNNING" and not recorded(gcp, b).get("started")
    assert cli("job", "cancel", a).exit_code == 0
    wait_for(lambda: state(gcp, a) == "CANCELLED", timeout=60, what="A cancelled while running")
    assert cli("cluster", "down", "q", "--yes").exit_code == 0


def checkpointed(gcp, ckpt: str, step: int) -> bool:
    """Whether the checkpoint of `step` under gs://ckpt/CKPT is complete (DCP's `.metadata`, written last), as a
    resumed attempt finds it: read in the emulator's storage, instead of `job logs` asked again and again."""
    return ckpt_rule.complete(ckpt_rule.folder(gcp.storage.object_path("ckpt", ckpt), step))


def job_output(gcp, job: str) -> str:
    """What the batch job said (its tasks' lines, in Slurm's output file) and what its nodes' processes said
    (`job logs`, from Cloud Logging, as for any cluster job)."""
    folder = gcp.jobs.slurm.folder(PROJECT, "q")
    out = folder / "jobs" / f"{job.rsplit(':', 1)[-1]}.out" if folder else None
    tasks = out.read_text(errors="replace") if out is not None and out.exists() else ""
    return tasks + cli("job", "logs", job).output


@needs_slurm
def test_a_high_job_preempts_a_low_one_which_requeues_and_resumes_from_its_checkpoint(gcp):
    assert cli(*UP[:2], "q", *UP[2:], "--scheduler", "slurm").exit_code == 0
    low = submitted("--name", "low", "--priority", "low", "--", "--model", "tiny", "--steps", "16", "--seq-len", "16",
                    "--batch-size", "2", "--ckpt-dir", "gs://ckpt/low", "--ckpt-every", "2", "--log-every", "1")
    wait_for(lambda: checkpointed(gcp, "low", 4), timeout=180, what="the low job past a checkpoint")
    high = submitted("--name", "high", "--priority", "high", "--", *QUICK)  # needs both nodes: the low job's
    # Preempted, the low job is RECOVERING (as a cluster job whose node was lost), saying by whom, until it runs.
    shown = wait_for(lambda: (s := status_of(low))["state"] == "RECOVERING" and s, timeout=180, interval=0.3,
                     what="the low job RECOVERING")
    assert shown["cause"] == f"preempted by higher-priority job {high.rsplit(':', 1)[-1]}", shown
    assert shown["node"] == "q-0, q-1" and shown["attempt"] == 1
    wait_for(lambda: state(gcp, high) == "SUCCEEDED", timeout=180, what="the high job done")
    wait_for(lambda: state(gcp, low) == "SUCCEEDED", timeout=240, what="the low job resumed and done")
    assert recorded(gcp, low)["attempt"] == 1  # requeued once, by the preemption
    [entry] = status_of(low)["history"]
    assert (entry["attempt"], entry["node"], entry["cause"]) == (1, "q-0, q-1", shown["cause"])
    assert entry["delivered"] >= entry["at"]
    out = job_output(gcp, low)
    assert "restart 1" in out and "resumed from" in out
    assert cli("cluster", "down", "q", "--yes").exit_code == 0


@needs_slurm
def test_a_node_lost_under_a_running_job_comes_back_and_the_job_resumes_to_succeeded(gcp):
    """Each step waits for the state that says it happened (a checkpoint in the log, the node RUNNING again, the
    job SUCCEEDED), with room to spare for a loaded machine: nothing here counts on how long a step takes."""
    assert cli(*UP[:2], "q", *UP[2:], "--scheduler", "slurm").exit_code == 0
    job = submitted("--name", "kept", "--", "--model", "tiny", "--steps", "16", "--seq-len", "16", "--batch-size", "2",
                    "--ckpt-dir", "gs://ckpt/kept", "--ckpt-every", "2", "--log-every", "1")
    wait_for(lambda: checkpointed(gcp, "kept", 4), timeout=600, what="the job past a checkpoint")
    assert gcp.compute.lose_instance(PROJECT, "us-central1-a", "q-1", "preempt", 1.0)
    # Requeued off the lost node: RECOVERING, with the node and why it went, until the node is back and it runs.
    shown = wait_for(lambda: (s := status_of(job))["state"] == "RECOVERING" and s, timeout=300, interval=0.3,
                     what="the job RECOVERING")
    assert (shown["node"], shown["cause"], shown["attempt"]) == ("q-1", "preempted", 1), shown
    wait_for(lambda: state(gcp, job) == "SUCCEEDED", timeout=900, interval=0.5, what="the job resumed and done")
    assert recorded(gcp, job)["attempt"] >= 1 and "resumed from" in job_output(gcp, job)
    first = status_of(job)["history"][0]
    assert (first["attempt"], first["node"], first["cause"], first["lost"]) == (1, "q-1", "preempted", ["q-1"])
    assert first["delivered"] >= first["at"]
    inst = gcp.compute.get(PROJECT, "zones/us-central1-a/instances", "q-1")
    assert inst["status"] == "RUNNING"  # node 0 brought it back under its name
    wait_for(lambda: set(gcp.jobs.slurm.running()) == {"q-0", "q-1"}, timeout=120, what="both nodes' daemons")
    assert cli("cluster", "down", "q", "--yes").exit_code == 0


@needs_slurm
def test_follow_and_logs_follow_a_slurm_job_to_its_end_as_any_cluster_job(gcp):
    assert cli(*UP[:2], "q", *UP[2:], "--scheduler", "slurm").exit_code == 0
    job = submitted("--name", "seen", "--nodes", "1", "--", *QUICK, "--log-every", "1")
    followed = cli("job", "follow", job)
    assert followed.exit_code == 0, followed.output
    assert "SUCCEEDED" in followed.output and state(gcp, job) == "SUCCEEDED"
    logs = cli("job", "logs", job, "--follow")  # returns once the job has ended, with the trainer's lines
    assert logs.exit_code == 0 and "step      2 " in logs.output, logs.output
    assert cli("cluster", "down", "q", "--yes").exit_code == 0


@needs_slurm
def test_a_job_sbatched_by_hand_on_the_controller_is_listed_marked_as_such_and_can_be_cancelled(gcp, tmp_path):
    import os
    import subprocess

    from gcpgpu.slurm.node import conf_path

    assert cli(*UP[:2], "q", *UP[2:], "--scheduler", "slurm").exit_code == 0
    wait_for(lambda: "q-0" in gcp.jobs.slurm.running() and gcp.jobs.slurm.folder(PROJECT, "q"), timeout=60,
             what="node 0's daemons")
    env = {**os.environ, "SLURM_CONF": str(conf_path(gcp.jobs.slurm.folder(PROJECT, "q"), "q-0"))}

    def sbatch() -> subprocess.CompletedProcess:  # what someone on `cluster ssh q` types
        return subprocess.run(["sbatch", "--parsable", "-J", "by-hand", "-N", "1", "-o", str(tmp_path / "by-hand.out"),
                               "--wrap", "sleep 600"], env=env, cwd=tmp_path, capture_output=True, text=True,
                              timeout=60, check=False)

    done = wait_for(lambda: (r := sbatch()).returncode == 0 and r, timeout=120, interval=1.0,
                    what="slurmctld taking a job")
    slurm_id = done.stdout.strip().split(";")[0]

    def row() -> dict | None:
        rows = json.loads(cli("job", "list", "--cluster", "q", fmt="json").output)
        return next((r for r in rows if r["name"] == "by-hand" and r["state"] == "RUNNING"), None)

    found = wait_for(row, timeout=60, interval=0.5, what="the hand-made job listed")
    assert found["id"] == f"cluster:q:slurm-{slurm_id}" and found["via"] == "sbatch" and found["nodes"] == 1
    # Its output is in its -o file, never in Cloud Logging: `job logs` says where, instead of promising entries.
    logs = cli("job", "logs", found["id"])
    assert logs.exit_code == 0 and "No log entries" not in logs.output, logs.output
    assert f"{tmp_path / 'by-hand.out'} on node q-" in logs.output and "gcpgpu cluster ssh q --node" in logs.output
    assert cli("job", "cancel", found["id"]).exit_code == 0
    wait_for(lambda: state(gcp, found["id"]) == "CANCELLED", timeout=60, what="the hand-made job cancelled")
    assert cli("cluster", "down", "q", "--yes").exit_code == 0


# -- a record's id is never a command or a path on node 0 ------------------------------------------------------
CRAFTED = ["../../etc/x", "a\ntouch /tmp/pwned", "$(touch /tmp/pwned)", "x;id"]


def test_a_crafted_record_in_project_metadata_is_refused_by_the_queue_agent_and_never_listed_raw(gcp, tmp_path):
    """Whoever can write project metadata can write a record: its id becomes node 0's file names and its batch
    job's name. An id (or run key) gcpgpu never makes is skipped where records are read, said once in the agent's
    log, and never reaches sbatch, a file or `job list`; a well-formed record beside it is sbatched as ever."""
    import subprocess

    from helpers import clients

    from gcpgpu.jobs.cluster import journal
    from gcpgpu.slurm.queue import QueueAgent

    c = clients(gcp)
    good = {"id": "good-abc123", "name": "good", "scheduler": "slurm", "state": "PENDING",
            "queue": {"priority": "normal", "nodes": 1}}
    bad = [{**good, "id": i, "submit": {**good, "id": i}} for i in CRAFTED]
    bad.append({**good, "id": "run-bad1", "run": "x\n$(id)", "submit": {**good, "id": "run-bad1", "run": "x\n$(id)"}})
    journal.swap(c, PROJECT, records.key("q"),
                 lambda _now: json.dumps({"jobs": [*bad, {**good, "submit": dict(good)}]}))
    called: list[tuple[str, ...]] = []

    def slurm(*argv: str) -> subprocess.CompletedProcess:
        called.append(argv)
        return subprocess.CompletedProcess(list(argv), 0, "5\n" if argv[0] == "sbatch" else "", "")

    said: list[str] = []
    agent = QueueAgent(c, PROJECT, "q", tmp_path / "jobs", tmp_path / "slurm.conf", True, said.append)
    agent._slurm = slurm  # type: ignore[method-assign]
    agent.round()
    agent.round()
    sbatched = [a for a in called if a[0] == "sbatch"]
    assert [a[a.index("-J") + 1] for a in sbatched] == ["good-abc123"]
    assert sorted(p.name for p in (tmp_path / "jobs").iterdir()) == ["good-abc123.json", "good-abc123.sh"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["jobs"]  # nothing written outside the jobs folder
    skipped = [s for s in said if "skipping a job record" in s]
    assert len(skipped) == len(bad) and all("is not a job id" in s for s in skipped)
    for fmt in (None, "json"):
        listed = cli("job", "list", "--cluster", "q", fmt=fmt)
        assert listed.exit_code == 0, listed.output
        assert "good" in listed.output and "pwned" not in listed.output and "$(" not in listed.output
        assert "../" not in listed.output and "x;id" not in listed.output
