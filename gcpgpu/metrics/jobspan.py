"""When the job a metrics view watches ran: its state, start and end, from one status read.

`metrics report --job` plots the job's own minutes rather than the last hour, and `metrics tail --job`
tells the job's samples from those before it started (no data yet) and says when it has ended, so
the last numbers it reported are not shown as live.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gcpgpu.errors import CloudError, UsageProblem
from gcpgpu.times import parse_timestamp

from .query import PERIOD_S, Window

MARGIN_S = 2 * PERIOD_S  # around a job's run in a report: the minute before it and the one after it ends, and more
clock: Callable[[], float] = time.time  # what "now" is to the views (tests run it on the emulator's clock)


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

    def window(self, now: float, max_points: int = 240) -> Window | None:
        """The job's run with a margin either side (a tenth of its length, at least two minutes), up to now;
        None when it has not started."""
        if self.started is None:
            return None
        end = min(now, self.ended if self.ended is not None else now)
        margin = max(MARGIN_S, (end - self.started) * 0.1)
        start, stop = self.started - margin, float(math.ceil(min(now, end + margin)))
        seconds = max(stop - start, 2 * PERIOD_S)
        period = max(PERIOD_S, math.ceil(seconds / max_points / PERIOD_S) * PERIOD_S)
        return Window(stop - seconds, stop, float(period))


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


def read(clients: Any, project: str, text: str, region: str | None) -> JobSpan | None:
    """The job's span, or None when its id says too little (a bare number and no region) or the job's
    service cannot tell (it does not know the job, whose metrics may outlive its record, or refuses):
    the views then show what they would without it."""
    from google.api_core import exceptions

    jid = job_id(text, region)
    if jid is None:
        return None
    from gcpgpu.jobs import route

    try:
        state = route.status(clients, project, jid)
    except (CloudError, exceptions.GoogleAPICallError):
        return None
    return JobSpan(str(jid), state.state, parse_timestamp(state.started), parse_timestamp(state.ended), state.name)
