"""A Slurm cluster's job in `job status` as any cluster job: its nodes with a row each, its cost for the time it
held them, its priority, its place in the queue, Slurm's id and why it waits, in words.

The jobs run the bundled trainer under the emulator's real Slurm (tests/test_cluster_slurm.py). Tests that start
Slurm skip, saying what to install, where it is missing.
"""

from __future__ import annotations

import json

from helpers import PROJECT, wait_for

# The queue's own tests' commands and jobs, shared rather than written again.
from test_slurm_queue import LONG, QUICK, UP, cli, needs_slurm, submitted

from gcpgpu.jobs.cluster.record import JobRecord
from gcpgpu.jobs.state import JobState


def status(job: str) -> dict:
    shown = cli("job", "status", job, fmt="json")
    assert shown.exit_code == 0, shown.output
    return json.loads(shown.output)


# -- without Slurm ---------------------------------------------------------------------------------------------
def test_slurms_reasons_are_said_in_words():
    from gcpgpu.slurm.requeue import in_words

    long = "Nodes_required_for_job_are_DOWN,_DRAINED_or_reserved_for_jobs_in_higher_priority_partitions"
    assert in_words(long, replacing=False) == "behind higher-priority jobs"
    assert in_words(long, replacing=True) == "nodes being replaced"
    assert in_words(long, replacing=False, drained=["q-1"]) == "drained nodes: q-1"
    assert in_words("Priority", False) == "behind higher-priority jobs"
    assert in_words("QOSMaxJobsPerUserLimit", False) == "per-user limit"
    assert in_words("Resources", False) == "waiting for free nodes"
    assert in_words("Resources", False, ["q-1"]) == "waiting for free nodes (q-1 drained)"


def test_a_requeue_is_an_attempt_recovering_in_the_history_until_it_runs_again_and_only_running_time_costs():
    from gcpgpu.jobs.cluster.spent import held
    from gcpgpu.slurm.requeue import requeued

    ran = JobRecord(id="low-abc123", state="RUNNING", attempt=0, slurm_nodes="q-[0-1]", started="2026-01-01T00:00:00Z",
                    history=[])
    back = requeued(ran, ran.but(state="PENDING", attempt=1, slurm_nodes=None),
                    ("q-0, q-1", "preempted by higher-priority job high-1", []), running=False)
    assert (back.state, back.node, back.cause) == ("RECOVERING", "q-0, q-1", "preempted by higher-priority job high-1")
    [entry] = back.history or []
    assert entry["attempt"] == 1 and entry["cause"] == back.cause and entry["node"] == "q-0, q-1" and entry["at"]
    assert requeued(back, back.but(state="PENDING"), None, False).state == "RECOVERING"  # still waiting to run again
    # Slurm shows a requeued job whose tasks are being killed as COMPLETING (RUNNING here): not running again yet.
    assert requeued(ran, ran.but(state="RUNNING", attempt=1), None, running=False).state == "RECOVERING"
    again = requeued(back, back.but(state="RUNNING"), None, True)
    assert again.state == "RUNNING" and again.node is None and (again.history or [])[0]["delivered"]
    state = JobState(started="2026-01-01T00:00:00Z", history=[{"at": "2026-01-01T00:10:00Z",
                                                               "delivered": "2026-01-01T00:30:00Z"}])
    from gcpgpu.times import parse_timestamp

    end = parse_timestamp("2026-01-01T01:00:00Z")
    assert sum(b - a for a, b in held(state, end)) == 600 + 1800  # not the 20 minutes it waited


# -- on the emulator's Slurm -----------------------------------------------------------------------------------
@needs_slurm
def test_a_slurm_jobs_status_has_its_nodes_their_rows_its_cost_priority_slurm_id_and_place(gcp):
    assert cli(*UP[:2], "q", *UP[2:], "--scheduler", "slurm").exit_code == 0
    a = submitted("--name", "a", "--", *LONG)  # both nodes, normal
    b = submitted("--name", "b", "--nodes", "1", "--priority", "low", "--", *QUICK)  # waits for A

    def running() -> dict | None:
        got = status(a)
        return got if got["state"] == "RUNNING" and [r["state"] for r in got["per_node"]] == ["RUNNING"] * 2 else None

    wait_for(running, timeout=300, interval=0.5, what="A running on both nodes, each node's agent saying so")
    gcp.clock.advance(600)  # ten minutes on both nodes
    got = status(a)
    assert got["nodes"] == 2 and [(r["node"], r["rank"]) for r in got["per_node"]] == [("q-0", 0), ("q-1", 1)]
    assert got["priority"] == "normal" and got["scheduler_id"].isdigit() and got["cost_usd"] > 0
    assert got["node_hours"] >= 2 * 600 / 3600
    waiting = wait_for(lambda: (s := status(b)).get("position") == 1 and s.get("reason") and s, timeout=60,
                       interval=0.5, what="B's place and reason in its status")
    assert waiting["state"] == "PENDING" and waiting["priority"] == "low" and waiting["scheduler_id"].isdigit()
    assert "_" not in waiting["reason"] and waiting["nodes"] == 0 and waiting["cost_usd"] == 0
    table = cli("job", "status", a)
    assert "Nothing to show" not in table.output and "q-1" in table.output
    (cost_line,) = [line for line in table.output.splitlines() if line.startswith("COST SO FAR")]
    assert "$0.00" not in cost_line, cost_line  # (a lost part of no time may cost $0.00 in the goodput table)
    assert cli("job", "cancel", b).exit_code == 0 and cli("job", "cancel", a).exit_code == 0
    assert cli("cluster", "down", "q", "--yes").exit_code == 0


