"""A Spot cluster job that loses a node recovers by itself: preempt -> recover -> finish, on CPU.

The emulator preempts the second node mid-run (after the job's first checkpoints are in its
gs:// output dir); `job submit --recover` brings the cluster back to two nodes, resubmits with
--resume, and the job ends SUCCEEDED with the same final step and loss as an uninterrupted run.
"""

from __future__ import annotations

import json
import threading
import time

import pytest
from click.testing import CliRunner

from gcpgpu.cli import main

pytest.importorskip("torch")

GLOBAL = ["--project", "test-proj", "--region", "us-central1"]
STEPS = 20
CKPT_EVERY = 5  # the preemption lands after the second checkpoint (step 10), ten steps before the end


def cli(*argv: str, fmt: str | None = None):
    return CliRunner().invoke(main, [*GLOBAL, *(["--format", fmt] if fmt else []), *argv])


def trainer(run: str) -> list[str]:
    return ["--model", "tiny", "--parallel", "ddp", "--precision", "fp32", "--data", "synthetic", "--steps",
            str(STEPS), "--batch-size", "8", "--seq-len", "32", "--lr", "1e-3", "--warmup-steps", "5",
            "--log-every", "1", "--ckpt-every", str(CKPT_EVERY), "--log-json", f"/gcs/bkt/{run}/log.jsonl"]


def sleeps(seconds: int) -> str:
    """A user command that runs `seconds` (long enough for the loss to land in it); the attempt a recovery starts
    (told GCPGPU_RESTART) only has to end, so it runs half a second."""
    return f"sh -c 'n={seconds}; [ -n \"$GCPGPU_RESTART\" ] && n=0.5; sleep $n'"


def last_step(path) -> dict:
    records = [json.loads(line) for line in path.read_text().splitlines()]
    return [r for r in records if "loss" in r][-1]


@pytest.fixture
def spot_cluster(gcp):
    gcp.faults.preempt_grace_s = 3.0  # the notice a Spot VM gets (30 s on Compute Engine)
    up = cli("cluster", "up", "c", "--machine-type", "a2-highgpu-1g", "--nodes", "2", "--zone", "us-central1-a",
             "--spot", "--yes")
    assert up.exit_code == 0, up.output
    gcp.storage.insert_bucket("test-proj", {"name": "bkt"})  # a job mounts only a bucket that exists, as on Google
    return gcp


