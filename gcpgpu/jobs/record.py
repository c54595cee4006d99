"""A cluster job's record: its life as whoever leads it wrote it, and the one rule every view reads it by.

One record per job, in the project's metadata (key `gcpgpu-jobs-<cluster>`: the cluster's last KEEP
jobs, oldest first, and every job not ended yet however many), so it outlives the nodes a recovery replaces and the next job that takes them.
`job submit` opens it (PENDING) and closes the job before it where nobody did; from then on the
job's leader writes it (jobs/recover.py's Follower: a node's follower, `job follow` or `--wait`):

    PENDING      submitted; the nodes' agents are starting it
    RUNNING      attempt N runs (written from the nodes' own `started`, even if it ended before a poll)
    RECOVERING   a node was lost (node, cause); the next attempt is being put on a whole cluster again
    RETRYING     the job failed and a retry is left (cause); the next attempt is being put on its nodes
    STALLED      no progress for --stall-timeout (node: the suspect); a retry or the end follows
    SUCCEEDED | FAILED | CANCELLED   written once, when no recovery or retry remains

Every view (`job status`, `job list`, `job logs --follow`, `--wait`, `job follow`, the metrics' job
span) shows shown(): the record, brought up to date by what the nodes report now where the record is
behind (a new attempt RUNNING). A node's own end is the job's only where nobody follows the job;
where someone does, the view shows what its leader will write (RECOVERING, RETRYING) or holds the
record's state until the leader writes the end, so no view shows an end before the last one.
Webhooks are sent by the leader as it writes each change (jobs/restart.py), once per change.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from gcpgpu.errors import CloudError
from gcpgpu.gcp import clock
from gcpgpu.gcp.clients import Clients

from . import journal, policy
from .ids import JobId
from .loss import RUN_LIMIT
from .state import (
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

KEY_PREFIX = "gcpgpu-jobs-"
LEADER_PREFIX = "gcpgpu-leader-"  # jobs/follower.py's lease: who leads the cluster's followers
FOLLOW_PROMISE_S = 30.0  # `job submit --wait` takes the lead within moments of putting the job on the nodes
KEEP = 10  # jobs per cluster: `job list` shows a cluster's last ten (README, "Following a job")
HISTORY_KEEP = 50  # recoveries and retries a record lists (its counts count them all)
CAPTURE_CHARS = 300  # of a stall's stack capture (the nodes' record keeps it whole)
Fence = Callable[[], None]


def key(cluster: str) -> str:
    return f"{KEY_PREFIX}{cluster}"


def _stamp() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(clock.now()))


def _parse(raw: str | None) -> list[dict]:
    try:
        got = json.loads(raw or "{}").get("jobs") or []
    except (ValueError, AttributeError):
        return []
    return [r for r in got if isinstance(r, dict) and r.get("id")]


@dataclass(frozen=True)
class Seen:
    """What one read of the project's metadata says of a cluster's jobs."""

    records: list[dict]  # oldest first
    leader: dict | None  # the followers' leader's lease, unexpired; None when nobody leads
    pending: dict | None  # a recovery written down and not finished (jobs/journal.py)

    def of(self, job_id: str) -> dict | None:
        return next((r for r in self.records if r.get("id") == job_id), None)


def _leader(items: list[dict[str, str]], cluster: str) -> dict | None:
    raw = next((i["value"] for i in items if i["key"] == f"{LEADER_PREFIX}{cluster}"), None)
    try:
        got = json.loads(raw) if raw else None
    except ValueError:
        return None
    return got if isinstance(got, dict) and float(got.get("expires", 0)) > clock.now() else None


def _seen(items: list[dict[str, str]], cluster: str) -> Seen:
    return Seen(_parse(next((i["value"] for i in items if i["key"] == key(cluster)), None)),
                _leader(items, cluster), journal.pending_in(items, cluster))


def read(clients: Clients, project: str, cluster: str) -> Seen:
    """The cluster's job records, its leader and its pending recovery: one read."""
    return _seen(journal.items(clients, project)[1], cluster)


def read_all(clients: Clients, project: str) -> dict[str, Seen]:
    """Every cluster's Seen that has job records, by cluster name: one read."""
    items = journal.items(clients, project)[1]
    clusters = [i["key"][len(KEY_PREFIX):] for i in items if i["key"].startswith(KEY_PREFIX)]
    return {cluster: _seen(items, cluster) for cluster in clusters}


def _compact(record: dict) -> dict:
    """What the record keeps: HISTORY_KEEP entries at most, each stall capture cut short."""
    history = [dict(h) for h in (record.get("history") or [])][-HISTORY_KEEP:]
    for h in history:
        if isinstance(h.get("capture"), str) and len(h["capture"]) > CAPTURE_CHARS:
            h["capture"] = h["capture"][:CAPTURE_CHARS] + "..."
    return {**record, "history": history}


