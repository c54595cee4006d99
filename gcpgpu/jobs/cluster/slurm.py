"""The backend of a Slurm cluster (`cluster up --scheduler slurm`): jobs queued by Slurm, reached through
Google's APIs only.

The laptop never talks to Slurm. `job submit` writes the job into the cluster's job records (store.py,
project metadata) as PENDING with what the batch script needs under `submit` (the same node record the
agent backend delivers: image, command, NCCL environment, mounts, workdir, secrets' names) and its place
in the queue, and returns. Node 0's queue agent (gcpgpu/slurm/queue.py) hands it to sbatch, then writes
back what squeue says (state, reason, nodes, place in the queue, requeues as attempts) into the same
record, which every view reads. `job cancel` asks through the record too.

Why records and not slurmrestd through an IAP tunnel: it needs no SSH, no tunnel and no port, works the
same on the emulator, and the records outlive every node (node 0 included); the price is the agent's
poll (a second or so) between a submit and sbatch.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

from gcpgpu.cluster.observe import observe_nodes
from gcpgpu.errors import CloudError, UsageProblem
from gcpgpu.gcp.clients import Clients
from gcpgpu.gcp.identity import whoami
from gcpgpu.jobs import ids
from gcpgpu.jobs.spec import ValidJob
from gcpgpu.jobs.state import CANCELLED, PENDING, RECOVERING, UNKNOWN, JobState, is_final

from . import nodes, store, view
from .deliver import new_record, run_key
from .placement import Asked, Placement, Put
from .record import JobRecord, QueuePlace, stamp
from .store import Seen

NAME = "slurm"  # the scheduler's name: cluster/slurm_state.py's node metadata, and a record's `scheduler`
TIERS = {"high": 3, "normal": 2, "low": 1}
WAIT_POLL_S = 2.0


def position(recorded: list[JobRecord], priority: str) -> int:
    """Where a new job of `priority` joins the queue: behind every queued job of its tier or higher."""
    waiting = [r for r in recorded if r.queue is not None and r.state in (PENDING, RECOVERING)]
    return 1 + sum(1 for r in waiting if TIERS.get(str(r.queue.priority), 2) >= TIERS[priority])  # type: ignore[union-attr]


def check(job: ValidJob, cluster: str) -> None:
    """Slurm takes every option the agent backend does, and --priority; not --max-spend (node 0's queue
    agent follows its jobs, and prices none of them)."""
    if job.spec.max_spend is not None:
        raise UsageProblem(f"--max-spend: cluster {cluster} runs Slurm, whose jobs no gcpgpu follower prices; cap "
                           f"the cluster instead ('cluster up {cluster} ... --max-spend USD')")


@contextlib.contextmanager
def claim(clients: Clients, project: str, placed: Placement) -> Iterator[Callable[[ValidJob, Asked], Put]]:
    """A queue takes any number of jobs: nothing is held while a job is staged."""
    def put(job: ValidJob, asked: Asked) -> Put:
        return _queue(clients, project, job, placed, asked)

    yield put


def _queue(clients: Clients, project: str, job: ValidJob, placed: Placement, asked: Asked) -> Put:
    """Queue the job on the cluster's Slurm (as a PENDING record the controller's agent hands to sbatch)."""
    want = len(placed.nodes)
    priority = job.spec.priority or "normal"
    node_record = new_record(job, placed, scheduler=NAME).but(submitter=whoami(clients))
    pol = dict(node_record.policy or {})
    pol.pop("notify", None)  # webhook URLs are not written where every reader of the project sees them
    node_record = node_record.but(policy=pol or None)  # type: ignore[arg-type]
    opened = store.opening(node_record).but(queue=QueuePlace(priority, want), submit=node_record,
                                            reason="waiting for the controller's agent")
    place = 0

    def change(current: list[JobRecord]) -> list[JobRecord]:
        nonlocal place
        place = position(current, priority)
        return [*current, opened.but(queue=QueuePlace(priority, want, place))]

    store.update(clients, project, placed.cluster, change)
    jid = ids.JobId("cluster", cluster=placed.cluster, job=node_record.id)
    shown = {"id": str(jid), "target": "cluster", "name": job.name, "cluster": placed.cluster, "nodes": want,
             "machine_type": placed.machine.name, "image": node_record.image, "priority": priority,
             "position": place, "scheduler": NAME}
    line = (f"Queued {job.name} as {jid} ({want} x {placed.machine.name}, priority {priority}): position {place} "
            f"in cluster {placed.cluster}'s queue; 'gcpgpu job list --cluster {placed.cluster}' shows the queue")
    return Put(jid, shown, line, follow=asked.wait)  # Slurm requeues and restarts it itself: only --wait follows


def status(clients: Clients, project: str, jid: ids.JobId, seen: Seen) -> JobState:
    """The job as its record says (node 0's queue agent writes what Slurm says of it: state, attempt, history,
    why it waits), with the nodes Slurm gave it and what each one's job agent reports, as any cluster job."""
    found = seen.of(jid.job)
    if found is None:
        raise CloudError(f"job {jid.job} is not on cluster {jid.cluster}; see 'gcpgpu job list'")
    state = view.from_record(jid, found)
    rows = node_rows(clients, project, jid, found)
    queue = found.queue or QueuePlace(None)
    waiting = found.state in (PENDING, RECOVERING)
    return replace(state, nodes=len(rows), per_node=rows, priority=queue.priority, scheduler_id=found.slurm_id,
                   position=queue.position if waiting else None, reason=found.reason if waiting else None,
                   output=found.slurm_output)