@pytest.mark.slow
def test_preempted_spot_job_recovers_and_matches_an_uninterrupted_run(spot_cluster):
    gcp = spot_cluster
    bucket = gcp.jobs.agent.storage.root / "gcs" / "bkt"
    env = ["--env", "GCPGPU_METRICS=0"]

    base = cli("job", "submit", "--cluster", "c", "--output-dir", "gs://bkt/base", "--recover", "0", *env, "--",
               *trainer("base"))
    assert base.exit_code == 0, base.output
    c1_before = gcp.compute.get("test-proj", "zones/us-central1-a/instances", "c-1")["id"]

    # Preempt c-1 once the run has saved its second checkpoint, half-way through.
    second = bucket / "run" / "checkpoints" / f"step_{2 * CKPT_EVERY:08d}"

    def preempt_mid_run() -> None:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and not second.is_dir():
            time.sleep(0.05)
        gcp.faults.preempt("c-1")

    threading.Thread(target=preempt_mid_run, daemon=True).start()
    run = cli("job", "submit", "--cluster", "c", "--output-dir", "gs://bkt/run", "--wait", *env, "--",
              *trainer("run"))
    assert run.exit_code == 0, run.output
    job_id = run.stdout.splitlines()[0]
    assert "Recovery 1/3" in run.output and "preempted" in run.output

    # c-1 really was lost and replaced: a new VM of the same name, the cluster back to two nodes.
    c1_after = gcp.compute.get("test-proj", "zones/us-central1-a/instances", "c-1")
    assert c1_after["id"] != c1_before and c1_after["status"] == "RUNNING"
    ops = gcp.compute.list_operations("test-proj", "zones/us-central1-a",
                                      'operationType="compute.instances.preempted"')
    assert len(ops) == 1 and ops[0]["targetLink"].endswith("/instances/c-1")

    # Same end as the uninterrupted run: the last step and its loss, bit for bit.
    base_end, run_end = last_step(bucket / "base" / "log.jsonl"), last_step(bucket / "run" / "log.jsonl")
    assert run_end["step"] == base_end["step"] == STEPS - 1
    assert run_end["loss"] == base_end["loss"]
    # The log shows the interruption: steps before the resume point logged once, the job went past 10.
    steps = [json.loads(line)["step"] for line in (bucket / "run" / "log.jsonl").read_text().splitlines()
             if "loss" in json.loads(line)]
    assert steps[0] == 0 and max(steps) == STEPS - 1 and len(steps) >= STEPS

    status = json.loads(cli("job", "status", job_id, fmt="json").stdout)
    assert status["state"] == "SUCCEEDED" and status["attempt"] == 1 and status["recoveries"] == 1
    (entry,) = status["history"]
    assert entry["lost"] == ["c-1"] and entry["cause"] == "preempted" and entry["zone"] == "us-central1-a"
    # Resumed from the newest complete checkpoint: a periodic one, or the one the trainers saved on the
    # preemption notice (SIGTERM), right after the last step they logged.
    assert entry["resumed_at"] >= 2 * CKPT_EVERY
    assert entry["resumed_at"] % CKPT_EVERY == 0 or entry["resumed_at"] == entry["last_step"] + 1
    redone = len(steps) - STEPS  # steps the JSON log holds twice
    assert entry["steps_redone"] == redone == status["steps_redone"]
    table = cli("job", "status", job_id).output
    assert "Recoveries" in table and "preempted" in table
    listed = {j["id"]: j for j in json.loads(cli("job", "list", "--clusters", fmt="json").stdout)}
    assert listed[job_id]["recoveries"] == 1


@pytest.mark.slow
def test_gives_up_after_n_recoveries_with_one_line(spot_cluster):
    gcp = spot_cluster
    gcp.faults.preempt("c-1", after_s=0)  # as soon as a job runs on c-1
    result = cli("job", "submit", "--cluster", "c", "--recover", "0", "--env", "GCPGPU_METRICS=0", "--",
                 "--model", "tiny", "--data", "synthetic", "--steps", "100000", "--batch-size", "8", "--seq-len", "32")
    assert result.exit_code == 1
    last = result.output.strip().splitlines()[-1]
    assert "lost node c-1 (preempted)" in last and "recovery is off (--recover 0): giving up" in last
    # Nothing of the job keeps running on the node that is left.
    runs = [r for r in gcp.jobs.runner.all_runs() if r.id.startswith("cluster/")]
    assert runs and all(r.wait(30) for r in runs)


def test_steps_redone_come_from_the_trainer_s_own_lines(monkeypatch):
    """Counted by goodput.redone_of from each attempt's own lines (those logged from its delivery to the next's):
    the count `job status` and goodput read too."""
    from gcpgpu.jobs import goodput, ids
    from gcpgpu.jobs.cluster import recover
    from gcpgpu.jobs.cluster.record import stamp

    t0 = 1_800_000_000.0
    lines = [(1, "no checkpoint in /gcs/b/c: starting from step 0"), *((2 + i, f"step {i:>6} | loss 1.0 |")
                                                                      for i in range(13)),
             (30, "resumed from /gcs/b/c/step_00000010 at step 10"), (35, "step     14 | loss 0.9 |"),
             (40, "step     19 | loss 0.9 |"), (60, "resumed from /gcs/b/c/step_00000015 at step 15")]
    monkeypatch.setattr(goodput, "entries", lambda *a: [(t0 + t, "c-0", text) for t, text in lines])
    history = [{"attempt": 1, "at": stamp(t0 + 20), "delivered": stamp(t0 + 25), "last_step": 12, "log_every": 1},
               {"attempt": 2, "at": stamp(t0 + 50), "delivered": stamp(t0 + 55), "last_step": 19, "log_every": 5}]
    got = recover.steps_redone(None, "p", ids.parse("cluster:c:train-abc123"), history)
    # Logged every step: exact. Every 5th: the lost attempt may have run 4 steps past its last line.
    assert [(h["resumed_at"], h["steps_redone"], h["steps_redone_max"]) for h in got] == [(10, 3, 3), (15, 5, 9)]