def _kept(records: list[dict]) -> list[dict]:
    """The records a cluster keeps, oldest first: every job that has not ended (a Slurm cluster's queue may hold
    more than KEEP: a queued or running job is never dropped), and the newest ended ones, KEEP in all."""
    room = max(0, KEEP - sum(1 for r in records if not is_final(r.get("state"))))
    ended = [i for i, r in enumerate(records) if is_final(r.get("state"))]
    dropped = set(ended[: max(0, len(ended) - room)])
    return [r for i, r in enumerate(records) if i not in dropped]


def update(clients: Clients, project: str, cluster: str, change: Callable[[list[dict]], list[dict] | None],
           fence: Fence = lambda: None) -> bool:
    """Compare-and-swap the cluster's records: change(records) gives them all anew (None: leave them).
    The oldest ended ones beyond KEEP go (_kept). Returns whether it wrote."""
    def swap(current: str | None) -> str | bool:
        new = change(_parse(current))
        if new is None:
            return False
        return json.dumps({"jobs": [_compact(r) for r in _kept(new)]}, sort_keys=True)

    return journal.swap(clients, project, key(cluster), swap, fence, f"cluster {cluster}'s job records")


def forget(clients: Clients, project: str, cluster: str) -> None:
    """Remove the cluster's job records (`cluster down`: its jobs go with it)."""
    journal.swap(clients, project, key(cluster), lambda _current: None)


def opened(record: dict, ended: dict[str, dict]) -> Callable[[list[dict]], list[dict]]:
    """The change `job submit` makes once the job is on its nodes: the new job's record (PENDING; one a
    leader already wrote stands), and the jobs before it that nobody closed closed with their ends as
    their nodes reported them (`ended`: job id -> state, error, ended)."""
    def change(records: list[dict]) -> list[dict]:
        out = []
        for r in records:
            if r["id"] != record["id"] and not is_final(r.get("state")):
                r = {**r, **ended.get(r["id"], {"state": UNKNOWN})}
            out.append(r)
        return out if any(r["id"] == record["id"] for r in out) else [*out, record]

    return change


def advance(clients: Clients, project: str, jid: JobId, state: str, attempt: int, base: dict | None = None,
            fence: Fence = lambda: None, **fields: Any) -> bool:
    """Write the job's next state, as its leader (with `fields`: node, cause, error, started, ...).
    True when this wrote the change of state; False when the record already said it (another leader
    wrote it first: only what `fields` add is written then), holds a later attempt, or holds the job's
    end (there is only one). `base`: the job's record on its nodes, for a job that has no record (an
    older gcpgpu submitted it, or it was dropped past KEEP)."""
    changed = False

    def change(records: list[dict]) -> list[dict] | None:
        nonlocal changed
        changed = False  # this read's verdict: a lost race reads again
        old = next((r for r in records if r["id"] == jid.job), None) or from_nodes(base or {"id": jid.job})
        was = (old.get("state"), int(old.get("attempt") or 0))
        at = max(attempt, was[1]) if is_final(state) else attempt  # an end ends the attempt under way
        if is_final(was[0]) or at < was[1]:
            return None
        same = was == (state, at)
        given = {k: v for k, v in fields.items() if v is not None or not same}
        if same and all(old.get(k) == v for k, v in given.items()):
            return None
        new = {**old, **given}
        if not same:
            new.update(state=state, attempt=at, at=_stamp())
            for k in ("node", "cause", "error"):
                new[k] = fields.get(k)
            if state == RUNNING:
                new["started"] = old.get("started") or fields.get("started") or _stamp()
            if is_final(state):
                new["ended"] = fields.get("ended") or _stamp()
        changed = not same
        rest = [r for r in records if r["id"] != jid.job]
        return [r if r["id"] != jid.job else new for r in records] if len(rest) < len(records) else [*records, new]

    return update(clients, project, jid.cluster or "", change, fence) and changed


def amend(clients: Clients, project: str, jid: JobId, attempt: int, fence: Fence = lambda: None,
          **fields: Any) -> None:
    """Add `fields` (a recovery's history) to the record of the job's `attempt`, its state unchanged."""
    def change(records: list[dict]) -> list[dict] | None:
        old = next((r for r in records if r["id"] == jid.job), None)
        if old is None or is_final(old.get("state")) or int(old.get("attempt") or 0) != attempt:
            return None
        return [r if r["id"] != jid.job else {**old, **fields} for r in records]

    update(clients, project, jid.cluster or "", change, fence)


def from_nodes(job: dict, *, followed_s: float = 0.0) -> dict:
    """A record (PENDING) from the job's record on its nodes (jobs/cluster.py's submit wrote it).
    `followed_s`: for how long a follower is promised (submit's own, about to take the lead)."""
    pol = {k: v for k, v in (job.get("policy") or {}).items() if k != "notify"}  # webhook URLs stay on the nodes
    return {
        "id": job["id"], "name": job.get("name"), "state": PENDING, "attempt": int(job.get("attempt") or 0),
        "at": _stamp(), "created": job.get("created") or job.get("submitted"), "nnodes": job.get("nnodes"),
        "machine_type": job.get("machine_type"), "image": job.get("image"), "output_dir": job.get("output_dir"),
        "recover": job.get("recover"), "policy": pol, "detached": bool(job.get("detached")),
        "history": list(job.get("history") or []),
        **({"followed_until": clock.now() + followed_s} if followed_s else {}),
    }