@needs_slurm
def test_a_low_job_without_checkpoints_preempted_by_a_normal_one_starts_afresh_and_succeeds(gcp):
    """`normal` preempts `low` too (README). The low job keeps no checkpoints (no --ckpt-dir, no --output-dir):
    requeued, it starts again from step 0 instead of failing at once on --resume."""
    assert cli(*UP[:2], "q", *UP[2:], "--scheduler", "slurm").exit_code == 0
    low = submitted("--name", "low", "--priority", "low", "--", *LONG[:3], "40", *LONG[4:], "--log-every", "1")
    wait_for(lambda: status(low)["state"] == "RUNNING", timeout=300, interval=0.5, what="the low job running")
    normal = submitted("--name", "normal", "--", *QUICK)  # both nodes: the low job's
    shown = wait_for(lambda: (s := status(low))["state"] == "RECOVERING" and s, timeout=180, interval=0.3,
                     what="the low job RECOVERING")
    assert shown["cause"] == f"preempted by higher-priority job {normal.rsplit(':', 1)[-1]}"
    followed = cli("job", "follow", low)  # from RECOVERING to its end, as any cluster job's
    assert followed.exit_code == 0, followed.output
    told = [line.split(": ", 1)[1] for line in followed.output.splitlines() if line.startswith(tuple("0123456789"))
            and "step" not in line]
    assert told[0] == f"RECOVERING (attempt 1): node q-0, q-1, {shown['cause']}", followed.output
    assert "PENDING" not in followed.output and told[-1] == "SUCCEEDED (attempt 1)", followed.output
    got = status(low)
    assert got["state"] == "SUCCEEDED" and got["attempt"] == 1, got
    assert status(normal)["state"] == "SUCCEEDED"
    assert cli("cluster", "down", "q", "--yes").exit_code == 0


@needs_slurm
def test_a_node_slurm_drained_for_a_task_it_could_not_kill_is_returned_to_service_and_an_admins_drain_is_not(gcp):
    """A lost attempt's task Slurm cannot kill in time drains its node ("Kill task failed"), and nothing returned it:
    the queue waited for good. Node 0's keeper returns it; a node an administrator drained stays drained, and a job
    waiting for it says so."""
    import os
    import subprocess

    from test_cluster_slurm import sinfo

    from gcpgpu.slurm.node import conf_path

    assert cli(*UP[:2], "q", *UP[2:], "--scheduler", "slurm").exit_code == 0
    wait_for(lambda: sinfo(gcp, "q") == {"q-0": "idle", "q-1": "idle"}, timeout=120, interval=0.5,
             what="both nodes idle")
    env = {**os.environ, "SLURM_CONF": str(conf_path(gcp.jobs.slurm.folder(PROJECT, "q"), "q-0"))}

    def drain(reason: str) -> None:  # what slurmd does to a node whose task outlived UnkillableStepTimeout
        done = subprocess.run(["scontrol", "update", "NodeName=q-1", "State=DRAIN", f"Reason={reason}"], env=env,
                              capture_output=True, text=True, timeout=30, check=False)
        assert done.returncode == 0, done.stderr

    drain("Kill task failed")
    wait_for(lambda: sinfo(gcp, "q").get("q-1") == "idle", timeout=120, interval=0.5,
             what="q-1 returned to service by node 0's keeper")
    drain("disk check")  # an administrator's: left alone
    job = submitted("--name", "both", "--", *QUICK)  # needs both nodes
    waiting = wait_for(lambda: "drained" in str((s := status(job)).get("reason")) and s, timeout=120, interval=0.5,
                       what="the job saying it waits for a drained node")
    assert waiting["state"] == "PENDING" and "q-1" in waiting["reason"]
    assert sinfo(gcp, "q").get("q-1") in ("drain", "drng")
    subprocess.run(["scontrol", "update", "NodeName=q-1", "State=RESUME"], env=env, timeout=30, check=True)
    wait_for(lambda: status(job)["state"] == "SUCCEEDED", timeout=300, interval=0.5, what="the job done")
    assert cli("cluster", "down", "q", "--yes").exit_code == 0


def test_a_records_output_file_is_a_printable_path_on_a_named_node_or_nothing():
    kept = JobRecord.from_json({"id": "slurm-5", "slurm_output": {"path": "/home/me/out.txt", "node": "q-1"}})
    assert kept is not None and kept.slurm_output == {"path": "/home/me/out.txt", "node": "q-1"}
    for bad in ({"path": "/x\n$(id)", "node": "q-0"}, {"path": "/x", "node": "q 0; id"}, "/x"):
        got = JobRecord.from_json({"id": "slurm-5", "slurm_output": bad})
        assert got is not None and got.slurm_output is None