def test_log_every_default_is_the_trainers():
    from gcpgpu.trainer.argv import LOG_EVERY_DEFAULT, log_every
    from gcpgpu.trainer.config import TrainConfig

    assert LOG_EVERY_DEFAULT == TrainConfig().log_every
    assert log_every(["--model", "tiny"]) == LOG_EVERY_DEFAULT and log_every(["--log-every=3"]) == 3


def test_recover_is_refused_for_vertex_before_any_call(gcp):
    result = cli("job", "submit", "--vertex", "--machine-type", "a2-highgpu-1g", "--recover", "2", "--",
                 "--model", "tiny")
    assert result.exit_code == 2 and "--recover applies to --cluster jobs" in result.output
    bad = cli("job", "submit", "--cluster", "c", "--recover", "-1")
    assert bad.exit_code == 2 and "--recover" in bad.output
    assert len(gcp.requests) == 0


def test_a_stocked_out_zone_moves_the_whole_cluster_to_the_next(gcp, monkeypatch):
    """Recovery brings the cluster back where it was; when that zone has no capacity left, it moves."""
    gcp.faults.preempt_grace_s = 0.5
    gcp.jobs.agent.simulated_run_s = 4.0
    up = cli("cluster", "up", "m", "--machine-type", "a2-highgpu-1g", "--nodes", "2",
             "--zones", "us-central1-a,us-central1-b", "--spot", "--yes")
    assert up.exit_code == 0, up.output
    gcp.faults.stockout("us-central1-a", "a2-highgpu-1g")  # nothing left where the cluster is
    gcp.faults.preempt("m-1", after_s=0.5)
    result = cli("job", "submit", "--cluster", "m", "--image", "busybox", "--command", sleeps(4), "--wait")
    assert result.exit_code == 0, result.output
    assert "no capacity" in result.output and "moving cluster m to us-central1-b" in result.output
    nodes = json.loads(cli("cluster", "status", "m", fmt="json").stdout)["nodes"]
    assert [(n["name"], n["zone"], n["status"]) for n in nodes] == [
        ("m-0", "us-central1-b", "RUNNING"), ("m-1", "us-central1-b", "RUNNING")]
    status = json.loads(cli("job", "status", result.stdout.splitlines()[0], fmt="json").stdout)
    assert status["state"] == "SUCCEEDED" and status["history"][0]["lost"] == ["m-1"]
    assert "--resume" not in json.dumps(status)  # not the bundled trainer: resubmitted as it was


def test_a_recovery_with_no_capacity_anywhere_ends_the_job_failed_not_recovering(gcp):
    """Issue 38: with no zone left to bring a lost node back, `--wait` exited 1 while the job's record went on
    saying RECOVERING (and its journal kept a recovery nobody would finish)."""
    from helpers import clients

    from gcpgpu.jobs.cluster import journal

    gcp.faults.preempt_grace_s = 0.5
    gcp.jobs.agent.simulated_run_s = 4.0
    up = cli("cluster", "up", "n", "--machine-type", "a2-highgpu-1g", "--nodes", "2", "--zone", "us-central1-a",
             "--spot", "--yes")
    assert up.exit_code == 0, up.output
    gcp.faults.stockout("us-central1-a", "a2-highgpu-1g")
    gcp.faults.preempt("n-1", after_s=0.5)
    result = cli("job", "submit", "--cluster", "n", "--image", "busybox", "--command", "sleep 4", "--wait")
    assert result.exit_code == 1, result.output
    assert "has capacity to bring it back" in result.output, result.output
    status = json.loads(cli("job", "status", result.stdout.splitlines()[0], fmt="json").stdout)
    assert status["state"] == "FAILED" and "capacity" in status["error"], status
    assert journal.read(clients(gcp), "test-proj", "n") is None


