"""Goodput: how much of a job's node-time trained, and where the rest went (README, "Goodput").

A job's node-time is its nodes (replicas) x its time from submission to its end (now while it runs):
what it held, or waited for. It splits into productive time and eight kinds of lost time:

    queued      waiting in a shared queue (a Slurm cluster's): from submission, or a requeue, to the
                attempt's program starting; never productive
    capacity    waiting for machines before the first attempt was put on them (Vertex's queue, provisioning)
    image_pull  the nodes pulling the job's image (node-seconds, as each node reports it)
    startup     from an attempt being put on its nodes (or leaving the queue) to its first step, less the
                pull and the steps that first step line covers; an attempt that logged no step; and, on
                the job's last attempt, from its last step to the job's end (shut-down)
    checkpoint  the steps blocked by checkpoints (the trainer's "steps blocked" per save)
    redone      steps run again after a recovery (those at or past the step the next attempt resumed
                from), and the steps a lost attempt may have run after its last step line (up to its
                cadence - 1, less those the next attempt's checkpoint kept)
    stalled     from a stalled attempt's last step to the follower stopping it; a running job's silence
                past one step-line interval
    recovery    from a loss or failure being seen (the record's history) to the next attempt on its
                nodes, and from a lost attempt's last step to the loss being seen

Productive time is what the steps did: an attempt's step lines (jobs/steplines.py: the bundled
trainer's, or a user command's where they follow the documented pattern) and the steps each line
covers before it, at the attempt's median time per step between two lines (one line alone: its own
"ms" per step, or the trainer's summary). The steps before an attempt's first line are bounded by
the attempt's own time since its program started, and number at most where it resumed from (the
trainer), else one line's cadence: numbering steps from 1,000,000 credits nothing more. A job that
logged no step line at all counts its program's run as productive only when it SUCCEEDED (nothing
tells more); a cancelled or failed one has none. A job with no step yet, or that never started, has
no percent (None) and says why (`reason`). An attempt whose log shows its program starting again (a
resume line after step lines: a requeue the record does not tell of yet) is read as two.

redone() is the one count of the steps each recovery ran again: `job status`'s retry table and
split() both read it. split() is pure arithmetic over a Timeline, each share computed once from the
unrounded figures; timeline() builds one from what the job's state, record and log already hold;
publish() writes the figures to Cloud Monitoring per job.
"""

from __future__ import annotations

import logging
import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from gcpgpu.times import parse_timestamp

from . import steplines
from .state import SUCCEEDED

log = logging.getLogger("gcpgpu.jobs.goodput")
PARTS = ("queued", "capacity", "image_pull", "startup", "checkpoint", "redone", "stalled", "recovery")
STALLED_CAUSE = "stalled"  # a retry's cause after a stall (jobs/cluster/restart.py)
RESTARTED = "restarted"  # an attempt the log shows ending (its program started again) and the record does not
# Cloud Monitoring: one custom metric per figure, on the generic_task resource the trainer's reporter
# writes to (namespace as metrics/sources.NAMESPACE, job = the cluster or the Vertex job id), with
# task_id "goodput" and the job's id as a metric label: `metrics report` draws it.
METRIC = "custom.googleapis.com/gcpgpu/job/"
NAMESPACE = {"cluster": "gcpgpu-cluster", "vertex": "gcpgpu-vertex"}
NOT_STARTED, NEVER_STARTED, NO_STEP_YET = "not started yet", "never started", "no step logged yet"


@dataclass(frozen=True)
class Attempt:
    begin: float  # put on its nodes; queued: submitted or requeued (it waits in the queue from here)
    end: float  # its loss or failure seen (the record's history), or the job's end (now)
    cause: str | None = None  # why it ended early; None for the last attempt
    log_every: int | None = None  # its step lines' cadence where the record says it (else read from them)
    started: float | None = None  # when its program started on the nodes (after the queue and pull), where known
    queued: bool = False  # begin -> started is a wait in a shared queue (Slurm's), not start-up


