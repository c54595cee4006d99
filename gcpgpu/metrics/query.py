"""Fetch a target's metrics: one ListTimeSeries call per metric type, all in parallel, aggregated server-side.

Each call asks for the last few minutes aligned to one point per minute and reduced to one series
per node (or per GPU), so the answer's size and the number of calls do not grow with the cluster.
Responses are read through the raw protobuf messages: proto-plus wrappers cost more than the
network for a 64-node answer.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from gcpgpu.gcp import clock as gcp_clock
from gcpgpu.times import parse_duration

from .sources import Metric
from .target import Target

PERIOD_S = 60  # Compute and the Ops Agent sample once a minute; a shorter alignment only adds gaps.
HISTORY_POINTS = 15  # the tail's sparkline: the last 15 minutes
LATEST_POINTS = 5  # enough minutes to find a metric's latest value through Compute's up-to-4-minute delay
PAGE_SIZE = 10_000
CALL_TIMEOUT_S = 30.0
MAX_PARALLEL = 16

RowKey = tuple[str, str | None]  # (member key, gpu number) or ("job", None) for job-level numbers
JOB_KEY: RowKey = ("job", None)

MAX_SINCE_S = 6 * 604800  # Cloud Monitoring keeps most metrics for six weeks


def parse_since(text: str, option: str = "--since") -> int:
    """How far back a window reaches: a duration (times.py) from a minute to six weeks."""
    return parse_duration(text, option, at_least=60, at_most=MAX_SINCE_S,
                          too_short="shorter than a minute: Cloud Monitoring samples once a minute",
                          too_long="longer than six weeks, what Cloud Monitoring keeps")


@dataclass(frozen=True)
class Window:
    start: float
    end: float
    period: float

    @classmethod
    def recent(cls, now: float | None = None, points: int = HISTORY_POINTS, period: float = PERIOD_S) -> Window:
        # Rounded up: a point written a moment ago (the trainer's, stamped with fractions) falls inside.
        end = float(math.ceil(gcp_clock.now() if now is None else now))
        return cls(end - points * period, end, period)

    @classmethod
    def since(cls, seconds: float, now: float | None = None, max_points: int = 240) -> Window:
        """A window `seconds` long with at most max_points points per series (period a whole minute)."""
        end = float(math.ceil(gcp_clock.now() if now is None else now))
        period = max(PERIOD_S, math.ceil(seconds / max_points / PERIOD_S) * PERIOD_S)
        return cls(end - seconds, end, float(period))


@dataclass
class Fetched:
    """What one refresh got: per metric key, per row, the points (newest first)."""

    window: Window
    data: dict[str, dict[RowKey, list[tuple[float, float]]]] = field(default_factory=dict)
    absent: set[str] = field(default_factory=set)  # metric types the project has never seen (NotFound)
    calls: int = 0
    seconds: float = 0.0


def request(target: Target, metric: Metric, window: Window, per_gpu: bool) -> dict[str, Any]:
    """The ListTimeSeriesRequest (as a dict) for one metric over the whole target."""
    return {
        "name": f"projects/{target.project}",
        "filter": target.filter(metric),
        "interval": {"start_time": {"seconds": int(window.start)}, "end_time": {"seconds": int(window.end)}},
        "aggregation": {
            "alignment_period": {"seconds": int(window.period)},
            "per_series_aligner": metric.aligner,
            "cross_series_reducer": metric.reducer,
            "group_by_fields": target.group_by(metric, per_gpu),
        },
        "view": "FULL",
        "page_size": PAGE_SIZE,
    }


def _read(pager: Any, target: Target, metric: Metric, out: dict[RowKey, list[tuple[float, float]]]) -> int:
    """Points from every page into `out`; returns the number of API calls (pages) it took."""
    from google.cloud import monitoring_v3

    calls = 0
    scale = metric.scale
    key_label = target.key_label
    for page in pager.pages:
        calls += 1
        raw = monitoring_v3.ListTimeSeriesResponse.pb(page)
        for ts in raw.time_series:
            if metric.job_level:
                key: RowKey = JOB_KEY
            elif metric.per_nic:  # (the node's instance id, "role|nic")
                labels = ts.metric.labels
                key = (target.key_of(labels.get("node", "")), f"{labels.get('role', '')}|{labels.get('nic', '')}")
            else:
                key = (ts.resource.labels.get(key_label, ""), ts.metric.labels.get("gpu_number"))
            pts = out.setdefault(key, [])
            # One comprehension per series, its attribute lookups hoisted: 1,024 nodes' answers are ~100,000 points.
            if ts.value_type == 2:  # INT64
                pts += [(e.seconds + e.nanos / 1e9, p.value.int64_value * scale)
                        for p in ts.points for e in (p.interval.end_time,)]
            else:
                pts += [(e.seconds + e.nanos / 1e9, p.value.double_value * scale)
                        for p in ts.points for e in (p.interval.end_time,)]
    return calls


def fetch(clients: Any, target: Target, metrics: Sequence[Metric], window: Window, per_gpu: bool = False,
          latest_only: bool = False) -> Fetched:
    """One refresh: every metric's ListTimeSeries call, in parallel. NotFound means the metric type is absent.

    latest_only: metrics the tail draws no sparkline from are asked for their last few minutes only
    (enough to ride out Compute's reporting delay), a third of the points to make, send and read.
    """
    from google.api_core import exceptions

    client = clients.monitoring()
    result = Fetched(window)
    t0 = time.perf_counter()

    def one(metric: Metric) -> tuple[Metric, dict, int, bool]:
        out: dict[RowKey, list[tuple[float, float]]] = {}
        try:
            asked = window
            if latest_only and not metric.history:
                asked = Window(max(window.start, window.end - LATEST_POINTS * window.period), window.end, window.period)
            pager = client.list_time_series(request=request(target, metric, asked, per_gpu), timeout=CALL_TIMEOUT_S)
            return metric, out, _read(pager, target, metric, out), False
        except exceptions.NotFound:
            return metric, out, 1, True

    with ThreadPoolExecutor(max_workers=min(MAX_PARALLEL, len(metrics)) or 1) as pool:
        for metric, data, calls, absent in pool.map(one, metrics):
            result.data[metric.key] = data
            result.calls += calls
            if absent:
                result.absent.add(metric.key)
    result.seconds = time.perf_counter() - t0
    return result