def test_ctrl_c_during_a_recovery_leaves_what_cluster_up_leaves(gcp, monkeypatch):
    from gcpgpu.cli import progress

    gcp.faults.preempt_grace_s = 0.2
    gcp.jobs.agent.simulated_run_s = 30.0
    assert cli("cluster", "up", "k", "--machine-type", "a2-highgpu-1g", "--nodes", "2", "--zone", "us-central1-a",
               "--spot", "--yes").exit_code == 0
    real_step = progress.ConsoleReporter.step

    def step(self, key: str, text: str) -> None:
        if key == "instances":  # the recovery's bulkInsert: interrupted right before it
            raise KeyboardInterrupt
        real_step(self, key, text)

    monkeypatch.setattr(progress.ConsoleReporter, "step", step)
    gcp.faults.preempt("k-1", after_s=0.2)
    result = cli("job", "submit", "--cluster", "k", "--image", "busybox", "--command", "sleep 30", "--wait")
    assert result.exit_code == 130, result.output
    assert "is no longer followed" in result.output and "finishes the recovery left half done" in result.output
    assert "keeps running on cluster k" in result.output and "gcpgpu job cancel" in result.output
    monkeypatch.setattr(progress.ConsoleReporter, "step", real_step)
    # Nothing half-made: the lost node is gone, the rest is whole and labelled; up completes it, down removes it.
    nodes = json.loads(cli("cluster", "status", "k", fmt="json").stdout)["nodes"]
    assert [(n["name"], n["status"]) for n in nodes] == [("k-0", "RUNNING")]
    again = cli("cluster", "up", "k", "--machine-type", "a2-highgpu-1g", "--nodes", "2", "--zone", "us-central1-a",
                "--spot", "--yes")
    assert again.exit_code == 0, again.output
    assert cli("cluster", "down", "k", "--yes").exit_code == 0
    assert cli("cluster", "status", "k").exit_code == 1


def test_job_follow_picks_up_an_unfollowed_spot_job_and_recovers_it(gcp):
    gcp.faults.preempt_grace_s = 0.2
    gcp.jobs.agent.simulated_run_s = 5.0
    assert cli("cluster", "up", "f", "--machine-type", "a2-highgpu-1g", "--nodes", "2", "--zone", "us-central1-a",
               "--spot", "--yes").exit_code == 0
    submitted = cli("job", "submit", "--cluster", "f", "--image", "busybox", "--command", sleeps(5))
    assert submitted.exit_code == 0, submitted.output
    job_id = submitted.stdout.splitlines()[0]
    assert f"'gcpgpu job follow {job_id}'" in submitted.output  # said, since nothing follows it
    gcp.faults.preempt("f-0", after_s=0)
    followed = cli("job", "follow", job_id)
    assert followed.exit_code == 0, followed.output
    assert "Recovery 1/3" in followed.output and f"Job {job_id} SUCCEEDED." in followed.output
    status = json.loads(cli("job", "status", job_id, fmt="json").stdout)
    assert status["attempt"] == 1 and status["history"][0]["lost"] == ["f-0"]


def test_a_node_that_is_deleted_rather_than_stopped_is_recovered_too(gcp):
    """Flex-start (and Spot set to DELETE) VMs vanish instead of going TERMINATED: the missing rank counts as lost."""
    gcp.faults.preempt_grace_s = 0.2
    gcp.jobs.agent.simulated_run_s = 4.0
    assert cli("cluster", "up", "x", "--machine-type", "a2-highgpu-1g", "--nodes", "2", "--zone", "us-central1-a",
               "--spot", "--yes").exit_code == 0
    inst = gcp.compute.projects["test-proj"].coll("zones/us-central1-a/instances")["x-1"]
    inst["scheduling"]["instanceTerminationAction"] = "DELETE"  # as a flex-start node is made
    gcp.faults.preempt("x-1", after_s=0.5)
    result = cli("job", "submit", "--cluster", "x", "--image", "busybox", "--command", sleeps(4), "--recover", "1")
    assert result.exit_code == 0, result.output
    assert "lost x-1 (preempted)" in result.output
    status = json.loads(cli("job", "status", result.stdout.splitlines()[0], fmt="json").stdout)
    assert status["state"] == "SUCCEEDED" and [n["node"] for n in status["per_node"]] == ["x-0", "x-1"]


