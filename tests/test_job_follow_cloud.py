"""Following needs no laptop: a recovery any follower left half done is finished by the next one,
and a `--detach`ed job is followed and recovered by the cluster's own nodes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from click.testing import CliRunner
from helpers import PROJECT, followers_log, wait_for, webhook_server

from gcpgpu.cli import main

GLOBAL = ["--project", PROJECT, "--region", "us-central1"]
UP = ["--machine-type", "a2-highgpu-1g", "--nodes", "2", "--zone", "us-central1-a", "--spot", "--yes"]


def cli(*argv: str, fmt: str | None = None):
    return CliRunner().invoke(main, [*GLOBAL, *(["--format", fmt] if fmt else []), *argv])


def followers(gcp, cluster: str) -> dict[str, str | None]:
    """Each node's follower image (metadata gcpgpu-agent)."""
    return {i["name"]: next((m["value"] for m in i["metadata"].get("items", []) if m["key"] == "gcpgpu-agent"), None)
            for i in gcp.compute.list(PROJECT, "zones/us-central1-a/instances") if i["name"].startswith(f"{cluster}-")}


def nodes(gcp, cluster: str) -> list[tuple[str, str]]:
    return [(i["name"], i["status"]) for i in gcp.compute.list(PROJECT, "zones/us-central1-a/instances")
            if i["name"].startswith(f"{cluster}-")]


@pytest.mark.parametrize("moment", ["delete", "instances", "resubmit"])
def test_a_follower_killed_mid_recovery_leaves_it_for_job_follow_to_finish(gcp, monkeypatch, moment):
    """Interrupted after it stopped the survivors (before deleting the lost node), while the node is
    re-created, or before resubmitting: `job follow` finishes the recovery and the job SUCCEEDS."""
    from gcpgpu.cli import progress

    gcp.faults.preempt_grace_s = 0.2
    gcp.jobs.agent.simulated_run_s = 4.0
    assert cli("cluster", "up", "k", *UP).exit_code == 0
    real_step = progress.ConsoleReporter.step

    def step(self, key: str, text: str) -> None:
        if key == moment:
            raise KeyboardInterrupt
        real_step(self, key, text)

    monkeypatch.setattr(progress.ConsoleReporter, "step", step)
    gcp.faults.preempt("k-1", after_s=0.2)
    first = cli("job", "submit", "--cluster", "k", "--image", "busybox", "--wait")  # simulated, 4 s
    assert first.exit_code == 130, first.output
    job_id = first.stdout.splitlines()[0]
    monkeypatch.setattr(progress.ConsoleReporter, "step", real_step)
    gcp.jobs.agent.simulated_run_s = 0.5  # the resubmitted attempt: nothing has to happen while it runs
    halfway = json.loads(cli("job", "status", job_id, fmt="json").stdout)
    assert halfway["state"] == "RECOVERING" and halfway["history"][0]["lost"] == ["k-1"]

    followed = cli("job", "follow", job_id)
    assert followed.exit_code == 0, followed.output
    assert "Finishing recovery 1" in followed.output and f"Job {job_id} SUCCEEDED." in followed.output
    assert nodes(gcp, "k") == [("k-0", "RUNNING"), ("k-1", "RUNNING")]  # back to size, not a node short
    status = json.loads(cli("job", "status", job_id, fmt="json").stdout)
    assert status["state"] == "SUCCEEDED" and status["attempt"] == 1
    assert [(h["lost"], h["cause"]) for h in status["history"]] == [(["k-1"], "preempted")]