@dataclass(frozen=True)
class Timeline:
    nnodes: int
    created: float
    end: float
    attempts: list[Attempt]
    lines: list[tuple[float, str]] = field(default_factory=list)  # (time, text) of the writer of the steps
    pull_s: float = 0.0  # node-seconds the nodes spent pulling the image
    ended: bool = True  # the job is over (its last attempt's tail is shut-down, not steps in flight)
    succeeded: bool = False  # it ended SUCCEEDED: a run without step lines did its work


@dataclass(frozen=True)
class Redo:
    """What a recovery's next attempt ran again of a lost attempt's steps, as its log says."""

    last_step: int | None  # the lost attempt's last step line
    resumed_at: int | None  # where the next attempt resumed (its line; else its first step line)
    steps: int | None  # steps run again: at least (None: the log does not say)
    steps_max: int | None  # at most: with those it may have run unlogged after its last line
    kept: int = 0  # steps past its last line that the next attempt's checkpoint proves ran and kept


@dataclass(frozen=True)
class _Steps:
    found: list[tuple[float, int]]  # (when logged, step) of each step line, oldest first
    step_s: float  # median seconds per step
    first_s: float | None  # the first line's own seconds per step (the trainer's "ms"), where it says
    cadence: int | None  # steps between two lines (the smallest gap), where two lines tell
    trainer: bool  # the bundled trainer's lines: its first line covers every step since it (re)started
    resumed: int | None  # the step it resumed from (0: a fresh start), where it said so
    saves: list[tuple[float, float]]  # (when logged, seconds it blocked the steps) of each checkpoint
    opened: float | None = None  # its first line of any kind: its program ran by then

    def blocked(self, after: float | None = None) -> float:
        """Seconds the checkpoints blocked the steps (those logged after `after` only, when given)."""
        return sum(b for t, b in self.saves if after is None or t > after)

    def base(self, every: int | None) -> int:
        """The step it started from: where it resumed, else 0 (the trainer), else one cadence before its
        first line (a user's numbering says nothing of where it began)."""
        if self.resumed is not None and self.resumed <= self.found[0][1]:
            return self.resumed
        if self.trainer:
            return 0
        return self.found[0][1] - (every or self.cadence or 1) + 1


def _steps(lines: list[tuple[float, str]]) -> _Steps:
    parsed = [(t, got) for t, text in lines if (got := steplines.trainer_values(text)) is not None]
    trainer = bool(parsed)
    parsed = parsed or [(t, got) for t, text in lines if (got := steplines.user_values(text)) is not None]
    found = [(t, s) for t, (s, _v) in parsed]
    resumed = next((r for _t, text in lines if (r := steplines.resumed_at(text)) is not None), None)
    saves = [(t, b) for t, text in lines if (b := steplines.ckpt_blocked(text)) is not None]
    gaps = [(t2 - t1, s2 - s1) for (t1, s1), (t2, s2) in zip(found, found[1:], strict=False) if s2 > s1 and t2 >= t1]
    own = [v["step_time_ms"] / 1e3 for _t, (_s, v) in parsed if v.get("step_time_ms", 0) > 0]
    own += [x for _t, text in lines if (x := steplines.summary_step_s(text))]
    step_s = statistics.median(dt / ds for dt, ds in gaps) if gaps else statistics.median(own) if own else 0.0
    first_s = parsed[0][1][1].get("step_time_ms", 0) / 1e3 if trainer else None
    return _Steps(found, step_s, first_s or None, min(ds for _dt, ds in gaps) if gaps else None, trainer, resumed,
                  saves, min((t for t, _x in lines), default=None))


def _redo(a: Attempt, st: _Steps, nxt: _Steps) -> Redo:
    """Attempt `a` (its steps `st`) lost; `nxt` its next attempt's steps."""
    last = st.found[-1][1] if st.found else None
    again = nxt.resumed if nxt.resumed is not None else nxt.found[0][1] if nxt.found else None
    if last is None or again is None:
        return Redo(last, again, None, None)
    every = a.log_every or st.cadence or 1
    steps = max(0, last + 1 - max(again, st.base(a.log_every)))
    kept = max(0, again - (last + 1))
    return Redo(last, again, steps, steps + max(0, every - 1 - kept), kept)


