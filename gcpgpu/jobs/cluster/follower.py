"""Who follows a cluster's job, and from where: one leader at a time, on the cluster itself or anywhere.

Every follower of a cluster (the agent each node runs, `job follow` on a laptop, `job submit --wait`)
contends for one lease in the project's metadata, key `gcpgpu-leader-<cluster>` (cluster/lease.py:
compare-and-swap, renewed every TTL/4, taken over once it expires). Only the holder follows and
recovers (recover.py); the others watch. A node that is lost takes its follower with it; its
lease expires and another node's (or a watching laptop's) follower takes over, finishing any
recovery the dead one left half done (journal.py).

A recovery's own steps still hold the cluster's `up`/`down` lease (gcpgpu-lease-<cluster>), so a
`cluster up` or `down` run meanwhile waits for them, and they for it.

The follower every node runs (gcpgpu/node/agent.py) uses these to follow whatever job the cluster
runs and, while none does, to judge the cluster's autostop.
"""

from __future__ import annotations

import inspect
import uuid
from collections.abc import Callable
from typing import Any

from gcpgpu.cluster.lease import Lease, LeaseLost, holder_gone
from gcpgpu.gcp import clock
from gcpgpu.gcp.clients import Clients
from gcpgpu.jobs import ids
from gcpgpu.jobs.state import JobState

from . import journal, nodes, store
from .record import JobRecord
from .view import job_status

KEY_PREFIX = store.LEADER_PREFIX


def leadership(clients: Clients, project: str, cluster: str, who: str) -> Lease:
    """This follower's claim on leading `cluster`'s followers (not yet taken: try_acquire)."""
    lease = Lease(clients, project, cluster, holder=f"{who}-{uuid.uuid4().hex[:8]}", op=f"follow from {who}")
    lease.key = f"{KEY_PREFIX}{cluster}"
    return lease


def leader(clients: Clients, project: str, cluster: str) -> dict[str, Any] | None:
    """Who leads `cluster`'s followers now (its lease, unexpired, its holder's VM not going), or None."""
    got = leadership(clients, project, cluster, "status")._read()[2]
    if got and float(got.get("expires", 0)) > clock.now() and not holder_gone(clients, project, got):
        return got
    return None


def lead(lease: Lease) -> bool:
    """Take the lead if nobody holds it (renewed in the background from then on)."""
    if lease.held and not lease.lost:
        return True
    if lease.try_acquire() is None:
        lease._start_renewing()
        return True
    return False


def guard(lease: Lease) -> Callable[[], None]:
    """A follower's per-poll check: it stops (LeaseLost) once another follower has taken the lead."""
    def check() -> None:
        lease.check()
        if lease.lost:
            raise LeaseLost(f"another follower leads cluster {lease.cluster} now ({lease.lost})")

    return check


def forget(clients: Clients, project: str, cluster: str) -> None:
    """Remove what followers keep in project metadata for `cluster` (after `cluster down`)."""
    leadership(clients, project, cluster, "down")._swap(lambda _current: None)
    journal.put(clients, project, cluster, None)
    store.forget(clients, project, cluster)
    from .spendcap import forget as forget_spend

    forget_spend(clients, project, cluster)


def follower_settings(record: JobRecord, params: Any) -> dict[str, Any]:
    """The follower's settings as the job's record carries them (submit wrote them there, so a follower
    on any machine reads the same): its `follow`, keys the Follower takes, and its `recover`.
    Keys this gcpgpu's Follower does not take (a newer one wrote them) are left out."""
    settings = {k: v for k, v in (record.follow or {}).items() if k in params}
    if record.recover is not None:
        settings["recover"] = int(record.recover)
    return settings


def make(clients: Clients, project: str, jid: ids.JobId, record: JobRecord, recover: int | None = None,
         **kw: Any) -> Any:
    """A Follower for the job with its record's settings (`recover`, when given, wins: `job follow --recover`)."""
    from .recover import Follower, default_recover

    settings = follower_settings(record, inspect.signature(Follower.__init__).parameters)
    if recover is not None:
        settings["recover"] = recover
    if settings.get("recover") is None:
        settings["recover"] = default_recover(clients, project, jid.cluster or "")
    return Follower(clients, project, jid, **{**settings, **kw})  # the caller's reporter and polling win


def record(clients: Clients, project: str, jid: ids.JobId) -> JobRecord:
    """The job's record: a recovery's written-down next attempt, else what its nodes hold."""
    pending = journal.read(clients, project, jid.cluster or "")
    return pending if pending is not None and pending.id == jid.job else nodes.record_of(clients, project, jid)


def recoveries(clients: Clients, project: str, jid: ids.JobId, record: JobRecord, recover: int | None) -> int:
    """How many recoveries the job may have in all: `recover` (job follow --recover), else what its
    record says (submit --recover, or the last follower), else the cluster's default."""
    from .recover import default_recover

    if recover is not None:
        return recover
    if record.recover is not None:
        return int(record.recover)
    return default_recover(clients, project, jid.cluster or "")


