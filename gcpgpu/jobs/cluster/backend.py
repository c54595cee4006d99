"""The cluster target's verbs (jobs/route.py hands every `cluster:NAME:JOB` here), each handed to the backend
that runs the cluster's jobs: its scheduler, as the cluster says of itself.

    agent    agent.py: gcpgpu's job agent on each node, one job at a time (a cluster made without --scheduler)
    slurm    slurm.py: the cluster's own Slurm queue (cluster up --scheduler slurm)

A job being submitted goes to the scheduler its cluster's nodes name (metadata gcpgpu-scheduler, which
`cluster up` writes); a job already submitted to the one its record names (record.py's `scheduler`).
Every scheduler has the same verbs (Scheduler); a new one (GKE's, say) is one more entry in SCHEDULERS
and its module.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from typing import Any

from gcpgpu.cluster.observe import Node
from gcpgpu.cluster.slurm_state import SCHEDULER_KEY
from gcpgpu.errors import CloudError
from gcpgpu.gcp.clients import Clients
from gcpgpu.jobs import ids
from gcpgpu.jobs.spec import ValidJob
from gcpgpu.jobs.state import JobState

from . import nodes, store
from .placement import Asked, Placement, Put
from .record import AGENT, JobRecord
from .store import Seen
from .view import from_record

Verb = Callable[[Clients, str, ids.JobId, Seen], JobState]


@dataclass(frozen=True)
class Scheduler:
    """A cluster scheduler's verbs."""

    name: str
    check: Callable[[ValidJob, str], None]  # (job, cluster): refuse what it does not take, before anything is staged
    # Hold the cluster while a job is staged (workdir, image) and put on it; yields put(job, asked) -> Put.
    claim: Callable[[Clients, str, Placement], AbstractContextManager[Callable[[ValidJob, Asked], Put]]]
    status: Verb
    cancel: Verb  # asks, and returns the state right before asking
    follow: Callable[..., JobState]  # (clients, project, jid, *, recover, on_state, say, poll_s, reporter)
    row: Callable[[JobRecord], dict]  # `job list`'s columns of its own
    has_work: Callable[[Clients, str, str, Seen], bool]  # a job runs, is being recovered, or waits
    queues: bool = False  # its jobs wait in a shared queue from submission or a requeue (goodput's `queued`)


def _agent() -> Scheduler:
    from . import agent

    return Scheduler(AGENT, agent.check, agent.claim, agent.status, agent.cancel, agent.follow, agent.row,
                     agent.has_work)


def _slurm() -> Scheduler:
    from . import slurm

    return Scheduler(slurm.NAME, slurm.check, slurm.claim, slurm.status, slurm.cancel, slurm.follow, slurm.row,
                     slurm.has_work, queues=True)


# Imported when first used: a command that reads one cluster job loads one backend.
SCHEDULERS: dict[str, Callable[[], Scheduler]] = {AGENT: _agent, "slurm": _slurm}


def scheduler(name: str | None) -> Scheduler:
    make = SCHEDULERS.get(name or AGENT)
    if make is None:  # a newer gcpgpu's
        raise CloudError(f"this cluster's jobs run on scheduler {name!r}, which this gcpgpu does not know: "
                         "upgrade gcpgpu")
    return make()


def of_nodes(found: list[Node]) -> Scheduler:
    """The scheduler a cluster's nodes name (none: gcpgpu's job agent)."""
    return scheduler(found[0].metadata.get(SCHEDULER_KEY) if found else None)


def _of(seen: Seen, jid: ids.JobId) -> Scheduler:
    """The scheduler a job's record names (a job no record tells of: an older gcpgpu's, on the agent)."""
    found = seen.of(jid.job) or seen.pending_of(jid.job)
    return scheduler(found.scheduler if found is not None else None)


def placed(clients: Clients, project: str, job: ValidJob) -> tuple[Placement, Scheduler]:
    """Where the job goes on its cluster (the nodes, read once) and the scheduler that takes it, which has
    refused what it does not take."""
    from .placement import place

    where = place(clients, project, job, str(job.spec.cluster))
    target = of_nodes(where.nodes)
    target.check(job, where.cluster)
    return where, target


def submit(clients: Clients, project: str, job: ValidJob, asked: Asked | None = None) -> Put:
    """Put a job whose image is decided on its cluster (job submit stages its workdir and image between
    the claim and the put: jobs/submit.py)."""
    where, target = placed(clients, project, job)
    with target.claim(clients, project, where) as put:
        return put(where.apply(job), asked or Asked())


# -- the cluster target's verbs (jobs/route.py) ---------------------------------------------------------
def status(clients: Clients, project: str, jid: ids.JobId) -> JobState:
    seen = store.read(clients, project, jid.cluster or "")
    runs_on = _of(seen, jid)
    state = runs_on.status(clients, project, jid, seen)
    return replace(state, waits_in_queue=True) if runs_on.queues else state


def cancel(clients: Clients, project: str, jid: ids.JobId) -> JobState:
    seen = store.read(clients, project, jid.cluster or "")
    return _of(seen, jid).cancel(clients, project, jid, seen)


def follow(clients: Clients, project: str, jid: ids.JobId, **kw: Any) -> JobState:
    seen = store.read(clients, project, jid.cluster or "")
    return _of(seen, jid).follow(clients, project, jid, **kw)


def runs_user_command(clients: Clients, project: str, jid: ids.JobId) -> bool:
    """Whether the job's record says it runs a user's command (a job no record tells of: taken as the trainer's)."""
    seen = store.read(clients, project, jid.cluster or "")
    found = seen.of(jid.job) or seen.pending_of(jid.job)
    return found is not None and found.bundled_trainer is False


def log_filter(project: str, jid: ids.JobId) -> str:
    return nodes.log_filter(project, jid)  # every scheduler runs the job in the same named container


def has_work(clients: Clients, project: str, cluster: str) -> bool:
    """Whether the cluster has work (a job running, being recovered, or waiting): autostop leaves it up."""
    seen = store.read(clients, project, cluster)
    return any(make().has_work(clients, project, cluster, seen) for make in SCHEDULERS.values())


def list_jobs(clients: Clients, project: str) -> list[dict]:
    """`job list`'s cluster rows, newest first per cluster: each cluster's last store.KEEP jobs from their
    records, and the job its nodes hold now as `job status` shows it."""
    seen_all = store.read_all(clients, project)
    current = nodes.current_jobs(clients, project)
    rows = []
    for cluster in sorted(set(seen_all) | set(current)):
        seen = seen_all.get(cluster) or store.NOBODY
        job_ids = [r.id for r in seen.records] + [j for j in current.get(cluster, []) if seen.of(j) is None]
        for job_id in reversed(job_ids):
            jid = ids.JobId("cluster", cluster=cluster, job=job_id)
            recorded = seen.of(job_id)
            backend = _of(seen, jid)
            try:
                state = backend.status(clients, project, jid, seen) if job_id in current.get(cluster, []) else \
                    from_record(jid, recorded or JobRecord(id=job_id))
            except CloudError:  # the job left its nodes between the two reads: the next list shows it
                continue
            rows.append({"id": str(jid), "target": "cluster", "name": state.name, "state": state.state,
                         "nodes": state.nodes or state.nnodes, "machine_type": state.machine_type,
                         "submitter": state.submitter or "unknown",
                         "created": state.created, "recoveries": state.recoveries,
                         **(backend.row(recorded) if recorded is not None else {})})
    return rows
