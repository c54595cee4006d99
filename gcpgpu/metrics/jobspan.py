"""When the job a metrics view watches ran: its state, start and end, from one status read.

`metrics report --job` plots the job's own minutes rather than the last hour, and `metrics tail --job`
tells the job's samples from those before it started (no data yet) and says when it has ended, so
the last numbers it reported are not shown as live.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gcpgpu.errors import CloudError, UsageProblem
from gcpgpu.gcp import clock as gcp_clock
from gcpgpu.times import parse_timestamp

from .query import PERIOD_S, Window

MARGIN_S = 2 * PERIOD_S  # around a job's run in a report: the minute before it and the one after it ends, and more
clock: Callable[[], float] = gcp_clock.now  # what "now" is to the views: the cloud's (the emulator's, under test)


@dataclass(frozen=True)
class JobSpan:
    id: str
    state: str
    started: float | None  # epoch seconds; None until it runs
    ended: float | None
    name: str | None = None  # the job's own name (job submit --name)

    @property
    def over(self) -> bool:
        from gcpgpu.jobs.state import is_final

        return is_final(self.state)

    @property
    def run(self) -> tuple[float, float] | None:
        """(started, ended) once the job has ended having run; else None."""
        if not self.over or self.started is None or self.ended is None:
            return None
        return self.started, self.ended

    def window(self, now: float, max_points: int = 240) -> Window | None:
        """The job's run with a margin either side (a tenth of its length, at least two minutes), up to now;
        None when it has not started."""
        if self.started is None:
            return None
        end = min(now, self.ended if self.ended is not None else now)
        margin = max(MARGIN_S, (end - self.started) * 0.1)
        period = max(PERIOD_S, math.ceil((end - self.started + 2 * margin) / max_points / PERIOD_S) * PERIOD_S)
        # Whole periods of the epoch: each point's interval is the same minute at every refresh (Monitoring
        # aligns intervals back from the window's end), so an ended job's averages do not move with "now".
        stop = math.ceil(min(now, end + margin) / period) * period
        start = min(math.floor((self.started - margin) / period) * period, stop - 2 * period)
        return Window(float(start), float(stop), float(period))


def during(pts: list[tuple[float, float]], period: float, started: float | None,
           ended: float | None) -> list[tuple[float, float]]:
    """The points (each stamped at the end of its `period`) that are a job's run: those whose period lies
    within it, else (a run shorter than a period) those whose period overlaps it. What every view of an
    ended job averages over (`metrics tail` and `metrics report` alike), so they agree."""
    if started is None:
        return pts
    end = float("inf") if ended is None else ended
    within = [(t, v) for t, v in pts if t - period >= started - 1 and t <= end]
    return within or [(t, v) for t, v in pts if t > started and t - period < end]


def job_id(text: str, region: str | None) -> Any:
    """The job id behind `--job TEXT`: as `job submit` printed it, or a Vertex AI number in `region`; else None."""
    from gcpgpu.jobs import ids

    try:
        return ids.parse(text)
    except UsageProblem:
        pass
    if region and ids.VERTEX_NUMBER.match(text.strip()):
        return ids.parse(f"vertex:{region}:{ids.check_vertex_number(text)}")
    return None


def read(clients: Any, project: str, text: str, region: str | None, strict: bool = False) -> JobSpan | None:
    """The job's span, or None when its id says too little (a bare number and no region) or the job's
    service cannot tell (it does not know the job, whose metrics may outlive its record, or refuses):
    the views then show what they would without it. `strict`: a job its service does not know is an
    error (CloudError, exit 1), as for `metrics report --job`, which would otherwise plot another window."""
    from google.api_core import exceptions

    jid = job_id(text, region)
    if jid is None:
        return None
    from gcpgpu.jobs import route

    try:
        state = route.status(clients, project, jid)
    except (CloudError, exceptions.GoogleAPICallError) as e:
        if strict:
            raise CloudError(f"--job {text}: {getattr(e, 'message', None) or e}; to plot a cluster's metrics without "
                             "its job, give --cluster NAME --since DURATION") from e
        return None
    return JobSpan(str(jid), state.state, parse_timestamp(state.started), parse_timestamp(state.ended), state.name)
