"""What node 0's queue agent writes of a Slurm job that Slurm requeued, and why a job waits, in words.

A requeue (Slurm's Restarts going up: a node lost under the job and marked DOWN by the keeper, a
preemption by a higher partition, a `scontrol requeue`) is a new attempt. The agent writes it as a
cluster without Slurm writes a recovery (jobs/cluster/recover.py): one history entry per attempt
(record.py's HistoryEntry: attempt, at, cause, node; `lost` for lost nodes), the job RECOVERING with
its node and cause while it waits to run again, and the entry's `delivered` when it runs again.
"""

from __future__ import annotations

from gcpgpu.jobs.cluster.record import HistoryEntry, JobRecord, stamp
from gcpgpu.jobs.cluster.slurm import TIERS, hostnames
from gcpgpu.jobs.state import RECOVERING, RUNNING, is_final

# Slurm's reasons (scontrol's Reason=) as `job status` and `job list` say them.
WORDS = {"Priority": "behind higher-priority jobs", "Resources": "waiting for free nodes",
         "BeginTime": "its requeue delay", "Dependency": "waiting for another job",
         "PartitionNodeLimit": "more nodes than the cluster has", "JobHeldUser": "held by its user",
         "JobHeldAdmin": "held by an administrator"}
NODES_AWAY = ("ReqNodeNotAvail", "NodeDown", "Nodes_required_for_job_are_DOWN")
LIMITS = ("Limit", "MaxJobs", "MaxNodes", "MaxCpu", "MaxGRES")


def in_words(reason: str, replacing: bool, drained: list[str] | tuple[str, ...] = ()) -> str | None:
    """Why a job waits: Slurm's `reason`, said as a user reads it. `replacing`: the keeper is bringing a lost
    node back; `drained`: the nodes drained for a reason not gcpgpu's (an administrator's: Slurm names a
    drained or down node's wait, and a wait behind a higher partition's job, with the same words)."""
    if reason == "Resources" and drained:
        return f"waiting for free nodes ({', '.join(drained)} drained)"
    if reason in WORDS:
        return WORDS[reason]
    if reason in ("", "None"):  # Slurm has not said yet (between its passes)
        return "nodes being replaced" if replacing else f"drained nodes: {', '.join(drained)}" if drained else None
    if reason.startswith(NODES_AWAY):
        return "nodes being replaced" if replacing else f"drained nodes: {', '.join(drained)}" if drained \
            else "behind higher-priority jobs"
    if any(word in reason for word in LIMITS):
        return "per-user limit" if "User" in reason or "Assoc" in reason else "a limit of its partition or QOS"
    return reason.replace("_", " ")


def why_requeued(record: JobRecord, job: dict[str, str], jobs: dict[str, dict[str, str]],
                 losses: dict[str, tuple[float, str]], since: float) -> tuple[str | None, str, list[str]]:
    """(node, cause, lost nodes) of the requeue of `record`'s job (`job`, as scontrol shows it; `jobs`: all of
    them): a node it ran on lost since its attempt began (`losses`: the keeper's, node -> (when, cause)), else a
    job of a higher partition that preempted it, else a requeue by hand."""
    ran_on = hostnames(record.slurm_nodes)
    lost = [n for n in ran_on if n in losses and losses[n][0] >= since]
    if lost:
        return ", ".join(lost), ", ".join(sorted({losses[n][1] for n in lost})), lost
    tier = TIERS.get(job.get("Partition", ""), 0)
    above = sorted((j for j in jobs.values() if TIERS.get(j.get("Partition", ""), 0) > tier
                    and j.get("JobState") in ("RUNNING", "PENDING", "CONFIGURING")),
                   key=lambda j: (j.get("JobState") != "RUNNING", int(j["JobId"])))
    cause = f"preempted by higher-priority job {above[0].get('JobName')}" if above else "requeued"
    return ", ".join(ran_on) or None, cause, []


def attempt_began(record: JobRecord) -> float:
    """When the record's current attempt began (gcpgpu.gcp.clock): its last entry's delivery, else its start."""
    from gcpgpu.times import parse_timestamp

    last = (record.history or [{}])[-1] if record.history else {}
    return parse_timestamp(last.get("delivered") or last.get("at") or record.started or record.created) or 0.0


def requeued(old: JobRecord, new: JobRecord, why: tuple[str | None, str, list[str]] | None,
             running: bool) -> JobRecord:
    """`new` (`old` with what scontrol says now) with its requeues written: a history entry for each new attempt,
    RECOVERING (node, cause) until it runs again (`running`: Slurm says RUNNING; a requeued job's tasks being
    killed show COMPLETING with the new count first), and the entry's `delivered` once it does."""
    history: list[HistoryEntry] = [dict(h) for h in old.history or []]  # type: ignore[misc]
    if new.attempt > old.attempt:
        node, cause, lost = why or (None, "requeued", [])
        for attempt in range(old.attempt + 1, new.attempt + 1):
            entry: HistoryEntry = {"attempt": attempt, "at": stamp(), "cause": cause, "node": node}
            if lost:
                entry["lost"] = lost
            history.append(entry)
    last = history[-1] if history and history[-1].get("attempt") == new.attempt else None
    if is_final(new.state) or last is None or last.get("delivered"):
        return new.but(history=history or old.history, node=None, cause=None)
    if not running:
        return new.but(history=history, state=RECOVERING, node=last.get("node"), cause=last.get("cause"))
    history[-1] = {**last, "delivered": stamp()}
    return new.but(history=history, state=RUNNING, node=None, cause=None)
