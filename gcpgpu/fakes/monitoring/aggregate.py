"""Alignment and cross-series reduction, as ListTimeSeries' `aggregation` does them server-side.

Pure functions over plain tuples, so they can be tested on known data without a server.
Windows: with interval [S, E] and alignment period p, bucket k holds the points whose end time t
satisfies E - (k+1)p < t <= E - kp, for k = 0 .. ceil((E - S) / p) - 1, and its aligned point is
stamped at E - kp. Empty buckets give no point, as in Cloud Monitoring.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from typing import NamedTuple

import numpy as np

Point = tuple[float, float, float]  # (start_time, end_time, value), seconds since the epoch

# Aligners and the metric kinds each accepts (Cloud Monitoring's documented pairings).
ALIGNER_KINDS: dict[str, tuple[str, ...]] = {
    "ALIGN_DELTA": ("DELTA", "CUMULATIVE"),
    "ALIGN_RATE": ("DELTA", "CUMULATIVE"),
    "ALIGN_MEAN": ("GAUGE", "DELTA"),
    "ALIGN_MIN": ("GAUGE", "DELTA"),
    "ALIGN_MAX": ("GAUGE", "DELTA"),
    "ALIGN_SUM": ("GAUGE", "DELTA"),
    "ALIGN_COUNT": ("GAUGE", "DELTA"),
    "ALIGN_NEXT_OLDER": ("GAUGE", "DELTA", "CUMULATIVE"),
    "ALIGN_PERCENTILE_99": ("GAUGE", "DELTA"),
    "ALIGN_PERCENTILE_95": ("GAUGE", "DELTA"),
    "ALIGN_PERCENTILE_50": ("GAUGE", "DELTA"),
    "ALIGN_PERCENTILE_05": ("GAUGE", "DELTA"),
}
REDUCERS = (
    "REDUCE_MEAN", "REDUCE_MIN", "REDUCE_MAX", "REDUCE_SUM", "REDUCE_COUNT", "REDUCE_STDDEV",
    "REDUCE_PERCENTILE_99", "REDUCE_PERCENTILE_95", "REDUCE_PERCENTILE_50", "REDUCE_PERCENTILE_05",
)  # fmt: skip


def aligned_kind(aligner: str, kind: str) -> str:
    """The metric kind of the aligned series: deltas stay DELTA, everything else becomes a GAUGE."""
    if aligner == "ALIGN_DELTA":
        return "DELTA"
    if aligner == "ALIGN_NEXT_OLDER":
        return kind
    return "GAUGE"


def aligned_value_type(aligner: str, value_type: str) -> str:
    if aligner in ("ALIGN_RATE", "ALIGN_MEAN") or aligner.startswith("ALIGN_PERCENTILE"):
        return "DOUBLE"
    if aligner == "ALIGN_COUNT":
        return "INT64"
    return value_type


def reduced_value_type(reducer: str, value_type: str) -> str:
    if reducer in ("REDUCE_MEAN", "REDUCE_STDDEV") or reducer.startswith("REDUCE_PERCENTILE"):
        return "DOUBLE"
    if reducer == "REDUCE_COUNT":
        return "INT64"
    return value_type


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) with linear interpolation between closest ranks."""
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    rank = (len(ordered) - 1) * q / 100.0
    lo = math.floor(rank)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (rank - lo)


def _summary(name: str, values: list[float]) -> float:
    kind = name.split("_", 1)[1]
    if kind == "MEAN":
        return math.fsum(values) / len(values)
    if kind == "SUM":
        return math.fsum(values)
    if kind == "MIN":
        return min(values)
    if kind == "MAX":
        return max(values)
    if kind == "COUNT":
        return float(len(values))
    if kind == "STDDEV":
        return statistics.pstdev(values) if len(values) > 1 else 0.0
    if kind.startswith("PERCENTILE_"):
        return percentile(values, float(kind.split("_")[1]))
    raise ValueError(name)


def to_deltas(points: Sequence[Point]) -> list[Point]:
    """A CUMULATIVE series (oldest first) as the increase between consecutive points; a drop is a reset."""
    out: list[Point] = []
    for prev, cur in zip(points, points[1:], strict=False):
        if cur[0] != prev[0] or cur[2] < prev[2]:  # a new start time or a smaller value: the counter reset
            out.append((cur[0], cur[1], cur[2]))
        else:
            out.append((prev[1], cur[1], cur[2] - prev[2]))
    return out


def bucket_count(start: float, end: float, period: float) -> int:
    return max(1, math.ceil((end - start) / period - 1e-9)) if end > start else 1