def _restarts(lines: list[tuple[float, str]]) -> list[list[tuple[float, str]]]:
    """An attempt's lines cut where its program started again (a requeue or restart the record does not
    tell of): a resume line after a step line. The old run's lines end at its last step or save; what
    came between (its exit, the new run's start-up) is the new run's."""
    chunks: list[list[tuple[float, str]]] = [[]]
    stepped, kept = False, 0  # a step line in the current chunk; its lines up to its last step or save
    for t, x in lines:
        if stepped and steplines.resumed_at(x) is not None:
            chunks[-1], tail = chunks[-1][:kept], chunks[-1][kept:]
            chunks.append(tail)
            stepped, kept = False, 0
        chunks[-1].append((t, x))
        step = steplines.trainer_values(x) is not None or steplines.user_values(x) is not None
        if step or steplines.ckpt_blocked(x) is not None:
            stepped, kept = stepped or step, len(chunks[-1])
    return chunks


def _attempts(tl: Timeline) -> tuple[list[Attempt], float, list[_Steps], list[bool]]:
    """The attempts in order, the job's end (its last line where that is later), each attempt's steps (its
    lines from its program's start, or its put on the nodes, to the next one's) and whether the record
    told of its end. An attempt whose lines show its program starting again is as many attempts: each
    ends at its last line, and the next begins there and starts at its first line."""
    told = sorted(tl.attempts, key=lambda a: a.begin)
    end = max([tl.end, *(t for t, _ in tl.lines)])
    cuts = [a.started if a.started is not None and a.queued else a.begin for a in told[1:]]
    attempts, per, ends = [], [], []
    for k, a in enumerate(told):
        lo = cuts[k - 1] if k else float("-inf")
        hi = cuts[k] if k < len(cuts) else float("inf")
        chunks = _restarts([(t, x) for t, x in tl.lines if lo <= t < hi])
        begin = a.begin
        for j, chunk in enumerate(chunks):
            final = j + 1 == len(chunks)
            opened, closed = (chunk[0][0], chunk[-1][0]) if chunk else (begin, begin)
            again = next((t for t, x in chunk if steplines.resumed_at(x) is not None), opened)
            started = a.started if a.started is None or j == 0 or begin < a.started <= again else opened
            if not final and started is not None and started > closed:
                started = None  # the record's start of a later run
            if j == 0 and a.queued and chunk and started is not None:
                started = min(started, opened)  # a program does not start after its first line
            attempts.append(Attempt(begin, a.end if final else closed, a.cause if final else RESTARTED,
                                    a.log_every, started if j == 0 else started or opened, a.queued))
            per.append(_steps(chunk))
            ends.append(final)
            begin = closed
    return attempts, end, per, ends


def _redos(attempts: list[Attempt], per: list[_Steps]) -> list[Redo]:
    return [_redo(a, per[k], per[k + 1]) for k, a in enumerate(attempts[:-1])]


def redone(tl: Timeline) -> list[Redo]:
    """Per lost attempt the record tells of (all but the last, in order: its history's entries), the steps
    its next attempt ran again: what `job status`'s retry table shows and split() counts as redone."""
    attempts, _end, per, told = _attempts(tl)
    return [r for r, end_told in zip(_redos(attempts, per), told, strict=False) if end_told]


