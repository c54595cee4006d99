"""ListTimeSeries over the backend's state: the series a filter matches (written and made-up), aligned
and reduced as the request's `aggregation` asks, one page at a time.

The made-up series of a cluster's VMs are kept between calls while the VMs, what runs on them and
the knobs stay the same, and sampled in batches that share their times (synthetic.py); aligned and
reduced in one numpy pass (aggregate.grid), the answer stays columns (columns.py) until a front end
writes it out. So a 1,024-node, 8,192-GPU query costs a few milliseconds, not a dict per series.
"""

from __future__ import annotations

import copy
import json
import threading
from typing import Any

import numpy as np

from ..core import ApiError
from . import aggregate, filters
from .catalog import BUILTIN
from .columns import Columns
from .paging import invalid_argument, page

MAX_PAGE = 100_000
MIN_ALIGNMENT_S = 60.0
SYNTHETIC_CACHE = 64  # metric types x filters whose made-up series are kept between calls


class ReadingMixin:
    """ListTimeSeries for MonitoringBackend (its state: series, knobs, the caches below, _lock)."""

    series: dict
    knobs: Any
    faults: Any
    clock: Any
    _lock: Any
    _synthetic: dict[tuple, tuple]  # see _matching
    _heads: dict[tuple, tuple]  # see _aggregate
    _made: int
    series_version: int
    points_version: int
    _stored_matches: dict[tuple, tuple]
    _stored_arrays: dict[int, tuple]

    def _parse(self, flt: str) -> filters.Node:
        try:
            return filters.parse(flt)
        except filters.FilterError as e:
            raise invalid_argument(f"Field filter had an invalid value of \"{flt}\": {e}") from e

    def _descriptor(self, project: str, metric_type: str) -> dict | None:
        raise NotImplementedError

    def _vms(self, project: str, ids: set[str] | None = None) -> list:
        raise NotImplementedError

    def _vertex_jobs(self, project: str) -> dict[str, dict]:
        raise NotImplementedError

    def list_time_series(
        self,
        project: str,
        flt: str,
        start: float,
        end: float,
        aggregation: dict | None = None,
        headers_only: bool = False,
        page_size: int = 0,
        page_token: str = "",
    ) -> tuple[list[dict] | Columns, str]:
        """ListTimeSeries: the matching series over [start, end], aligned and reduced as asked; one page.

        The page is a list of series dicts, or a Columns answer that reads as one."""
        node = self._parse(flt)
        types = filters.equal_literal(node, "metric.type")
        if len(set(types)) != 1:
            raise invalid_argument("A ListTimeSeries filter must specify exactly one metric type, e.g. "
                                   'metric.type = "compute.googleapis.com/instance/cpu/utilization".')
        mtype = types[0]
        if end <= 0:
            raise invalid_argument("Field interval.endTime is required.")
        if start <= 0:
            start = end
        if start > end:
            raise invalid_argument("Field interval.startTime must not be later than interval.endTime.")
        agg = aggregation or {}
        aligner = agg.get("aligner") or "ALIGN_NONE"
        reducer = agg.get("reducer") or "REDUCE_NONE"
        period = float(agg.get("period") or 0)
        group_by = [self._group_field(f) for f in agg.get("group_by") or []]
        desc = self._descriptor(project, mtype)
        if desc is None and not self._stored_of(project, mtype):
            # As the real API answers for a metric type the project has never had.
            raise ApiError(404, "notFound", f'Cannot find metric(s) that match type = "{mtype}".')
        if aligner != "ALIGN_NONE":
            if period <= 0:
                raise invalid_argument("The alignment period must be given when a per-series aligner is.")
            if period < MIN_ALIGNMENT_S:
                raise invalid_argument(f"The alignment period must be at least {MIN_ALIGNMENT_S:g} seconds.")
            if aligner not in aggregate.ALIGNER_KINDS:
                raise invalid_argument(f"The emulator does not support the aligner {aligner}.")
        if reducer != "REDUCE_NONE":
            if aligner == "ALIGN_NONE":
                raise invalid_argument("A cross-series reducer needs a per-series aligner (and an alignment period).")
            if reducer not in aggregate.REDUCERS:
                raise invalid_argument(f"The emulator does not support the reducer {reducer}.")

        found, token, batches = self._matching(project, mtype, node, start, end, flt)
        if aligner != "ALIGN_NONE":
            kind = found[0]["kind"] if found else (desc or {}).get("metricKind", "GAUGE")
            allowed = aggregate.ALIGNER_KINDS[aligner]
            if kind not in allowed:
                raise invalid_argument(f"The aligner {aligner} is not valid for metrics of kind {kind} ({mtype}); "
                                       f"it needs {' or '.join(allowed)}.")
        result = self._aggregate(found, batches, aligner, reducer, period, group_by, start, end, token)  # in order
        if not isinstance(result, Columns):  # (a Columns answer leaves out series without points itself)
            result = [r for r in result if r["points"]]  # series without points in the interval are not returned
        if headers_only:
            result = [{**r, "points": []} for r in result]
        return page(result, min(page_size or MAX_PAGE, MAX_PAGE), page_token,
                    ("series", project, flt, start, end, json.dumps(agg, sort_keys=True), headers_only))

    @staticmethod
    def _group_field(name: str) -> str:
        if name in ("metric.type", "resource.type"):
            return name
        # The shorthand Google's samples use: "resource.zone" is "resource.labels.zone", "metric.x" likewise.
        for prefix in ("resource.", "metric."):
            rest = name[len(prefix):]
            if name.startswith(prefix) and rest and "." not in rest and rest not in ("labels", "label"):
                return f"{prefix}labels.{rest}"
        try:
            return filters.normalize_selector(name)
        except filters.FilterError as e:
            raise invalid_argument(f"Field aggregation.groupByFields had an invalid value {name!r}: {e}") from e

    def _matching(self, project: str, mtype: str, node: filters.Node, start: float, end: float,
                  flt: str = "") -> tuple[list[dict], tuple | None, list | None]:
        """The series matching, with their points in [start, end]; a token naming the kept made-up
        series when they are all there is (so _aggregate may keep their headers too); and then their
        samples as batches (the series dicts carry no points), else None (each dict carries its own)."""
        out, version = self._stored_matching(project, mtype, node, flt, start, end)
        if mtype not in BUILTIN:  # nothing is made up of a user's own metric types: the stored series are all
            return out, ("stored", project, mtype, flt or repr(node), version), None
        with self._lock:
            knobs = copy.deepcopy(self.knobs)
        if not knobs.enabled:
            return out, None, None
        if mtype.startswith("ml.googleapis.com/"):
            knobs.jobs = {**self._vertex_jobs(project), **knobs.jobs}
        # Only VMs the filter can match are generated: a filter on instance ids skips the rest.
        ids = filters.allowed_values(node, "resource.labels.instance_id")
        vms = self._vms(project, None if ids is None else set(ids))
        # The series a filter keeps stay the same from one refresh to the next while the VMs, what runs
        # on them and the knobs do: made and matched once (8,192 headers for 1,024 A3 nodes), sampled
        # each time over the interval asked. The entry is kept with the VMs it was made for and used
        # only while they are equal (one list comparison, not a key built over every VM each call).
        key = (project, mtype, flt or repr(node), self.faults.seed, repr(knobs))
        with self._lock:
            entry = self._synthetic.get(key)
        if entry is None or entry[0] != vms:
            entry = self._make(key, project, mtype, node, knobs, vms)
        _vms, gen, kept, plan, heads, sampling, serial = entry
        with sampling:  # the generator's clock and time cache are this call's while it samples
            gen.now = self.clock.now()
            gen._time_cache.clear()
            batches = gen.sample_batches(kept, start, end, plan)
        # The token stands for exactly these series: only when nothing stored matched and every kept
        # series has points (a series without any in [start, end] is left out, which changes the set).
        if not out and all(len(t) for _i, _s, t, _v in batches):
            return heads, (key, serial), batches
        return out + _with_arrays(heads, batches), None, None

    def _stored_of(self, project: str, mtype: str) -> list:
        """The stored series of one metric type (kept per type while no series is added)."""
        with self._lock:
            key = ("type", project, mtype)
            kept = self._stored_matches.get(key)
            if kept is None or kept[0] != self.series_version:
                kept = (self.series_version, [s for s in self.series.values()
                                              if s.project == project and s.metric_type == mtype])
                self._stored_matches[key] = kept
            return kept[1]

    def _stored_matching(self, project: str, mtype: str, node: filters.Node, flt: str, start: float,
                         end: float) -> tuple[list[dict], tuple[int, int]]:
        """The stored series the filter matches, with their points in [start, end], and the version of the
        series they were matched in. Matched once per filter while no series is added; a GAUGE series' points
        are kept as arrays (until it gets more) and cut to the interval by binary search."""
        import bisect

        with self._lock:
            version = self.series_version
            seen = (version, self.points_version)
            key = ("match", project, mtype, flt or repr(node))
            kept = self._stored_matches.get(key)
            if kept is None or kept[0] != version:
                matched = [s for s in self._stored_of(project, mtype)
                           if filters.matcher(node, project=project, metric_type=mtype, metric_labels=s.metric_labels,
                                              resource_type=s.resource_type, resource_labels=s.resource_labels)]
                kept = (version, matched)
                self._stored_matches[key] = kept
            answer = self._stored_matches.get(("found", *key))
            if answer is not None and answer[0] == seen:
                return answer[1], seen  # the same series with the same points as the last call
            out: list[dict] = []
            for s in kept[1]:
                head = {"metric_labels": s.metric_labels, "resource_type": s.resource_type,
                        "resource_labels": s.resource_labels, "kind": s.kind, "value_type": s.value_type,
                        "unit": s.unit}
                if s.kind != "GAUGE":
                    lo = bisect.bisect_left(s.points, start, key=lambda p: p[1])
                    hi = bisect.bisect_right(s.points, end, key=lambda p: p[1])
                    out.append({**head, "points": s.points[lo:hi]})
                    continue
                arrays = self._stored_arrays.get(id(s))
                if arrays is None or arrays[0] is not s or arrays[1] != len(s.points):
                    arr = np.asarray(s.points, dtype=np.float64).reshape(-1, 3)
                    arrays = (s, len(s.points), arr[:, 1].copy(), arr[:, 2].copy())
                    self._stored_arrays[id(s)] = arrays
                # Every point: the aligners keep those in [start, end] (ALIGN_NONE cuts them, _aggregate).
                out.append({**head, "arrays": (arrays[2], arrays[2], arrays[3])})
            if all("arrays" in f for f in out):  # GAUGE points as arrays, cut by the caller: reusable as they are
                self._stored_matches[("found", *key)] = (seen, out)
            return out, seen

    def _stored_flat(self, token: tuple, found: list[dict]) -> Any:
        """The matched GAUGE series' points joined once (aggregate.Flat), kept while none of them grows."""
        if not found or any("arrays" not in s for s in found):
            return None
        with self._lock:  # the token names the series and points they were read at (_stored_matching)
            kept = self._stored_matches.get(("flat", *token))
            if kept is not None and kept[0] == len(found):
                return kept[1]
        lengths = np.fromiter((len(s["arrays"][1]) for s in found), dtype=np.int64, count=len(found))
        flat = aggregate.Flat(np.concatenate([s["arrays"][1] for s in found]),
                              np.concatenate([s["arrays"][2] for s in found]),
                              np.repeat(np.arange(len(found), dtype=np.int64), lengths), len(found))
        with self._lock:
            if len(self._stored_matches) > 4 * SYNTHETIC_CACHE:  # old versions' entries must not pile up
                self._stored_matches.clear()
            self._stored_matches[("flat", *token)] = (len(found), flat)
        return flat

    def _make(self, key: tuple, project: str, mtype: str, node: filters.Node, knobs: Any, vms: list) -> tuple:
        """A kept entry: the VMs, the generator, the series the filter keeps, how they are sampled
        together, their headers, a lock for sampling and a serial number."""
        from .synthetic import Generator

        builtin = BUILTIN.get(mtype)  # made-up series are of built-in metric types only
        gen = Generator(self.faults.seed, knobs, self.clock.now())
        kept = [syn for syn in [*gen.for_vms(mtype, vms), *gen.for_jobs(mtype, project)]
                if filters.matcher(node, project=project, metric_type=mtype, metric_labels=syn.metric_labels,
                                   resource_type=syn.resource_type, resource_labels=syn.resource_labels,
                                   user_labels=syn.user_labels, system_labels=syn.system_labels)]
        heads = [{"metric_labels": syn.metric_labels, "resource_type": syn.resource_type,
                  "resource_labels": syn.resource_labels, "kind": builtin.kind, "value_type": builtin.value_type,
                  "unit": builtin.unit} for syn in kept if builtin is not None]
        with self._lock:
            self._made += 1
            entry = (vms, gen, kept, gen.plan(kept), heads, threading.Lock(), self._made)
            if len(self._synthetic) >= SYNTHETIC_CACHE and key not in self._synthetic:
                self._synthetic.pop(next(iter(self._synthetic)))
            self._synthetic[key] = entry
        return entry

    def _aggregate(self, found: list[dict], batches: list | None, aligner: str, reducer: str, period: float,
                   group_by: list[str], start: float, end: float, token: tuple | None = None) -> list[dict] | Columns:
        """The series as asked, in the order ListTimeSeries returns them (by resource, then metric labels)."""
        if batches is not None and (aligner == "ALIGN_NONE" or aligner not in aggregate.VECTOR_ALIGNERS
                                    or reducer not in aggregate.VECTOR_REDUCERS):
            found = _with_arrays(found, batches)  # each series on its own: give each its samples
            batches = None
        if aligner == "ALIGN_NONE":
            # Raw points, newest first, as the API returns them.
            out = []
            for s in found:
                pts = s.get("points")
                if pts is None:
                    pts = [p for p in zip(*(a.tolist() for a in s["arrays"]), strict=False) if start <= p[1] <= end]
                out.append({**s, "points": sorted(pts, key=lambda p: -p[1])})
            out.sort(key=aggregate.answer_order)
            return out
        # Headers, groups and their order depend on the series, not on their points: for kept made-up
        # series (token) they are worked out once per aggregation asked, not for 8,192 series every call.
        memo_key = (token, aligner, reducer, tuple(group_by)) if token is not None else None
        memo = self._heads.get(memo_key) if memo_key is not None else None
        if memo is None:
            memo = (*aggregate.headers(found, aligner, reducer, group_by), {})
            if memo_key is not None:
                with self._lock:
                    if len(self._heads) >= SYNTHETIC_CACHE:
                        self._heads.pop(next(iter(self._heads)))
                    self._heads[memo_key] = memo
        heads, groups, n_groups, order, encoded = memo
        flat = self._stored_flat(token, found) if token is not None and token[0] == "stored" else None
        if batches is not None:
            series: Any = aggregate.Batches([(indexes, t, values) for indexes, _s, t, values in batches], len(found))
        elif flat is not None:
            series = flat
        else:
            series = [(s["arrays"][1], s["arrays"][2]) if "arrays" in s
                      else aggregate.as_arrays(s["points"], s["kind"], aligner) for s in found]
        deltas = {h["kind"] == "DELTA" for h in heads}  # a DELTA point starts a period before it ends
        if len(deltas) <= 1 and aligner in aggregate.VECTOR_ALIGNERS and reducer in aggregate.VECTOR_REDUCERS:
            stamps, values, mask = aggregate.grid(series, groups, n_groups, aligner, reducer, start, end, period)
            return Columns(heads, order, stamps, values, mask, period, deltas == {True}, encoded)
        if len(deltas) <= 1:
            points = aggregate.aligned_points(series, groups, n_groups, aligner, reducer, start, end, period,
                                              deltas == {True})
        else:  # NEXT_OLDER over DELTA and other kinds at once: each output's own kind says how it is stamped
            points = [aggregate.with_points(h, v, period)["points"] for h, v in zip(heads, aggregate.align_and_reduce(
                series, groups, n_groups, aligner, reducer, start, end, period), strict=False)]
        return [{**heads[g], "points": points[g]} for g in order]


def _with_arrays(heads: list[dict], batches: list) -> list[dict]:
    """Kept series' headers with each one's own samples, in their order, those without any left out
    (for the paths that take series one by one)."""
    samples: list[Any] = [None] * len(heads)
    for indexes, s0, t, values in batches:
        if len(t):
            for row, i in enumerate(indexes.tolist()):
                samples[i] = (s0, t, values[row])
    return [{**head, "arrays": got} for head, got in zip(heads, samples, strict=True) if got is not None]
