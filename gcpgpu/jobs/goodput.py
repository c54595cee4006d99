"""Goodput: how much of a job's node-time trained, and where the rest went (README, "Goodput").

A job's node-time is its nodes (replicas) x its time from submission to its end (now while it runs):
what it held, or waited for. It splits into productive time and seven kinds of lost time:

    capacity    waiting for machines before the first attempt ran (Vertex's queue and provisioning)
    image_pull  the nodes pulling the job's image (node-seconds, as each node reports it)
    startup     from an attempt being put on its nodes to its first step, less the pull and that step's
                own compute; and, on the last attempt, from its last step to the job's end (shut-down)
    checkpoint  the steps blocked by checkpoints (the trainer's "steps blocked" per save)
    redone      steps run again after a resume (those at or past the step it resumed from, and up to
                --log-every - 1 unlogged steps after the lost attempt's last step line)
    stalled     from a stalled attempt's last step to the follower stopping it
    recovery    from a loss or failure being seen (the record's history) to the next attempt on its nodes,
                and from a lost attempt's last step to the loss being seen

An attempt's compute time is read from its step lines (jobs/steplines.py): the bundled trainer's, or a
user command's where they follow the documented pattern; a step's time is the attempt's median time per
step between two lines. An attempt with no step line counts its run as productive (nothing tells more).
split() is pure arithmetic over a Timeline; timeline() builds one from what the job's state, record and
log already hold; publish() writes the figures to Cloud Monitoring per job.
"""

from __future__ import annotations

import logging
import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from gcpgpu.times import parse_timestamp

from . import steplines

log = logging.getLogger("gcpgpu.jobs.goodput")
PARTS = ("capacity", "image_pull", "startup", "checkpoint", "redone", "stalled", "recovery")
STALLED_CAUSE = "stalled"  # a retry's cause after a stall (jobs/cluster/restart.py)
# Cloud Monitoring: one custom metric per figure, on the generic_task resource the trainer's reporter
# writes to (namespace as metrics/sources.NAMESPACE, job = the cluster or the Vertex job id), with
# task_id "goodput" and the job's id as a metric label: `metrics report` draws it.
METRIC = "custom.googleapis.com/gcpgpu/job/"
NAMESPACE = {"cluster": "gcpgpu-cluster", "vertex": "gcpgpu-vertex"}


@dataclass(frozen=True)
class Attempt:
    begin: float  # put on its nodes
    end: float  # its loss or failure seen (the record's history), or the job's end (now)
    cause: str | None = None  # why it ended early; None for the last attempt
    log_every: int = 1  # the trainer's step-line cadence
    started: float | None = None  # when its program started on the nodes (after the pull), where known


@dataclass(frozen=True)
class Timeline:
    nnodes: int
    created: float
    end: float
    attempts: list[Attempt]
    lines: list[tuple[float, str]] = field(default_factory=list)  # (time, text) of the writer of the steps
    pull_s: float = 0.0  # node-seconds the nodes spent pulling the image
    ended: bool = True  # the job is over (its last attempt's tail is shut-down, not steps in flight)


@dataclass(frozen=True)
class _Steps:
    first: tuple[float, int]
    last: tuple[float, int]
    step_s: float  # median seconds per step
    count: int  # step lines
    resumed: int | None  # the step it resumed from (0: a fresh start), where it said so
    saves: list[tuple[float, float]]  # (when logged, seconds it blocked the steps) of each checkpoint

    def blocked(self, after: float | None = None) -> float:
        """Seconds the checkpoints blocked the steps (those logged after `after` only, when given)."""
        return sum(b for t, b in self.saves if after is None or t > after)


def _steps(lines: list[tuple[float, str]]) -> _Steps:
    trainer = [(t, got[0]) for t, text in lines if (got := steplines.trainer_values(text)) is not None]
    found = trainer or [(t, got[0]) for t, text in lines if (got := steplines.user_values(text)) is not None]
    resumed = next((r for _t, text in lines if (r := steplines.resumed_at(text)) is not None), None)
    saves = [(t, b) for t, text in lines if (b := steplines.ckpt_blocked(text)) is not None]
    if not found:
        return _Steps((0.0, 0), (0.0, 0), 0.0, 0, resumed, saves)
    per = [(t2 - t1) / (s2 - s1) for (t1, s1), (t2, s2) in zip(found, found[1:], strict=False) if s2 > s1]
    return _Steps(found[0], found[-1], statistics.median(per) if per else 0.0, len(found), resumed, saves)