# -- the one rule every view reads a job by ------------------------------------------------------
def followed(record: dict, seen: Seen) -> bool:
    """Whether someone follows the job: a leader holds the cluster's followers' lease, the job's own
    nodes follow it (--detach), or its submitter is about to (within the time it was promised)."""
    return seen.leader is not None or bool(record.get("detached")) or \
        clock.now() < float(record.get("followed_until") or 0)


def from_record(jid: JobId, record: dict) -> JobState:
    """The job as its record alone says (its nodes have moved on, or were all replaced)."""
    history = list(record.get("history") or [])
    recoveries = sum(1 for h in history if h.get("kind") != "retry")
    state = str(record.get("state") or UNKNOWN)
    return JobState(
        id=str(jid), target="cluster", name=record.get("name"), state=state, created=record.get("created"),
        started=record.get("started"), ended=record.get("ended") if is_final(state) else None,
        error=record.get("error"), nodes=0, machine_type=record.get("machine_type"), cluster=jid.cluster,
        image=record.get("image"), nnodes=int(record.get("nnodes") or 0), attempt=int(record.get("attempt") or 0),
        recover=record.get("recover"), recoveries=recoveries, history=history, restarts=len(history) - recoveries,
        output_dir=record.get("output_dir"), node=record.get("node"),
        **({"cause": record["cause"], "cause_from": CAUSE_FOLLOWER} if record.get("cause") else {}))


def _as_recorded(state: JobState, record: dict) -> JobState:
    """`state` (the nodes') showing the record's state, attempt and what it says of it."""
    said = str(record["state"])
    return replace(state, state=said, attempt=int(record.get("attempt") or 0), node=record.get("node"),
                   error=record.get("error") if said != RUNNING else None,
                   ended=(record.get("ended") or state.ended) if is_final(said) else None,
                   cause=record.get("cause"), cause_from=CAUSE_FOLLOWER if record.get("cause") else None)


def what_follows(state: JobState, record: dict, why_lost: Callable[[list[dict]], dict[str, str]]) -> JobState | None:
    """What the job's leader does next with a job its nodes say ended (`state`): RECOVERING from lost
    nodes, or RETRYING its own failure, while the record's settings leave one; None when nothing is left."""
    if state.state != FAILED:
        return None
    lost = [r for r in state.per_node if r.get("node_status") != "RUNNING"]
    if lost:
        recover = record.get("recover")
        if recover is None or state.recoveries >= int(recover):
            return None
        causes = why_lost(lost)
        if RUN_LIMIT in causes.values():
            return None
        return replace(state, state=RECOVERING, attempt=state.attempt + 1, error=None, ended=None,
                       node=", ".join(r["node"] for r in lost),
                       cause=", ".join(sorted(set(causes.values()))), cause_from=CAUSE_FOLLOWER)
    pol = record.get("policy") or {}
    failed = sorted((r for r in state.per_node if r["state"] == FAILED), key=lambda r: (r.get("ended") or "", r["rank"]))
    row = policy.retryable(pol, failed)
    if row is None or state.restarts is None or state.restarts >= int(pol.get("max_restarts_on_errors") or 0):
        return None
    return replace(state, state=RETRYING, attempt=state.attempt + 1, error=None, ended=None, node=row["node"],
                   cause=f"exit code {row['exit_code']}", cause_from=CAUSE_FOLLOWER)


def shown(jid: JobId, observed: JobState | None, record: dict | None, seen: Seen,
          why_lost: Callable[[list[dict]], dict[str, str]]) -> JobState:
    """The job as every view shows it: its record (jobs/record.py's states), and what its nodes report
    (`observed`; None when no node holds the job any more) where the record is behind them."""
    if observed is None:
        if record is None:
            raise CloudError(f"job {jid.job} is not on cluster {jid.cluster}; see 'gcpgpu job list'")
        return from_record(jid, record)
    if record is None:
        return observed  # a job no record tells of (an older gcpgpu's): its nodes alone say
    history = list(record.get("history") or []) if "history" in record else observed.history
    recoveries = sum(1 for h in history if h.get("kind") != "retry")
    state = replace(observed, history=history, recoveries=recoveries, restarts=len(history) - recoveries,
                    recover=record.get("recover") if record.get("recover") is not None else observed.recover,
                    created=record.get("created") or observed.created)
    said, attempt = str(record.get("state") or PENDING), int(record.get("attempt") or 0)
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
    return replace(state, state=hold, ended=None, error=None, node=record.get("node") if hold == said else None,
                   cause=None, cause_from=None)