def test_ctrl_c_while_following_says_the_job_runs_on_and_how_to_stop_it_never_a_recovery_that_was_not(gcp, monkeypatch):
    """Issue 51: Ctrl-C on `job submit --wait` talked of a half-done recovery when none had happened, and did not
    say that the job keeps running and costing, nor that `job cancel` stops it."""
    from gcpgpu.jobs import follow as follow_module

    gcp.jobs.agent.simulated_run_s = 600.0
    assert cli("cluster", "up", "k", "--machine-type", "a2-highgpu-1g", "--nodes", "1", "--zone", "us-central1-a",
               "--yes").exit_code == 0
    real = follow_module.follow

    def interrupted(*a, **k):
        k["on_state"] = lambda state: (_ for _ in ()).throw(KeyboardInterrupt)  # at its first state line
        return real(*a, **k)

    monkeypatch.setattr(follow_module, "follow", interrupted)
    for target in (["--cluster", "k", "--image", "busybox"], ["--vertex", "--machine-type", "a2-highgpu-1g",
                                                              "--image", "busybox"]):
        result = cli("job", "submit", *target, "--wait")
        assert result.exit_code == 130, result.output
        job_id = result.stdout.splitlines()[0]
        (said,) = [line for line in result.output.splitlines() if line.startswith("Interrupted.")]
        assert f"'gcpgpu job cancel {job_id}' stops it" in said and "keeps running" in said, said
        assert "recovery" not in said, said


def test_a_recovered_trainer_without_a_checkpoint_location_starts_afresh_instead_of_failing(gcp):
    """No --ckpt-dir and no --output-dir: nothing to resume from, and the trainer refuses --resume without
    --ckpt-dir, so the recovered attempt starts from step 0 (the step line says so) and the job still ends."""
    gcp.faults.preempt_grace_s = 0.2
    assert cli("cluster", "up", "r", "--machine-type", "a2-highgpu-1g", "--nodes", "2", "--zone", "us-central1-a",
               "--spot", "--yes").exit_code == 0
    gcp.faults.preempt("r-1", after_s=0)  # as soon as the job runs on r-1
    result = cli("job", "submit", "--cluster", "r", "--recover", "1", "--wait", "--", "--model", "tiny", "--steps",
                 "3", "--seq-len", "16", "--batch-size", "2", "--vocab-size", "256")
    assert result.exit_code == 0, result.output
    assert "from the start: it has no --ckpt-dir or --output-dir to resume from" in result.output
    status = json.loads(cli("job", "status", result.stdout.splitlines()[0], fmt="json").stdout)
    assert status["state"] == "SUCCEEDED" and status["attempt"] == 1 and status["history"][0]["lost"] == ["r-1"]


def test_a_recovered_jobs_cause_comes_from_the_attempt_that_failed_not_an_earlier_ones_stop(gcp):
    gcp.faults.preempt_grace_s = 0.2
    assert cli("cluster", "up", "r", "--machine-type", "a2-highgpu-1g", "--nodes", "2", "--zone", "us-central1-a",
               "--spot", "--yes").exit_code == 0
    gcp.faults.preempt("r-1", after_s=1)  # a second into the first attempt, which has said its line by then
    command = ("sh -c 'if [ -n \"$GCPGPU_RESTART\" ]; then echo \"RuntimeError: attempt two broke\"; exit 3; fi; "
               "echo \"InterruptedError: attempt one was stopped\"; sleep 60'")
    result = cli("job", "submit", "--cluster", "r", "--image", "busybox", "--command", command, "--recover", "1",
                 "--wait")
    assert result.exit_code == 1, result.output
    status = json.loads(cli("job", "status", result.stdout.splitlines()[0], fmt="json").stdout)
    assert status["state"] == "FAILED" and status["attempt"] == 1, status
    assert status["cause"] == "RuntimeError: attempt two broke", status