def test_a_recovery_left_half_done_is_finished_by_the_cluster_s_own_followers(gcp, monkeypatch):
    from gcpgpu.cli import progress

    monkeypatch.setenv("GCPGPU_LEASE_TTL", "20")
    gcp.faults.preempt_grace_s = 0.2
    gcp.jobs.agent.simulated_run_s = 4.0
    assert cli("cluster", "up", "h", *UP).exit_code == 0
    real_step = progress.ConsoleReporter.step

    def step(self, key: str, text: str) -> None:
        if key == "instances":  # killed while the lost node is re-created
            raise KeyboardInterrupt
        real_step(self, key, text)

    monkeypatch.setattr(progress.ConsoleReporter, "step", step)
    gcp.faults.preempt("h-1", after_s=0.2)
    first = cli("job", "submit", "--cluster", "h", "--image", "busybox", "--wait")
    assert first.exit_code == 130, first.output
    job_id = first.stdout.splitlines()[0]
    assert nodes(gcp, "h") == [("h-0", "RUNNING")]
    gcp.jobs.agent.simulated_run_s = 0.5  # the resubmitted attempt: nothing has to happen while it runs
    # Nobody here follows it any more; the node that is left starts its follower (autostop wants one).
    assert cli("cluster", "autostop", "h", "30d").exit_code == 0

    def ended() -> dict | None:
        state = json.loads(cli("job", "status", job_id, fmt="json").stdout)
        return state if state["state"] == "SUCCEEDED" else None

    status = wait_for(ended, timeout=120, what="the job's end", interval=1.0)
    assert status["attempt"] == 1 and status["history"][0]["lost"] == ["h-1"]
    assert nodes(gcp, "h") == [("h-0", "RUNNING"), ("h-1", "RUNNING")]
    # The re-created node runs its follower from the image autostop found (the emulator's registry has
    # none-emulator), as its spec says: not a tag nothing pushed.
    seeded = f"us-central1-docker.pkg.dev/{PROJECT}/gcpgpu/gcpgpu-trainer:none-emulator"
    assert followers(gcp, "h") == {"h-0": seeded, "h-1": seeded}


STEPS = 20
CKPT_EVERY = 5  # the preemption lands after the second checkpoint (step 10), ten steps before the end


def trainer(run: str) -> list[str]:
    return ["--model", "tiny", "--parallel", "ddp", "--precision", "fp32", "--data", "synthetic", "--steps",
            str(STEPS), "--batch-size", "8", "--seq-len", "32", "--lr", "1e-3", "--warmup-steps", "5",
            "--log-every", "1", "--ckpt-every", str(CKPT_EVERY), "--log-json", f"/gcs/bkt/{run}/log.jsonl"]


def last_step(path) -> dict:
    return [r for r in map(json.loads, path.read_text().splitlines()) if "loss" in r][-1]


def leader_node(gcp, cluster: str) -> str | None:
    items = gcp.compute.project_resource(PROJECT)["commonInstanceMetadata"].get("items", [])
    raw = next((i["value"] for i in items if i["key"] == f"gcpgpu-leader-{cluster}"), None)
    holder = json.loads(raw)["holder"] if raw else ""
    return holder.removeprefix("node ").rsplit("-", 1)[0] if holder.startswith("node ") else None


@pytest.fixture
def webhook():
    with webhook_server(fail_first=False) as served:
        yield served


