"""Whether a value the tail shows is live: the rules that keep a view from passing old numbers off as now.

A value is the newest point of its series within the tail's window, and that point may be minutes
old: Compute writes once a minute (up to four minutes late), the trainer's reporter only while the
trainer runs. Watching a job (`metrics tail --job`), a node's point from before the job started is
not the job's (no data yet, rather than the idle node's 0 %), and once the job has ended the views
show its run's averages (of_run, shown), said so, not live ones. The trainer's
numbers, whoever is watched, are stale when the reporter has been silent for a few minutes (the job
ended, or stalled).
"""

from __future__ import annotations

import datetime as dt
import statistics

from .jobspan import JobSpan, during

TRAINER_STALE_S = 180.0  # the reporter writes every 10 s or more while the trainer logs; 3 silent minutes is not live
NOT_YET = "no data yet"
ENDED = "job ended"
STALE = "stale"


def of_run(data: dict[str, dict], period: float, job: JobSpan | None) -> dict[str, dict]:
    """Once the watched job has ended: only the points of its run (jobspan.during: not the idle minutes
    after it, nor an earlier job's). Else `data` as it is."""
    if job is None or job.run is None:
        return data
    started, ended = job.run
    return {key: {row: during(pts, period, started, ended) for row, pts in rows.items()} for key, rows in data.items()}


def shown(points: list[tuple[float, float]] | None, job: JobSpan | None) -> float | None:
    """A series' value in a view: its newest point; for an ended job the mean of its run's points (of_run's),
    the figures `metrics report` averages too, the same at every refresh however long after the end."""
    if not points:
        return None
    if job is not None and job.run is not None:
        return statistics.fmean(v for _t, v in points)
    return max(points)[1]


def held(reason: str) -> bool:
    """Whether a value with this reason is left out (None) rather than shown with it: an ended job's last
    numbers are shown."""
    return reason != ENDED


def node_value(t: float, period: float, job: JobSpan | None) -> str | None:
    """Why a node's (or task's) point, stamped `t` at the end of its `period`, is not live for the job; None if it is."""
    if job is None:
        return None
    if job.started is None or t - period < job.started - 1:
        return NOT_YET  # its minute began before the job did (an idle node's 0 %, or an earlier job)
    if job.over and job.ended is not None and t - period < job.ended:
        return ENDED  # from the job's run: its last value, not a live one
    return None


def trainer_value(t: float, period: float, now: float, job: JobSpan | None) -> str | None:
    """Why the trainer's latest point (stamped `t` at the end of its `period`) is not live; None if it is."""
    if job is not None:
        if job.started is None or t - period < job.started - 1:
            return NOT_YET  # maybe an earlier job's numbers: a cluster's trainer series outlive its jobs
        if job.over:
            return ENDED
    return STALE if now - t > TRAINER_STALE_S else None


def clock(epoch: float) -> str:
    return dt.datetime.fromtimestamp(epoch, dt.timezone.utc).strftime("%H:%M:%S")


def job_line(job: JobSpan, now: float) -> str:
    """The job's state for a view's title: 'job X RUNNING since 05:41:02' or 'job X ended SUCCEEDED at 05:52:40'."""
    if job.over:
        when = f" at {clock(job.ended)} ({_ago(now - job.ended)})" if job.ended is not None else ""
        return f"job {job.id} ended {job.state}{when}: its numbers are its run's averages, not live"
    if job.started is None:
        return f"job {job.id} {job.state}: not started, no data yet"
    return f"job {job.id} {job.state} since {clock(job.started)}"


def _ago(seconds: float) -> str:
    seconds = max(0.0, seconds)
    return f"{seconds:.0f} s ago" if seconds < 120 else f"{seconds / 60:.0f} min ago"


def note(reason: str, t: float, job: JobSpan | None, last: str = "", now: float | None = None) -> str:
    """A row's STATUS line for a held-back value: why, and since when."""
    if reason == NOT_YET:
        since = f" (job started {clock(job.started)})" if job is not None and job.started else ""
        return f"{NOT_YET}{since}"
    if reason == ENDED:
        at = f" {clock(job.ended)}" if job is not None and job.ended else ""
        return f"{ENDED}{at}: averages over its run"
    # `t` ends the minute the last report fell in: "over N min" never overstates how fresh it was.
    silent = f" for over {int((now - t) // 60)} min" if now is not None else ""
    return f"trainer silent{silent}" + (f"; last {last}" if last else "")