def hostnames(nodelist: str | None) -> list[str]:
    """Slurm's compact node list ("q-[0-1,3]", "q-0,q-2") as names, in Slurm's order (its tasks' ranks)."""
    out: list[str] = []
    for part in re.findall(r"[^,\[]+(?:\[[^\]]*\])?", nodelist or ""):
        m = re.fullmatch(r"(.*)\[(.*)\]", part)
        if not m:
            out.append(part)
            continue
        for item in m.group(2).split(","):
            lo, _, hi = item.partition("-")
            width = len(lo)
            out.extend(f"{m.group(1)}{i:0{width}d}" for i in range(int(lo), int(hi or lo) + 1))
    return out


def node_rows(clients: Clients, project: str, jid: ids.JobId, record: JobRecord) -> list[dict]:
    """Each node Slurm gave the job (its rank: its place in the allocation), with what the node's job agent
    reports of the job's current attempt (nodes.py's rows: a lost node FAILED, its status said); a node whose
    agent has moved on to another job since the job ended shows the job's end."""
    names = hostnames(record.slurm_nodes) if record.state not in (PENDING, RECOVERING) else []
    if not names:
        return []
    found = {n.name: n for n in observe_nodes(clients, project, jid.cluster or "")}
    attempt = record.but(run=run_key(record.id, record.attempt))
    mine = [(found[name], attempt) for name in names if name in found]
    try:
        said = nodes.reports(clients, project, [n for n, _r in mine])
    except CloudError:
        said = {}
    rows = nodes.state_of(jid, mine, said).per_node if mine else []
    rank = {name: i for i, name in enumerate(names)}
    for row in rows:
        row["rank"] = rank[row["node"]]
        if row["state"] == UNKNOWN and is_final(record.state):
            row.update(state=record.state, message=None)
    return sorted(rows, key=lambda r: r["rank"])


def cancel(clients: Clients, project: str, jid: ids.JobId, seen: Seen) -> JobState:
    """Ask the controller's agent to scancel the job (pending or running); one never handed over ends now.
    The job as views showed it when asked."""
    state = status(clients, project, jid, seen)

    def change(old: JobRecord) -> JobRecord | None:
        if old.final:
            return None
        if old.slurm_id is None:  # never reached sbatch: nothing runs, it ends here
            return old.but(state=CANCELLED, ended=stamp(), submit=None)
        return old.but(cancel=True)

    store.update(clients, project, jid.cluster or "", store.change_one(jid.job, change))
    return state


def row(record: JobRecord) -> dict:
    """`job list`'s queue columns: priority, why it waits, and how it came (VIA: `job submit`, or sbatch by
    hand on a node)."""
    queue = record.queue or QueuePlace(None)
    waiting = record.state in (PENDING, RECOVERING)
    return {"priority": queue.priority, "reason": record.reason if waiting else None,
            "position": queue.position if waiting else None, "slurm_nodes": record.slurm_nodes,
            "via": "sbatch" if record.by_hand else "gcpgpu"}  # sbatch'ed on a node by hand, or job submit


def has_work(clients: Clients, project: str, cluster: str, seen: Seen) -> bool:
    """A queued or running job is work: the cluster's nodes stay up for it."""
    return any(r.scheduler == NAME and not r.final for r in seen.records)


def follow(clients: Clients, project: str, jid: ids.JobId, *, on_state: Callable[[JobState], None],
           poll_s: float = WAIT_POLL_S, **_: Any) -> JobState:
    """Follow a queued job to its end: its record, as the controller's agent writes it (Slurm requeues and
    restarts it itself: nothing here leads it)."""
    return wait(lambda: status(clients, project, jid, store.read(clients, project, jid.cluster or "")), on_state,
                poll_s)


def wait(status_now: Callable[[], JobState], tell: Callable[[JobState], None],
         poll_s: float = WAIT_POLL_S) -> JobState:
    """The job as `status_now()` shows it, each change of state or attempt told, until it ends."""
    last: tuple[str, int] | None = None
    while True:
        state = status_now()
        if (state.state, state.attempt) != last:
            last = (state.state, state.attempt)
            tell(state)
        if is_final(state.state):
            return state
        time.sleep(poll_s)