def split(tl: Timeline) -> dict[str, Any]:
    """The job's goodput: {percent, reason, productive_s, node_s, lost_s: {PARTS}, share: {productive,
    PARTS}}, in node-seconds and percent of node_s. percent is None (reason says why) before a step."""
    wall = dict.fromkeys(PARTS, 0.0)  # wall seconds, x nnodes at the end
    productive = 0.0
    attempts, end, per, _told = _attempts(tl)
    stepped = any(st.found for st in per)
    if attempts:
        wall["capacity"] = max(0.0, min(attempts[0].begin, end) - tl.created)
    redos = _redos(attempts, per)
    for k, a in enumerate(attempts):
        last = k + 1 == len(attempts)
        upto = end if last else attempts[k + 1].begin
        stop = upto if last else min(max(a.end, a.begin), upto)
        if not last:
            wall["recovery"] += max(0.0, upto - stop)  # the loss seen -> the next attempt on its nodes
        st = per[k]
        prog = a.started if a.started is not None else st.opened if a.queued else a.begin
        prog = min(max(prog if prog is not None else stop, a.begin), stop)
        wall["queued" if a.queued else "startup"] += prog - a.begin
        if not st.found:
            run = stop - prog
            if stepped or not tl.succeeded:
                wall["startup"] += run  # it never got to a step: nothing it did is known to have lasted
                continue
            took = min(run, st.blocked())  # a job without step lines that SUCCEEDED: its run did its work
            wall["checkpoint"] += took
            productive += run - took
            continue
        (t_first, s_first), (t_last, _s_last) = st.found[0], st.found[-1]
        in_tail = st.blocked(after=t_last)  # the save after the last step (the last one, a preemption's)
        t_first = min(max(t_first, prog), stop)
        t_last = min(max(t_last, t_first), stop)
        before = max(1, s_first - st.base(a.log_every) + 1)  # steps the first line covers
        every = a.log_every or st.cadence or (before if st.trainer else 1)  # the trainer's first line: its cadence
        pre = t_first - prog
        pre_compute = min(pre, before * (st.first_s or st.step_s))
        wall["startup"] += pre - pre_compute
        logged = pre_compute + (t_last - t_first)
        tail = stop - t_last
        tail_save = min(in_tail, tail)
        wall["checkpoint"] += tail_save
        tail -= tail_save
        compute = logged
        if last and tl.ended:
            wall["startup"] += tail  # shut-down: the exit after the last save
        elif last:
            in_flight = min(tail, every * st.step_s)  # a running job's steps since its last line
            compute += in_flight
            wall["stalled"] += tail - in_flight
        else:
            r = redos[k]
            kept_s = min(tail, r.kept * st.step_s)  # ran after the last line, and the next attempt kept them
            lost_s = min(tail - kept_s, ((r.steps_max or 0) - (r.steps or 0)) * st.step_s)  # ran, unlogged, lost
            again = min(logged, (r.steps or 0) * st.step_s)  # logged, and run again by the next attempt
            compute += kept_s - again
            wall["redone"] += lost_s + again
            wall["stalled" if a.cause == STALLED_CAUSE else "recovery"] += tail - kept_s - lost_s
        took = min(max(0.0, st.blocked() - tail_save), compute)  # the saves between the steps
        wall["checkpoint"] += took
        productive += compute - took
    n = max(1, tl.nnodes)
    lost = {k: max(0.0, v) * n for k, v in wall.items()}
    pull = min(float(tl.pull_s), lost["startup"])  # the pull happens in an attempt's start-up
    lost["image_pull"], lost["startup"] = pull, lost["startup"] - pull
    node_s = n * max(0.0, end - tl.created)
    started = stepped or any(a.started is not None for a in attempts) or bool(tl.lines)
    reason = None
    if node_s <= 0:
        reason = NOT_STARTED
    elif not stepped and not tl.succeeded:
        reason = (NEVER_STARTED if tl.ended else NOT_STARTED) if not started else None if tl.ended else NO_STEP_YET
    return figures(productive * n, node_s, lost, reason)