def lead_or_watch(clients: Clients, project: str, jid: ids.JobId, follower: Callable[[], Any],
                  say: Callable[[str], None], on_state: Callable[[JobState], None], poll_s: float,
                  detached: bool = False) -> JobState:
    """Follow the job to its end from here: lead its followers when nobody does (recovering it),
    else watch the leader (on the cluster's nodes, or another machine) work, ready to take over.
    A `detached` job's nodes lead: this takes over only once none has led for a lease's lifetime
    (their followers take a moment to start, and one that died is replaced by another meanwhile),
    counted from the last time a leader was seen alive: a leader whose VM went is no leader. It
    returns the job's end as its record says it: the leader writes it once nothing remains to do."""
    lease = leadership(clients, project, jid.cluster or "", "job follow")
    last: tuple | None = None
    told = 0
    leaderless_since = clock.now()
    try:
        while True:
            holder = leader(clients, project, jid.cluster or "")
            if holder is not None:
                leaderless_since = clock.now()
            patient = detached and clock.now() - leaderless_since < lease.ttl
            if holder is None and not patient and lead(lease):
                f = follower()
                f.leading = guard(lease)
                return f.run()
            state = job_status(clients, project, jid)
            if last is None:
                say(f"{jid} is followed by {holder.get('who') if holder else 'its cluster'}: watching "
                    "(this command takes over if nobody follows it)")
            for h in state.history[told:]:
                say(f"retry {h.get('attempt')}: {h.get('cause')}" if h.get("kind") == "retry" else
                    f"recovery {h.get('attempt')}: lost {', '.join(h.get('lost') or [])} ({h.get('cause')})")
            told = len(state.history)
            now = (state.state, state.attempt)
            if now != last:
                last = now
                on_state(state)
            if state.final:
                return state
            clock.sleep(poll_s)
    finally:
        lease.release()


def follow(clients: Clients, project: str, jid: ids.JobId, *, recover: int | None, on_state: Callable[[JobState], None],
           say: Callable[[str], None], poll_s: float, reporter: Any = None) -> JobState:
    """Follow a cluster job to its end from here (`job follow`, `job submit --wait`): lead its followers
    when nobody does, recovering it from lost nodes at most `recover` times in all (None: what its record
    says, else the cluster's default), else watch the leader."""
    from gcpgpu.errors import Interrupted

    seen = store.read(clients, project, jid.cluster or "")
    ended = seen.of(jid.job)
    if ended is not None and ended.final and seen.pending_of(jid.job) is None:
        # Nothing is left to follow, and its nodes may run another job by now: its end, as `job status` says it.
        state = job_status(clients, project, jid, seen)
        on_state(state)
        return state
    found = record(clients, project, jid)
    n = recoveries(clients, project, jid, found, recover)
    if n:
        used = len(found.history or [])
        say(f"Following {jid}: up to {n} recover{'y' if n == 1 else 'ies'} from lost nodes in all"
            + (f" ({used} used)" if used else ""))

    def follower() -> Any:  # when this command leads (nobody else follows the job): the recovering kind
        return make(clients, project, jid, found, n, reporter=reporter, poll_s=poll_s, on_state=on_state)

    try:
        return lead_or_watch(clients, project, jid, follower, say, on_state, poll_s, bool(found.detached))
    except KeyboardInterrupt:
        raise Interrupted(interrupted(clients, project, jid)) from None


def interrupted(clients: Clients, project: str, jid: ids.JobId) -> str:
    """What a Ctrl-C on a cluster job's follower leaves: the job running on (and its nodes billed), how to stop
    or follow it again, and only when a recovery was under way, that it is left half done."""
    said = (f"{jid} is no longer followed here, but it keeps running on cluster {jid.cluster} (its nodes keep "
            f"costing): 'gcpgpu job cancel {jid}' stops it, 'gcpgpu job follow {jid}' follows it again")
    try:
        pending = store.read(clients, project, jid.cluster or "").pending_of(jid.job)
    except Exception:  # an interrupt's last words: a failed read leaves out only the recovery's
        pending = None
    if pending is not None:
        said += (f" and finishes the recovery left half done (what it made is labelled for cluster {jid.cluster}: "
                 f"'gcpgpu cluster down {jid.cluster}' removes it)")
    return said + "."


# -- the agent on each node --------------------------------------------------------------------
def current_job(clients: Clients, project: str, cluster: str,
                seen: store.Seen | None = None) -> tuple[ids.JobId, JobRecord] | None:
    """The job the cluster runs: a written-down recovery's (in `seen`, the cluster's records when the caller
    read them; else read now), else the newest record on its nodes."""
    from gcpgpu.cluster.observe import ranked_nodes

    pending = journal.read(clients, project, cluster) if seen is None else seen.pending
    if pending is not None:
        return ids.JobId("cluster", cluster=cluster, job=pending.id), pending
    records = [job for _n, job in nodes.held(ranked_nodes(clients, project, cluster))]
    if not records:
        return None
    newest = max(records, key=lambda j: (str(j.submitted or ""), j.attempt))
    return ids.JobId("cluster", cluster=cluster, job=newest.id), newest