_ADDITIVE = {"ALIGN_MEAN", "ALIGN_RATE", "ALIGN_DELTA", "ALIGN_SUM", "ALIGN_COUNT"}


def align(points: Iterable[Point], kind: str, aligner: str, start: float, end: float, period: float) -> dict[float, float]:
    """One series' points (oldest first) -> {bucket end time: aligned value}."""
    pts = to_deltas(list(points)) if kind == "CUMULATIVE" and aligner in ("ALIGN_DELTA", "ALIGN_RATE") else points
    count = bucket_count(start, end, period)
    if aligner in _ADDITIVE:
        # The common aligners need only a running sum and count per bucket: no lists (64-node queries).
        sums: dict[int, float] = {}
        ns: dict[int, int] = {}
        for _s, t, v in pts:
            d = end - t
            if d < 0:
                continue
            k = int(d // period)
            if k < count:
                sums[k] = sums.get(k, 0.0) + v
                ns[k] = ns.get(k, 0) + 1
        if aligner == "ALIGN_MEAN":
            return {end - k * period: sums[k] / ns[k] for k in sums}
        if aligner == "ALIGN_RATE":
            return {end - k * period: sums[k] / period for k in sums}
        if aligner == "ALIGN_COUNT":
            return {end - k * period: float(ns[k]) for k in sums}
        return {end - k * period: sums[k] for k in sums}
    buckets: dict[int, list[float]] = {}
    for _s, t, v in pts:
        d = end - t
        if d < 0:
            continue
        k = int(d // period)
        if k >= count:
            continue
        buckets.setdefault(k, []).append(v)
    out: dict[float, float] = {}
    for k, values in buckets.items():
        stamp = end - k * period
        out[stamp] = values[-1] if aligner == "ALIGN_NEXT_OLDER" else _summary(aligner, values)
    return out


def reduce(groups: dict[tuple, list[dict[float, float]]], reducer: str) -> dict[tuple, dict[float, float]]:
    """{group key: [aligned series]} -> {group key: {bucket end: reduced value}}."""
    out: dict[tuple, dict[float, float]] = {}
    for key, members in groups.items():
        if reducer in ("REDUCE_MEAN", "REDUCE_SUM", "REDUCE_COUNT"):
            sums: dict[float, float] = {}
            ns: dict[float, int] = {}
            for series in members:
                for stamp, value in series.items():
                    sums[stamp] = sums.get(stamp, 0.0) + value
                    ns[stamp] = ns.get(stamp, 0) + 1
            if reducer == "REDUCE_MEAN":
                out[key] = {t: sums[t] / ns[t] for t in sums}
            elif reducer == "REDUCE_SUM":
                out[key] = sums
            else:
                out[key] = {t: float(n) for t, n in ns.items()}
            continue
        by_time: dict[float, list[float]] = {}
        for series in members:
            for stamp, value in series.items():
                by_time.setdefault(stamp, []).append(value)
        out[key] = {stamp: _summary(reducer, values) for stamp, values in by_time.items()}
    return out


Arrays = tuple[np.ndarray, np.ndarray]  # end times, values
VECTOR_ALIGNERS = _ADDITIVE | {"ALIGN_MAX", "ALIGN_MIN", "ALIGN_NEXT_OLDER"}
VECTOR_REDUCERS = {"REDUCE_NONE", "REDUCE_MEAN", "REDUCE_SUM", "REDUCE_COUNT", "REDUCE_MAX", "REDUCE_MIN"}


def as_arrays(points: Sequence[Point], kind: str, aligner: str) -> Arrays:
    """A series' points (oldest first) as arrays, CUMULATIVE turned into deltas where the aligner needs them."""
    pts = to_deltas(points) if kind == "CUMULATIVE" and aligner in ("ALIGN_DELTA", "ALIGN_RATE") else points
    if not pts:
        return np.zeros(0), np.zeros(0)
    arr = np.asarray(pts, dtype=np.float64)
    return arr[:, 1], arr[:, 2]


def align_and_reduce(series: list[Arrays], groups: list[int], n_groups: int, aligner: str, reducer: str,
                     start: float, end: float, period: float) -> list[dict[float, float]]:
    """Align every series and reduce them into groups in one vectorized pass.

    groups[i] is series i's output group (with REDUCE_NONE, each series its own). Returns, per group,
    {bucket end time: value}. Aligners and reducers without a vectorized form take the plain path.
    """
    if aligner not in VECTOR_ALIGNERS or reducer not in VECTOR_REDUCERS:
        aligned = [align(list(zip(t, t, v, strict=False)), "GAUGE", aligner, start, end, period) for t, v in series]
        if reducer == "REDUCE_NONE":
            return aligned
        members: dict[tuple, list[dict[float, float]]] = {}
        for i, a in enumerate(aligned):
            members.setdefault((groups[i],), []).append(a)
        reduced = reduce(members, reducer)
        return [reduced.get((g,), {}) for g in range(n_groups)]
    stamps, values, mask = grid(series, groups, n_groups, aligner, reducer, start, end, period)
    return [dict(zip(stamps[m].tolist(), row[m].tolist(), strict=False)) for row, m in zip(values, mask, strict=False)]


def aligned_points(series: list[Arrays], groups: list[int], n_groups: int, aligner: str, reducer: str,
                   start: float, end: float, period: float, delta: bool) -> list[list[Point]]:
    """align_and_reduce's answer as each group's output points, newest first (DELTA points start a
    period before they end): what ListTimeSeries returns, without a dict per group."""
    if aligner not in VECTOR_ALIGNERS or reducer not in VECTOR_REDUCERS:
        return [_points(values, period, delta)
                for values in align_and_reduce(series, groups, n_groups, aligner, reducer, start, end, period)]
    stamps, values, mask = grid(series, groups, n_groups, aligner, reducer, start, end, period)
    begins = stamps - period if delta else stamps
    rows, cols = np.nonzero(mask)  # row-major: each group's buckets newest first (stamps fall with k)
    triples = list(zip(begins[cols].tolist(), stamps[cols].tolist(), values[rows, cols].tolist(), strict=False))
    bounds = np.searchsorted(rows, np.arange(n_groups + 1)).tolist()
    return [triples[bounds[g]:bounds[g + 1]] for g in range(n_groups)]


def _points(values: dict[float, float], period: float, delta: bool) -> list[Point]:
    return [((t - period) if delta else t, t, v) for t, v in sorted(values.items(), key=lambda kv: -kv[0])]


class Batches(NamedTuple):
    """Series given as batches that share their times: (series indexes, end times, values[row]) each;
    `n` series in all. What the made-up series come as: no array per series to make or join."""

    rows: list[tuple[np.ndarray, np.ndarray, np.ndarray]]
    n: int


class Flat(NamedTuple):
    """Series already joined: every point's end time, value and series index, and how many series (stored
    series kept joined between calls: reading.py)."""

    times: np.ndarray
    values: np.ndarray
    sid: np.ndarray
    n: int


def _flat(series: list[Arrays] | Batches | Flat) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Every point of every series: (end times, values, series index), and how many series."""
    if isinstance(series, Flat):
        return series.times, series.values, series.sid, series.n
    if not isinstance(series, Batches):
        n = len(series)
        if n == 0:
            return np.zeros(0), np.zeros(0), np.zeros(0, dtype=np.int64), 0
        lengths = np.fromiter((len(t) for t, _v in series), dtype=np.int64, count=n)
        return (np.concatenate([t for t, _v in series]), np.concatenate([v for _t, v in series]),
                np.repeat(np.arange(n, dtype=np.int64), lengths), n)
    parts = [(np.tile(t, len(idx)), v.reshape(-1), np.repeat(np.asarray(idx, dtype=np.int64), len(t)))
             for idx, t, v in series.rows]
    if not parts:
        return np.zeros(0), np.zeros(0), np.zeros(0, dtype=np.int64), series.n
    return (np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]),
            np.concatenate([p[2] for p in parts]), series.n)


def grid(series: list[Arrays] | Batches | Flat, groups: list[int], n_groups: int, aligner: str, reducer: str,
         start: float, end: float, period: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(bucket end times, newest first; values per output row and bucket; which are there), for the
    vectorized aligners and reducers."""
    count = bucket_count(start, end, period)
    stamps = end - np.arange(count) * period
    times, values, sid, n = _flat(series)
    if n == 0:
        return stamps, np.zeros((n_groups, count)), np.zeros((n_groups, count), dtype=bool)
    d = end - times
    k = np.floor(d / period).astype(np.int64)
    keep = (d >= 0) & (k < count)
    times, values, sid, k = times[keep], values[keep], sid[keep], k[keep]
    flat = sid * count + k
    size = n * count
    counts = np.bincount(flat, minlength=size)
    has = counts > 0
    if aligner in _ADDITIVE:
        sums = np.bincount(flat, weights=values, minlength=size)
        aligned = {"ALIGN_MEAN": np.divide(sums, counts, out=np.zeros(size), where=has),
                   "ALIGN_RATE": sums / period, "ALIGN_COUNT": counts.astype(np.float64)}.get(aligner, sums)
    elif aligner == "ALIGN_NEXT_OLDER":
        aligned = np.zeros(size)
        order = np.lexsort((times, flat))  # the newest point of each bucket is assigned last
        aligned[flat[order]] = values[order]
    else:
        aligned = np.full(size, -np.inf if aligner == "ALIGN_MAX" else np.inf)
        (np.maximum if aligner == "ALIGN_MAX" else np.minimum).at(aligned, flat, values)
    if reducer == "REDUCE_NONE":
        return stamps, aligned.reshape(n, count), has.reshape(n, count)
    gid = np.asarray(groups, dtype=np.int64)
    out_index = (gid[:, None] * count + np.arange(count)[None, :]).reshape(-1)[has]
    vals = aligned[has]
    out_size = n_groups * count
    out_counts = np.bincount(out_index, minlength=out_size)
    if reducer in ("REDUCE_MEAN", "REDUCE_SUM", "REDUCE_COUNT"):
        sums = np.bincount(out_index, weights=vals, minlength=out_size)
        result = {"REDUCE_MEAN": np.divide(sums, out_counts, out=np.zeros(out_size), where=out_counts > 0),
                  "REDUCE_COUNT": out_counts.astype(np.float64)}.get(reducer, sums)
    else:
        result = np.full(out_size, -np.inf if reducer == "REDUCE_MAX" else np.inf)
        (np.maximum if reducer == "REDUCE_MAX" else np.minimum).at(result, out_index, vals)
    return stamps, result.reshape(n_groups, count), (out_counts > 0).reshape(n_groups, count)


def series_field(series: dict, f: str) -> str | None:
    """A series header's value of a group-by field (resource.type, metric.labels.X, resource.labels.X)."""
    if f == "resource.type":
        return series["resource_type"]
    if f == "metric.type":
        return None
    if f.startswith("metric.labels."):
        return series["metric_labels"].get(f[len("metric.labels."):])
    if f.startswith("resource.labels."):
        return series["resource_labels"].get(f[len("resource.labels."):])
    return None


def with_points(head: dict, values: dict[float, float], period: float) -> dict:
    """An output series: its header and {bucket end: value} as points, newest first."""
    delta = head["kind"] == "DELTA"
    pts = [((t - period) if delta else t, t, v) for t, v in sorted(values.items(), key=lambda kv: -kv[0])]
    return {k: v for k, v in head.items() if k != "aligned"} | {"points": pts}


def headers(found: list[dict], aligner: str, reducer: str, group_by: list[str]) -> tuple[list[dict], list[int], int, list[int]]:
    """(output headers, each input series' output row, how many rows, the rows in answer order)."""
    heads = []
    for s in found:
        heads.append({**{k: v for k, v in s.items() if k not in ("points", "arrays")},
                      "kind": aligned_kind(aligner, s["kind"]),
                      "value_type": aligned_value_type(aligner, s["value_type"]),
                      "unit": f"{s['unit']}/s" if aligner == "ALIGN_RATE" and s["unit"] else s["unit"]})
    if reducer == "REDUCE_NONE":
        groups = list(range(len(found)))
    else:
        index: dict[tuple, int] = {}
        groups = [index.setdefault(tuple(series_field(h, f) for f in group_by), len(index)) for h in heads]
        firsts: dict[int, dict] = {}
        for g, h in zip(groups, heads, strict=False):
            firsts.setdefault(g, h)
        reduced = []
        for key, g in index.items():
            first = firsts[g]
            metric_labels = {f[len("metric.labels."):]: v for f, v in zip(group_by, key, strict=False)
                             if f.startswith("metric.labels.") and v is not None}
            resource_labels = {f[len("resource.labels."):]: v for f, v in zip(group_by, key, strict=False)
                               if f.startswith("resource.labels.") and v is not None}
            reduced.append({**first, "metric_labels": metric_labels, "resource_labels": resource_labels,
                            "value_type": reduced_value_type(reducer, first["value_type"])})
        heads = reduced
    order = sorted(range(len(heads)), key=lambda g: answer_order(heads[g]))
    return heads, groups, len(heads), order


def answer_order(series: dict) -> tuple:
    """ListTimeSeries' order: by resource labels, then metric labels."""
    return sorted(series["resource_labels"].items()), sorted(series["metric_labels"].items())