def figures(good_s: float, node_s: float, lost: dict[str, float], reason: str | None) -> dict[str, Any]:
    """The goodput as shown and written: each share of node_s computed once, from the unrounded
    node-seconds, and each figure rounded once; percent is the productive share (None with a reason)."""
    share = {k: round(100 * v / node_s, 1) if node_s > 0 else None for k, v in (("productive", good_s), *lost.items())}
    return {"percent": share["productive"] if reason is None else None, "reason": reason,
            "productive_s": round(good_s, 1), "node_s": round(node_s, 1),
            "lost_s": {k: round(v, 1) for k, v in lost.items()}, "share": share}


def lost_usd(got: dict[str, Any] | None, price_per_hour: float | None) -> dict[str, float] | None:
    """Each lost part of a goodput (`got`: split()'s) in dollars at a node's price per hour (node-seconds x
    price / 3600, to the cent): what `job status` and `cost report` show; None without a price."""
    if not got or price_per_hour is None:
        return None
    return {part: round(s * price_per_hour / 3600, 2) for part, s in (got.get("lost_s") or {}).items()}


# -- what the job's state, record and log hold -------------------------------------------------------------
def _when(text: Any) -> float | None:
    return parse_timestamp(text) if text else None


def _writer(entries: Iterable[tuple[float | None, str, str]]) -> list[tuple[float, str]]:
    """The lines of the writer that logs the steps (the trainer's rank 0; a user command's busiest node)."""
    by: dict[str, list[tuple[float, str]]] = {}
    for t, where, text in entries:
        if t is not None:
            by.setdefault(where, []).append((t, text))

    def weight(lines: list[tuple[float, str]]) -> tuple[int, int]:
        return (sum(1 for _t, x in lines if steplines.trainer_values(x) or steplines.resumed_at(x) is not None),
                sum(1 for _t, x in lines if steplines.user_values(x)))

    return max(by.values(), key=weight) if by else []


def _int(value: Any) -> int | None:
    try:
        return int(value) if value else None
    except (TypeError, ValueError):
        return None


def timeline(state: Any, entries: Iterable[tuple[float | None, str, str]], now: float) -> Timeline | None:
    """The Timeline of a job's state (a JobState as `job status` shows it) and its log's entries
    ((time, writer, text), oldest first); None before it has a submission time.

    A cluster job's attempts are its history's: entry k says when attempt k's loss or failure was seen
    (`at`), why (`cause`), its cadence (`log_every`) and when the next attempt started (`delivered`). On
    a plain cluster `delivered` is when the next attempt was put on its nodes; where the job waits in a
    shared queue (state.waits_in_queue: a Slurm cluster's) it waits from its submission, or its requeue
    (`at`), until its program starts (`delivered`; the first attempt's own `started` where its entry says
    it, else its first line): that wait is `queued`. The last attempt's program started at its nodes'
    earliest `started` report (else, in a queue, the state's `started`, if after its requeue)."""
    created = _when(state.created)
    if created is None:
        return None
    end = _when(state.ended) or now
    lines = _writer(entries)
    won = state.state == SUCCEEDED
    if state.target == "vertex":
        started = _when(state.started)
        n = sum(int(p.get("replicas") or 0) for p in state.pools) or int(state.nodes or 1)
        begin = started if started is not None else end
        return Timeline(n, created, end, [Attempt(begin, end, started=started)], lines, ended=state.final, succeeded=won)
    reports = [t for r in state.per_node if (t := _when(r.get("started")))]
    attempts = _attempts_of(state.history, created, end, state.waits_in_queue, min(reports) if reports else None,
                            _when(state.started) if state.waits_in_queue else None)
    pull = sum(float(r.get("pull_s") or 0) for r in state.per_node) + \
        sum(float(h.get("pull_s") or 0) for h in state.history)
    return Timeline(int(state.nnodes or state.nodes or 1), created, end, attempts, lines, pull, state.final, won)


