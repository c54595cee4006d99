"""A cluster's job records in project metadata: its life as whoever leads the job wrote it.

One record per job (record.py's JobRecord, the project record), in the project's metadata (key
`gcpgpu-jobs-<cluster>`: the cluster's last KEEP jobs, oldest first, and every job not ended yet however
many), so it outlives the nodes a recovery replaces and the next job that takes them. `job submit` opens
it (PENDING) and closes the job before it where nobody did; from then on the job's leader writes it
(recover.py's Follower: a node's follower, `job follow` or `--wait`; on a Slurm cluster, node 0's queue
agent):

    PENDING      submitted; the nodes' agents are starting it (Slurm: it waits in the queue)
    RUNNING      attempt N runs (written from the nodes' own `started`, even if it ended before a poll)
    RECOVERING   a node was lost (node, cause); the next attempt is being put on a whole cluster again
    RETRYING     the job failed and a retry is left (cause); the next attempt is being put on its nodes
    STALLED      no progress for --stall-timeout (node: the suspect); a retry or the end follows
    SUCCEEDED | FAILED | CANCELLED   written once, when no recovery or retry remains

What every view shows of a record is view.py's rule. Webhooks are sent by the leader as it writes each
change (restart.py), once per change.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gcpgpu.gcp import clock
from gcpgpu.gcp.clients import Clients
from gcpgpu.jobs.ids import JobId
from gcpgpu.jobs.state import PENDING, RUNNING, UNKNOWN, is_final

from . import journal
from .record import JobRecord, stamp
from .record import refused as refused_entry

KEY_PREFIX = "gcpgpu-jobs-"
LEADER_PREFIX = "gcpgpu-leader-"  # follower.py's lease: who leads the cluster's followers
FOLLOW_PROMISE_S = 30.0  # `job submit --wait` takes the lead within moments of putting the job on the nodes
KEEP = 10  # jobs per cluster: `job list` shows a cluster's last ten (README, "Following a job")
HISTORY_KEEP = 50  # recoveries and retries a record lists (its counts count them all)
CAPTURE_CHARS = 300  # of a stall's stack capture (the nodes' record keeps it whole)
Fence = Callable[[], None]
Change = Callable[[list[JobRecord]], "list[JobRecord] | None"]


def key(cluster: str) -> str:
    return f"{KEY_PREFIX}{cluster}"


def _parse(raw: str | None) -> list[JobRecord]:
    try:
        got = json.loads(raw or "{}").get("jobs") or []
    except (ValueError, AttributeError):
        return []
    return [r for r in map(JobRecord.from_json, got) if r is not None]


def refused(raw: str | None) -> list[str]:
    """Why each stored entry that is no record gcpgpu wrote (record.py's refused) was skipped."""
    try:
        got = json.loads(raw or "{}").get("jobs") or []
    except (ValueError, AttributeError):
        return []
    return [why for why in (refused_entry(g) for g in got if isinstance(g, dict)) if why]


@dataclass(frozen=True)
class Seen:
    """What one read of the project's metadata says of a cluster's jobs."""

    records: list[JobRecord]  # oldest first
    leader: dict | None  # the followers' leader's lease, unexpired; None when nobody leads
    pending: JobRecord | None  # a recovery written down and not finished (journal.py)
    skipped: tuple[str, ...] = ()  # why each stored entry that is no record gcpgpu wrote was skipped

    def of(self, job_id: str) -> JobRecord | None:
        return next((r for r in self.records if r.id == job_id), None)

    def pending_of(self, job_id: str) -> JobRecord | None:
        """The pending recovery when it is `job_id`'s."""
        return self.pending if self.pending is not None and self.pending.id == job_id else None


NOBODY = Seen([], None, None)


def _leader(items: list[dict[str, str]], cluster: str) -> dict | None:
    raw = next((i["value"] for i in items if i["key"] == f"{LEADER_PREFIX}{cluster}"), None)
    try:
        got = json.loads(raw) if raw else None
    except ValueError:
        return None
    return got if isinstance(got, dict) and float(got.get("expires", 0)) > clock.now() else None


def _seen(items: list[dict[str, str]], cluster: str) -> Seen:
    raw = next((i["value"] for i in items if i["key"] == key(cluster)), None)
    return Seen(_parse(raw), _leader(items, cluster), journal.pending_in(items, cluster), tuple(refused(raw)))


def read(clients: Clients, project: str, cluster: str) -> Seen:
    """The cluster's job records, its leader and its pending recovery: one read."""
    return _seen(journal.items(clients, project)[1], cluster)


def read_all(clients: Clients, project: str) -> dict[str, Seen]:
    """Every cluster's Seen that has job records, by cluster name: one read."""
    items = journal.items(clients, project)[1]
    clusters = [i["key"][len(KEY_PREFIX):] for i in items if i["key"].startswith(KEY_PREFIX)]
    return {cluster: _seen(items, cluster) for cluster in clusters}


def _compact(record: JobRecord) -> dict[str, Any]:
    """What the record keeps: HISTORY_KEEP entries at most, each stall capture cut short."""
    out = record.to_json()
    if record.history is not None:
        history = [dict(h) for h in record.history][-HISTORY_KEEP:]
        for h in history:
            if isinstance(h.get("capture"), str) and len(h["capture"]) > CAPTURE_CHARS:
                h["capture"] = h["capture"][:CAPTURE_CHARS] + "..."
        out["history"] = history
    return out


def _kept(records: list[JobRecord]) -> list[JobRecord]:
    """The records a cluster keeps, oldest first: every job that has not ended (a Slurm cluster's queue may hold
    more than KEEP: a queued or running job is never dropped), and the newest ended ones, KEEP in all."""
    room = max(0, KEEP - sum(1 for r in records if not r.final))
    ended = [i for i, r in enumerate(records) if r.final]
    dropped = set(ended[: max(0, len(ended) - room)])
    return [r for i, r in enumerate(records) if i not in dropped]


def update(clients: Clients, project: str, cluster: str, change: Change, fence: Fence = lambda: None) -> bool:
    """Compare-and-swap the cluster's records: change(records) gives them all anew (None: leave them).
    The oldest ended ones beyond KEEP go (_kept). Returns whether it wrote."""
    def swap(current: str | None) -> str | bool:
        new = change(_parse(current))
        if new is None:
            return False
        return json.dumps({"jobs": [_compact(r) for r in _kept(new)]}, sort_keys=True)

    return journal.swap(clients, project, key(cluster), swap, fence, f"cluster {cluster}'s job records")


def change_one(job_id: str, change: Callable[[JobRecord], JobRecord | None]) -> Change:
    """A change of the records that changes the job `job_id`'s alone (None: it is not there, or stays)."""
    def whole(records: list[JobRecord]) -> list[JobRecord] | None:
        old = next((r for r in records if r.id == job_id), None)
        new = change(old) if old is not None else None
        if new is None or new == old:
            return None
        return [new if r.id == job_id else r for r in records]

    return whole


def forget(clients: Clients, project: str, cluster: str) -> None:
    """Remove the cluster's job records (`cluster down`: its jobs go with it)."""
    journal.swap(clients, project, key(cluster), lambda _current: None)


def opened(record: JobRecord, ended: dict[str, dict]) -> Change:
    """The change `job submit` makes once the job is on its nodes: the new job's record (PENDING; one a
    leader already wrote stands), and the jobs before it that nobody closed closed with their ends as
    their nodes reported them (`ended`: job id -> state, error, ended)."""
    def change(records: list[JobRecord]) -> list[JobRecord]:
        out = [r.but(**ended.get(r.id, {"state": UNKNOWN})) if r.id != record.id and not r.final else r
               for r in records]
        return out if any(r.id == record.id for r in out) else [*out, record]

    return change


def advance(clients: Clients, project: str, jid: JobId, state: str, attempt: int, base: JobRecord | None = None,
            fence: Fence = lambda: None, **fields: Any) -> bool:
    """Write the job's next state, as its leader (with `fields`: node, cause, error, started, ...).
    True when this wrote the change of state; False when the record already said it (another leader
    wrote it first: only what `fields` add is written then), holds a later attempt, or holds the job's
    end (there is only one). `base`: the job's record on its nodes, for a job that has no record (an
    older gcpgpu submitted it, or it was dropped past KEEP)."""
    changed = False

    def change(records: list[JobRecord]) -> list[JobRecord] | None:
        nonlocal changed
        changed = False  # this read's verdict: a lost race reads again
        old = next((r for r in records if r.id == jid.job), None) or opening(base or JobRecord(id=jid.job))
        was = (old.state, old.attempt)
        at = max(attempt, was[1]) if is_final(state) else attempt  # an end ends the attempt under way
        if is_final(was[0]) or at < was[1]:
            return None
        same = was == (state, at)
        given = {k: v for k, v in fields.items() if v is not None or not same}
        if same and all(getattr(old, k) == v for k, v in given.items()):
            return None
        new = old.but(**given)
        if not same:
            new = new.but(state=state, attempt=at, at=stamp(), node=fields.get("node"), cause=fields.get("cause"),
                          error=fields.get("error"))
            if state == RUNNING:
                new = new.but(started=old.started or fields.get("started") or stamp())
            if is_final(state):
                new = new.but(ended=fields.get("ended") or stamp())
        changed = not same
        if any(r.id == jid.job for r in records):
            return [new if r.id == jid.job else r for r in records]
        return [*records, new]

    return update(clients, project, jid.cluster or "", change, fence) and changed


def amend(clients: Clients, project: str, jid: JobId, attempt: int, fence: Fence = lambda: None,
          **fields: Any) -> None:
    """Add `fields` (a recovery's history) to the record of the job's `attempt`, its state unchanged."""
    def change(old: JobRecord) -> JobRecord | None:
        return None if old.final or old.attempt != attempt else old.but(**fields)

    update(clients, project, jid.cluster or "", change_one(jid.job, change), fence)


def opening(job: JobRecord, *, followed_s: float = 0.0) -> JobRecord:
    """The project record (PENDING) of a job from its node record (what the nodes run).
    `followed_s`: for how long a follower is promised (submit's own, about to take the lead)."""
    pol = {k: v for k, v in (job.policy or {}).items() if k != "notify"}  # webhook URLs stay on the nodes
    return JobRecord(
        id=job.id, name=job.name, scheduler=job.scheduler, state=PENDING, attempt=job.attempt, at=stamp(),
        created=job.created or job.submitted, nnodes=job.nnodes, machine_type=job.machine_type, image=job.image,
        output_dir=job.output_dir, bundled_trainer=job.bundled_trainer, recover=job.recover, policy=pol,
        detached=bool(job.detached), history=list(job.history or []), submitter=job.submitter,
        followed_until=clock.now() + followed_s if followed_s else None)