def split(tl: Timeline) -> dict[str, Any]:
    """The job's goodput: {percent, productive_s, node_s, lost_s: {PARTS}}, in node-seconds."""
    wall = dict.fromkeys(PARTS, 0.0)  # wall seconds, x nnodes at the end
    productive = 0.0
    attempts = sorted(tl.attempts, key=lambda a: a.begin)
    end = max([tl.end, *(t for t, _ in tl.lines)])
    if attempts:
        wall["capacity"] = max(0.0, min(attempts[0].begin, end) - tl.created)
    per = []
    for k, a in enumerate(attempts):
        upto = attempts[k + 1].begin if k + 1 < len(attempts) else end
        per.append(_steps([(t, x) for t, x in tl.lines if a.begin <= t < upto or (k + 1 == len(attempts) and t >= upto)]))
    for k, a in enumerate(attempts):
        last = k + 1 == len(attempts)
        upto = end if last else attempts[k + 1].begin
        stop = upto if last else min(max(a.end, a.begin), upto)
        if not last:
            wall["recovery"] += max(0.0, upto - stop)  # the loss seen -> the next attempt on its nodes
        st = per[k]
        if not st.count:
            # No step line: from the program's start (where known) the run counts as productive.
            began = min(max(a.started or a.begin, a.begin), stop)
            wall["startup"] += began - a.begin
            run = stop - began
            took = min(run, st.blocked())
            wall["checkpoint"] += took
            productive += run - took
            continue
        t_first, s_first = st.first
        t_last, s_last = st.last
        in_tail = st.blocked(after=t_last)  # the save after the last step (the last one, a preemption's)
        t_first, t_last = min(max(t_first, a.begin), stop), min(max(t_last, a.begin), stop)
        base = st.resumed if st.resumed is not None else (0 if k == 0 else s_first)
        pre = t_first - a.begin
        pre_compute = min(pre, max(0, s_first - base + 1) * st.step_s)
        wall["startup"] += pre - pre_compute
        compute = pre_compute + (t_last - t_first)
        tail = stop - t_last
        tail_save = min(in_tail, tail)
        wall["checkpoint"] += tail_save
        tail -= tail_save
        nxt = per[k + 1] if not last else None
        again = None if nxt is None else nxt.resumed if nxt.resumed is not None else nxt.first[1] if nxt.count else None
        # Steps past the last line: the next attempt's checkpoint proves those before it ran (kept); up to
        # log_every - 1 of them may have run unlogged (an upper bound, as steps_redone_max is).
        kept = max(0, (again or 0) - (s_last + 1))
        if last and tl.ended:
            tail_compute = 0.0
            wall["startup"] += tail  # shut-down: the exit after the last save
        else:
            tail_compute = min(tail, max(a.log_every - 1 if nxt else a.log_every, kept) * st.step_s)
            wall["stalled" if (last or a.cause == STALLED_CAUSE) else "recovery"] += tail - tail_compute
        redone = 0.0  # of compute
        if nxt is not None:
            if again is not None:
                redone = min(compute, max(0, s_last + 1 - max(again, base)) * st.step_s)
            kept_s = min(tail_compute, kept * st.step_s)
            compute += kept_s
            wall["redone"] += tail_compute - kept_s  # the unlogged steps lost with the attempt
        else:
            compute += tail_compute  # a running job's steps in flight
        good = compute - redone
        took = min(st.blocked() - tail_save, good)  # the saves between the steps
        wall["checkpoint"] += took
        productive += good - took
        wall["redone"] += redone
    n = max(1, tl.nnodes)
    lost = {k: v * n for k, v in wall.items()}
    pull = min(tl.pull_s, lost["startup"])  # the pull happens in an attempt's start-up
    lost["image_pull"], lost["startup"] = pull, lost["startup"] - pull
    node_s = n * max(0.0, end - tl.created)
    good_s = productive * n
    return {"percent": round(100 * good_s / node_s, 1) if node_s > 0 else None, "productive_s": round(good_s, 1),
            "node_s": round(node_s, 1), "lost_s": {k: round(max(0.0, v), 1) for k, v in lost.items()}}


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


def timeline(state: Any, entries: Iterable[tuple[float | None, str, str]], now: float) -> Timeline | None:
    """The Timeline of a job's state (a JobState as `job status` shows it) and its log's entries
    ((time, writer, text), oldest first); None before it has a submission time."""
    created = _when(state.created)
    if created is None:
        return None
    end = _when(state.ended) or now
    lines = _writer(entries)
    if state.target == "vertex":
        started = _when(state.started)
        n = sum(int(p.get("replicas") or 0) for p in state.pools) or int(state.nodes or 1)
        begin = started if started is not None else end
        return Timeline(n, created, end, [Attempt(begin, end, started=started)], lines, ended=state.final)
    attempts, begin, cadence = [], created, 1
    for h in state.history:
        seen = _when(h.get("at")) or begin
        attempts.append(Attempt(begin, seen, str(h.get("cause") or ""), int(h.get("log_every") or cadence)))
        cadence = int(h.get("log_every") or cadence)
        begin = _when(h.get("delivered")) or seen
    started = [t for r in state.per_node if (t := _when(r.get("started")))]
    attempts.append(Attempt(begin, end, None, cadence, min(started) if started else None))
    pull = sum(float(r.get("pull_s") or 0) for r in state.per_node) + \
        sum(float(h.get("pull_s") or 0) for h in state.history)
    return Timeline(int(state.nnodes or state.nodes or 1), created, end, attempts, lines, pull, state.final)


def of_job(clients: Any, project: str, state: Any, now: float, flt: str) -> dict[str, Any] | None:
    """The goodput of the job `state` shows, its steps read from its log (`flt`: route.log_filter's; one
    read, every page)."""
    from . import logs

    entries = ((_when(e.get("timestamp")), logs.tag(e), logs.message(e)) for e in logs.entries(clients, project, flt))
    tl = timeline(state, entries, now)
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