def _attempts_of(history: list[dict], created: float, end: float, queued: bool, started: float | None,
                 fallback: float | None = None) -> list[Attempt]:
    """A cluster job's attempts from its history (see timeline()); `started`: when its last attempt's program
    started (its nodes' reports), where known; `fallback`: where neither they nor its history say."""
    attempts, begin, cadence = [], created, None
    started_at: float | None = None
    for k, h in enumerate(history):
        seen = _when(h.get("at")) or begin
        cadence = _int(h.get("log_every")) or cadence
        if queued and k == 0:
            started_at = _when(h.get("started"))
        attempts.append(Attempt(begin, seen, str(h.get("cause") or ""), cadence, started_at, queued=queued))
        delivered = _when(h.get("delivered"))
        begin, started_at = (seen, delivered) if queued else (delivered or seen, None)
    started_at = next((t for t in (started, started_at, fallback) if t is not None), None)
    if started_at is not None and started_at < begin:  # a report of an earlier attempt
        started_at = None
    attempts.append(Attempt(begin, end, None, cadence, started_at, queued=queued))
    return attempts


def redone_of(history: list[dict], read: Iterable[tuple[float | None, str, str]]) -> list[Redo]:
    """redone() of a plain cluster's job known by its history and its log's entries alone (its follower's
    count at the job's end, for the webhooks): the same steps `job status` shows."""
    lines = _writer(read)
    times = [t for t, _x in lines] + [t for h in history for t in (_when(h.get("at")), _when(h.get("delivered"))) if t]
    if not times:
        return [Redo(h.get("last_step"), None, None, None) for h in history]
    return redone(Timeline(1, min(times), max(times), _attempts_of(history, min(times), max(times), False, None), lines))


def entries(clients: Any, project: str, flt: str) -> list[tuple[float | None, str, str]]:
    """The job's log as timeline() reads it: (time, writer, text) per entry, oldest first (one read)."""
    from . import logs

    return [(_when(e.get("timestamp")), logs.tag(e), logs.message(e)) for e in logs.entries(clients, project, flt)]


def of_job(clients: Any, project: str, state: Any, now: float, flt: str) -> dict[str, Any] | None:
    """The goodput of the job `state` shows, its steps read from its log (`flt`: route.log_filter's; one
    read, every page)."""
    tl = timeline(state, entries(clients, project, flt), now)
    return None if tl is None else split(tl)


def series(project: str, jid: Any, got: dict[str, Any], now: float) -> list[dict]:
    """The job's goodput as CreateTimeSeries series: percent, productive_s, node_s and lost_s per part."""
    name = jid.cluster if jid.target == "cluster" else jid.job
    resource = {"type": "generic_task", "labels": {"project_id": project, "location": "global",
                                                  "namespace": NAMESPACE[jid.target], "job": name, "task_id": "goodput"}}
    at = {"end_time": {"seconds": int(now), "nanos": int(now % 1 * 1e9)}}
    values = [("goodput", got.get("percent"), {}), ("productive_s", got["productive_s"], {}),
              ("node_s", got["node_s"], {}), *(("lost_s", v, {"part": k}) for k, v in got["lost_s"].items())]
    return [{"metric": {"type": METRIC + key, "labels": {"job_id": jid.job, **labels}}, "resource": resource,
             "metric_kind": "GAUGE", "value_type": "DOUBLE", "points": [{"interval": at, "value": {"double_value": v}}]}
            for key, v, labels in values if v is not None]


def publish(clients: Any, project: str, state: Any, now: float, flt: str) -> dict[str, Any] | None:
    """Write the job's goodput to Cloud Monitoring (its end's figures, by whoever saw it end). Soft, as
    the trainer's reporter is: a log or Monitoring that fails is logged and the job's end goes on.
    Returns what it wrote (None: nothing)."""
    from . import ids

    try:
        got = of_job(clients, project, state, now, flt)
        if got is None:
            return None
        out = series(project, ids.parse(state.id), got, now)
        clients.monitoring().create_time_series(request={"name": f"projects/{project}", "time_series": out},
                                                timeout=30.0)
    except Exception as e:  # an outage, a refused write: the job ended all the same
        log.warning("job %s: cannot write its goodput to Cloud Monitoring (%s)", state.id, type(e).__name__)
        return None
    return got
