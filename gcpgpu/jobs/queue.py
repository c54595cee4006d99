"""Jobs on a Slurm cluster (`cluster up --scheduler slurm`): queued by Slurm, reached through Google's APIs only.

The laptop never talks to Slurm. `job submit` writes the job into the cluster's job records (jobs/record.py,
project metadata) as PENDING with what the batch script needs under `submit` (the same job record the nodes'
agents run: image, command, NCCL environment, mounts, workdir, secrets' names) and its place in the queue,
and returns. Node 0's queue agent (gcpgpu/slurm/queue.py) hands it to sbatch, then writes back what
squeue says (state, reason, nodes, place in the queue, requeues as attempts) into the same record, which
every view already reads (`job status`, `job list`, `--wait`). `job cancel` asks through the record too.

Why records and not slurmrestd through an IAP tunnel: it needs no SSH, no tunnel and no port, works the
same on the emulator, and the records outlive every node (node 0 included); the price is the agent's
poll (a second or so) between a submit and sbatch.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from gcpgpu.errors import CloudError
from gcpgpu.gcp.clients import Clients

from . import ids
from . import record as records
from .spec import ValidJob
from .state import CANCELLED, PENDING, JobState, is_final

SCHEDULER_KEY = "gcpgpu-scheduler"  # node metadata: "slurm" (cluster/plan.py writes it)
TIERS = {"high": 3, "normal": 2, "low": 1}
WAIT_POLL_S = 2.0


def runs_slurm(metadata: dict[str, str]) -> bool:
    return metadata.get(SCHEDULER_KEY) == "slurm"


def position(recorded: list[dict], priority: str) -> int:
    """Where a new job of `priority` joins the queue: behind every queued job of its tier or higher."""
    waiting = [r for r in recorded if r.get("queue") and r.get("state") == PENDING]
    return 1 + sum(1 for r in waiting if TIERS.get(r["queue"].get("priority"), 2) >= TIERS[priority])


def submit(clients: Clients, project: str, job: ValidJob, cluster: str, placed: Any) -> tuple[ids.JobId, dict]:
    """Queue the job on the cluster's Slurm (as a PENDING record the controller's agent hands to sbatch)."""
    from . import cluster as cluster_jobs

    want = len(placed.nodes)
    priority = job.spec.priority or "normal"
    node_record = cluster_jobs.job_record(job, cluster, placed, want)
    node_record["submitted"] = node_record["created"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    pol = dict(node_record.get("policy") or {})
    pol.pop("notify", None)  # webhook URLs are not written where every reader of the project sees them
    node_record["policy"] = pol
    opened = {**records.from_nodes(node_record), "queue": {"priority": priority, "nodes": want},
              "submit": node_record, "reason": "waiting for the controller's agent"}
    place = 0

    def change(current: list[dict]) -> list[dict]:
        nonlocal place
        place = position(current, priority)
        return [*current, {**opened, "queue": {**opened["queue"], "position": place}}]

    records.update(clients, project, cluster, change)
    jid = ids.JobId("cluster", cluster=cluster, job=str(node_record["id"]))
    return jid, {"id": str(jid), "target": "cluster", "name": job.name, "cluster": cluster, "nodes": want,
                 "machine_type": placed.machine.name, "image": node_record["image"], "priority": priority,
                 "position": place, "scheduler": "slurm"}


def is_queued(record: dict | None) -> bool:
    return bool(record and record.get("queue"))


def cancel(clients: Clients, project: str, jid: ids.JobId) -> None:
    """Ask the controller's agent to scancel the job (pending or running); one never handed over ends now."""
    def change(current: list[dict]) -> list[dict] | None:
        old = next((r for r in current if r.get("id") == jid.job), None)
        if old is None or is_final(old.get("state")):
            return None
        if old.get("slurm_id") is None:  # never reached sbatch: nothing runs, it ends here
            new = {**old, "state": CANCELLED, "ended": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
            new.pop("submit", None)
        else:
            new = {**old, "cancel": True}
        return [new if r.get("id") == jid.job else r for r in current]

    if not records.update(clients, project, jid.cluster or "", change):
        seen = records.read(clients, project, jid.cluster or "").of(jid.job)
        if seen is None:
            raise CloudError(f"job {jid.job} is not on cluster {jid.cluster}; see 'gcpgpu job list'")


def row_extras(record: dict) -> dict:
    """`job list`'s queue columns for a queued job: priority, why it waits, and how it came (VIA: `job submit`,
    or sbatch by hand on a node)."""
    queue = record.get("queue") or {}
    waiting = record.get("state") == PENDING
    return {"priority": queue.get("priority"), "reason": record.get("reason") if waiting else None,
            "position": queue.get("position") if waiting else None, "slurm_nodes": record.get("slurm_nodes"),
            "via": "sbatch" if record.get("by_hand") else "gcpgpu"}  # sbatch'ed on a node by hand, or job submit


def wait(status: Callable[[], JobState], tell: Callable[[JobState], None], poll_s: float = WAIT_POLL_S) -> JobState:
    """`job submit --wait` on a Slurm cluster: the job as `status()` shows it (its record, as the controller's
    agent writes it), each change told, until it ends (Slurm requeues and restarts it itself: nothing here
    leads it)."""
    last: tuple[str, int] | None = None
    while True:
        state = status()
        if (state.state, state.attempt) != last:
            last = (state.state, state.attempt)
            tell(state)
        if is_final(state.state):
            return state
        time.sleep(poll_s)
