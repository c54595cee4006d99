"""The one rule every view reads a cluster job by (`job status`, `job list`, `job cancel`, `job logs
--follow`, `--wait` and `job follow` watching a leader, the metrics' job span): its record (store.py) and
what its nodes report now (nodes.py), combined by shown().

Every view shows the record, brought up to date by what the nodes report now where the record is behind
(a new attempt RUNNING). A node's own end is the job's only where nobody follows the job; where someone
does, the view shows what its leader will write (RECOVERING, RETRYING) or holds the record's state until
the leader writes the end, so no view shows an end before the last one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from gcpgpu.errors import CloudError
from gcpgpu.gcp import clock
from gcpgpu.gcp.clients import Clients
from gcpgpu.jobs import ids, policy
from gcpgpu.jobs.state import (
    CAUSE_FOLLOWER,
    FAILED,
    PENDING,
    RECOVERING,
    RETRYING,
    RUNNING,
    STALLED,
    UNKNOWN,
    JobState,
    is_final,
)

from . import nodes, store
from .loss import RUN_LIMIT, loss_causes
from .record import JobRecord
from .store import Seen

WhyLost = Callable[[list[dict]], dict[str, str]]


def followed(record: JobRecord, seen: Seen) -> bool:
    """Whether someone follows the job: a leader holds the cluster's followers' lease, the job's own
    nodes follow it (--detach), or its submitter is about to (within the time it was promised)."""
    return seen.leader is not None or bool(record.detached) or clock.now() < float(record.followed_until or 0)


def from_record(jid: ids.JobId, record: JobRecord) -> JobState:
    """The job as its record alone says (its nodes have moved on, or were all replaced)."""
    history = list(record.history or [])
    recoveries = sum(1 for h in history if h.get("kind") != "retry")
    state = str(record.state or UNKNOWN)
    return JobState(
        id=str(jid), target="cluster", name=record.name, state=state, created=record.created,
        started=record.started, ended=record.ended if is_final(state) else None,
        error=record.error, nodes=0, machine_type=record.machine_type, submitter=record.submitter, cluster=jid.cluster,
        image=record.image, nnodes=int(record.nnodes or 0), attempt=record.attempt,
        recover=record.recover, recoveries=recoveries, history=history, restarts=len(history) - recoveries,
        output_dir=record.output_dir, node=record.node,
        **({"cause": record.cause, "cause_from": CAUSE_FOLLOWER} if record.cause else {}))


def _as_recorded(state: JobState, record: JobRecord) -> JobState:
    """`state` (the nodes') showing the record's state, attempt and what it says of it."""
    said = str(record.state)
    return replace(state, state=said, attempt=record.attempt, node=record.node,
                   error=record.error if said != RUNNING else None,
                   ended=(record.ended or state.ended) if is_final(said) else None,
                   cause=record.cause, cause_from=CAUSE_FOLLOWER if record.cause else None)


def what_follows(state: JobState, record: JobRecord, why_lost: WhyLost) -> JobState | None:
    """What the job's leader does next with a job its nodes say ended (`state`): RECOVERING from lost
    nodes, or RETRYING its own failure, while the record's settings leave one; None when nothing is left."""
    if state.state != FAILED:
        return None
    lost = [r for r in state.per_node if r.get("node_status") != "RUNNING"]
    if lost:
        if record.recover is None or state.recoveries >= int(record.recover):
            return None
        causes = why_lost(lost)
        if RUN_LIMIT in causes.values():
            return None
        return replace(state, state=RECOVERING, attempt=state.attempt + 1, error=None, ended=None,
                       node=", ".join(r["node"] for r in lost),
                       cause=", ".join(sorted(set(causes.values()))), cause_from=CAUSE_FOLLOWER)
    pol = dict(record.policy or {})
    failed = sorted((r for r in state.per_node if r["state"] == FAILED), key=lambda r: (r.get("ended") or "", r["rank"]))
    row = policy.retryable(pol, failed)
    if row is None or state.restarts is None or state.restarts >= int(pol.get("max_restarts_on_errors") or 0):
        return None
    return replace(state, state=RETRYING, attempt=state.attempt + 1, error=None, ended=None, node=row["node"],
                   cause=f"exit code {row['exit_code']}", cause_from=CAUSE_FOLLOWER)


def shown(jid: ids.JobId, observed: JobState | None, record: JobRecord | None, seen: Seen,
          why_lost: WhyLost) -> JobState:
    """The job as every view shows it: its record (store.py's states), and what its nodes report
    (`observed`; None when no node holds the job any more) where the record is behind them."""
    if observed is None:
        if record is None:
            raise CloudError(f"job {jid.job} is not on cluster {jid.cluster}; see 'gcpgpu job list'")
        return from_record(jid, record)
    if record is None:
        return observed  # a job no record tells of (an older gcpgpu's): its nodes alone say
    history = list(record.history or []) if record.history is not None else observed.history
    recoveries = sum(1 for h in history if h.get("kind") != "retry")
    state = replace(observed, history=history, recoveries=recoveries, restarts=len(history) - recoveries,
                    recover=record.recover if record.recover is not None else observed.recover,
                    created=record.created or observed.created, submitter=record.submitter)
    said, attempt = str(record.state or PENDING), record.attempt
    if is_final(said):
        return _as_recorded(state, record)
    if state.attempt < attempt:  # the record's next attempt is not on the nodes yet
        return _as_recorded(state, record)
    if state.attempt == attempt:
        if said == STALLED or (said in (RECOVERING, RETRYING) and state.state != RUNNING):
            return _as_recorded(state, record)
        if state.state == UNKNOWN and said != PENDING:
            return _as_recorded(state, record)
    if not is_final(state.state) or not followed(record, seen):
        return state  # on its way (the leader writes it next), or nobody follows: the nodes' word is the job's
    nxt = what_follows(state, record, why_lost)
    if nxt is not None:
        return nxt
    # The leader writes the end (a verdict of its own, a last retry or recovery refused): until it
    # has, the job is what the record said, or RUNNING where its nodes started it.
    hold = said if said != PENDING else (RUNNING if any(r.get("started") for r in state.per_node) else PENDING)
    return replace(state, state=hold, ended=None, error=None, node=record.node if hold == said else None,
                   cause=None, cause_from=None)


def job_status(clients: Clients, project: str, jid: ids.JobId, seen: Seen | None = None) -> JobState:
    """The job as every view shows it (shown): its record (`seen`: the cluster's records, read now when not
    given), and what its nodes report."""
    seen = store.read(clients, project, jid.cluster or "") if seen is None else seen
    found = seen.of(jid.job)
    pending = seen.pending_of(jid.job)
    try:
        observed: JobState | None = nodes.status(clients, project, jid)
    except CloudError:
        if found is None and pending is None:
            raise
        observed = None  # no node holds the job now (a recovery replaced them all, or a later job came)
    if found is None and pending is not None:
        found = store.opening(pending).but(state=RECOVERING)  # written down by an older gcpgpu
    return shown(jid, observed, found, seen, lambda lost: loss_causes(clients, project, jid.cluster or "", lost))