@pytest.mark.slow
def test_a_detached_job_is_recovered_by_the_cluster_after_its_leader_s_node_is_preempted(gcp, webhook, request):
    pytest.importorskip("torch")
    url, hook = webhook
    gcp.faults.preempt_grace_s = 3.0
    assert cli("cluster", "up", "c", *UP).exit_code == 0
    gcp.storage.insert_bucket(PROJECT, {"name": "bkt"})  # a job mounts only a bucket that exists, as on Google
    bucket = gcp.jobs.agent.storage.root / "gcs" / "bkt"
    env = ["--env", "GCPGPU_METRICS=0"]
    # No uninterrupted run to compare with: that a resumed run ends bit for bit where one would is
    # test_job_recover.py's (the same trainer, checkpoints and resume); here the cluster's own followers
    # recover it, from the newest checkpoint, to the last step.

    # The submitting process is its own, and it is gone before anything is lost.
    submit = subprocess.run(
        [sys.executable, "-c", "from gcpgpu.cli import main; main()", *GLOBAL, "job", "submit", "--cluster", "c",
         "--detach", "--recover", "2", "--notify", url, "--output-dir", "gs://bkt/run", *env, "--", *trainer("run")],
        env={**os.environ, "GCPGPU_EMULATOR": gcp.address}, capture_output=True, text=True, timeout=120)
    assert submit.returncode == 0, submit.stderr
    job_id = submit.stdout.splitlines()[0]
    assert "this machine may go" in submit.stderr

    # Someone may watch from anywhere: it watches while the cluster leads, and sees the end. A process of
    # its own: CliRunner swaps the process's stdout, so a watcher in a thread would lose the lines it
    # prints while this thread's `job status` polls hold it.
    watcher = subprocess.Popen(
        [sys.executable, "-c", "from gcpgpu.cli import main; main()", *GLOBAL, "job", "follow", job_id],
        env={**os.environ, "GCPGPU_EMULATOR": gcp.address}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True)
    request.addfinalizer(watcher.kill)  # a no-op once it has ended

    # Preempt the node whose follower leads, once the run has its second checkpoint.
    wait_for(lambda: (bucket / "run" / "checkpoints" / f"step_{2 * CKPT_EVERY:08d}").is_dir(), timeout=300,
             what="the second checkpoint")
    victim = wait_for(lambda: leader_node(gcp, "c"), timeout=60, what="a leading follower")
    gcp.faults.preempt(victim)
    # Its follower hands the lead over as its node shuts down (and a lease whose node Compute says is
    # going is taken over anyway): the node that is left leads at once, no lease lifetime waited out.
    # `job follow` below only watches: the cluster leads.

    def ended() -> dict | None:
        state = json.loads(cli("job", "status", job_id, fmt="json").stdout)
        return state if state["state"] in ("SUCCEEDED", "FAILED", "CANCELLED") and state["recoveries"] else None

    try:
        status = wait_for(ended, timeout=400, what="the job's end", interval=1.0)
    except AssertionError:
        raise AssertionError(f"no end: {cli('job', 'status', job_id).output}\n{followers_log(gcp)}") from None
    assert status["state"] == "SUCCEEDED" and status["attempt"] == 1, followers_log(gcp)
    (entry,) = status["history"]
    assert entry["lost"] == [victim] and entry["cause"] == "preempted"
    steps = [r["step"] for r in map(json.loads, (bucket / "run" / "log.jsonl").read_text().splitlines()) if "loss" in r]
    assert steps[0] == 0 and steps[-1] == last_step(bucket / "run" / "log.jsonl")["step"] == STEPS - 1
    assert entry["resumed_at"] >= 2 * CKPT_EVERY and entry["steps_redone"] == len(steps) - STEPS  # resumed, not restarted
    assert "Recoveries" in cli("job", "status", job_id).output
    watched = watcher.communicate(timeout=60)[0]
    assert watcher.returncode == 0, watched
    assert "watching" in watched and f"Job {job_id} SUCCEEDED." in watched
    assert "recovery 1: lost" in watched, watched
    assert "Recovery 1/2" not in watched, watched  # it only watched
    # The cluster's followers told the webhook, from the nodes (nothing here follows with --notify).
    wait_for(lambda: "SUCCEEDED" in [m["event"] for m in hook.got], timeout=60, what="SUCCEEDED at the webhook")
    told = [m for m in hook.got if m["event"] in ("RECOVERING", "SUCCEEDED")]
    assert [m["event"] for m in told] == ["RECOVERING", "SUCCEEDED"], hook.got
    assert told[0]["node"] == victim and told[0]["cause"] == "preempted" and told[0]["job"] == job_id
    assert told[1]["recoveries"] == 1


def test_the_follower_s_settings_travel_in_the_job_s_record(monkeypatch):
    """Whatever settings the Follower takes reach it from record["follow"], on any machine; a key this
    gcpgpu's Follower does not take (a newer gcpgpu wrote it) is left out rather than failing."""
    from gcpgpu.jobs import ids
    from gcpgpu.jobs.cluster import follower, recover
    from gcpgpu.jobs.cluster.record import JobRecord

    seen = {}

    def init(self, clients, project, jid, recover, reporter=None, poll_s=15.0, on_state=None, stall_timeout=None):
        seen.update(recover=recover, poll_s=poll_s, stall_timeout=stall_timeout)

    monkeypatch.setattr(recover.Follower, "__init__", init)
    record = JobRecord(id="train-abc123", recover=2,
                       follow={"stall_timeout": 600, "poll_s": 99.0, "from_a_newer_gcpgpu": True})
    follower.make(None, "p", ids.parse("cluster:c:train-abc123"), record, poll_s=1.0)
    assert seen == {"recover": 2, "poll_s": 1.0, "stall_timeout": 600}
    follower.make(None, "p", ids.parse("cluster:c:train-abc123"), record, recover=5)
    assert seen["recover"] == 5  # job follow --recover N wins
