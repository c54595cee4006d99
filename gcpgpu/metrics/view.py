"""The tail's view: one row per node (and per GPU), the cluster's total, stragglers, sparklines, n/a.

Pure: it turns what one refresh fetched into rows, and rows into a rich table or flat records for
JSON and CSV. A value nobody reported is None and shows as "n/a", never 0, and the hint saying
how to get it is collected once per snapshot.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from . import freshness
from . import nics as nicview
from .jobspan import JobSpan
from .query import JOB_KEY, Fetched
from .sources import HINTS, Metric
from .target import Target

STRAGGLER_SHARE = 0.8  # below 80% of the peers' median is "well below"
IDLE_GPU_PCT = 5.0  # GPUs this quiet run no job: such a node is idle, never a straggler
IDLE_NET_GBPS = 0.1  # a cluster moving less than this per node is not training: no network stragglers
IDLE_FABRIC_GBPS = 0.01  # the same floor on the GPU fabric's own counters (an idle node's NICs: ~0.0003)
SPARK = "▁▂▃▄▅▆▇█"
DCGM_KEYS = ("sm_active_pct", "tensor_active_pct", "nvlink_gbytes_per_s", "pcie_gbytes_per_s")
# Flat record fields, in column order (JSON and CSV carry all of them).
FIELDS = (
    "kind", "name", "rank", "gpu", "net_sent_gbps", "net_recv_gbps", "link_share_pct", "packets_sent_per_s",
    "packets_recv_per_s", "gpu_util_pct", "gpu_mem_pct", "sm_active_pct", "tensor_active_pct", "nvlink_gbytes_per_s",
    "pcie_gbytes_per_s", "tokens_per_s", "mfu", "fabric_sent_gbps", "fabric_recv_gbps", "host_sent_gbps",
    "host_recv_gbps", "cnp_per_s", "retrans_per_s", "slowest_nic", "straggler", "straggler_reasons", "note",
)  # fmt: skip
_SUMMED = {"net_sent_gbps", "net_recv_gbps", "packets_sent_per_s", "packets_recv_per_s", "nvlink_gbytes_per_s",
           "pcie_gbytes_per_s", "gpu_mem_bytes", "gpu_mem_free_bytes", *nicview.KEYS}


@dataclass
class Row:
    kind: str  # node | gpu | nic | total
    name: str
    rank: int | None = None
    gpu: int | None = None
    values: dict[str, float | None] = field(default_factory=dict)
    history: list[float | None] = field(default_factory=list)
    history_of: str = ""
    straggler: list[str] = field(default_factory=list)  # why, e.g. "GPU 47% vs median 94%"
    held: dict[str, str] = field(default_factory=dict)  # field -> why its value is not shown as live (freshness)
    note: str = ""  # the first of those reasons, for the STATUS column
    unmeasured: dict[str, str] = field(default_factory=dict)  # field -> why this family has no such number


@dataclass
class Snapshot:
    target: Target
    time: float
    rows: list[Row]
    dcgm: bool  # whether any node reports DCGM profiling (else its columns are left out)
    missing: dict[str, list[str]]  # source -> rows without it
    calls: int = 0
    seconds: float = 0.0
    job: JobSpan | None = None  # the job watched (metrics tail --job), when its state is known
    hidden: int = 0  # nodes left out of a big cluster's rows (focus.py; --all shows them)

    @property
    def stragglers(self) -> list[str]:
        return [r.name for r in self.rows if r.straggler]

    def hints(self) -> list[str]:
        """One line per missing source: what is n/a and how to enable it."""
        out = []
        flag = f"--{self.target.kind} {self.target.name}"
        for source, names in self.missing.items():
            if not names or (source == "dcgm" and not self.dcgm and self.target.kind != "cluster"):
                continue
            where = "" if source == "trainer" else (
                f" (n/a on {', '.join(names[:4])}{', ...' if len(names) > 4 else ''})")
            out.append(f"hint{where}: {HINTS[source].format(flag=flag)}")
        return out


def _combine(values: list[float], summed: bool) -> float | None:
    return None if not values else sum(values) if summed else statistics.fmean(values)


def _by_time(series: Iterable[list[tuple[float, float]]], summed: bool) -> list[tuple[float, float]]:
    """Several series (e.g. a node's GPUs) joined into one, per timestamp, the way the reducer would."""
    buckets: dict[float, list[float]] = {}
    for pts in series:
        for t, v in pts:
            buckets.setdefault(t, []).append(v)
    return [(t, _combine(vs, summed)) for t, vs in buckets.items()]  # type: ignore[misc]


def _history(points: list[tuple[float, float]] | None, fetched: Fetched) -> list[float | None]:
    w = fetched.window
    stamps = [w.end - k * w.period for k in range(int(round((w.end - w.start) / w.period)) - 1, -1, -1)]
    have = {round(t): v for t, v in points or []}
    return [have.get(round(t)) for t in stamps]


def build(target: Target, fetched: Fetched, metrics: Sequence[Metric], per_gpu: bool = False,
          now: float | None = None, job: JobSpan | None = None,
          gpu_reference: str | Sequence[Row] = "gpus", per_nic: bool = False) -> Snapshot:
    """Rows for every member (and GPU), a total row, stragglers marked, and what is missing.

    gpu_reference "nodes": GPU rows are compared with the nodes' median, as when only some nodes'
    GPUs were fetched and their own median would be the slow ones'; or with these node rows' median
    (focus.py: the GPU rows of the nodes shown, against every node of the cluster).

    Values that are not live (freshness.py: before the watched job started, a silent trainer's) are held
    back: None, with the reason in the row's note; an ended job's last numbers are shown, said so.

    The network columns of a cluster's nodes come from their NICs' own counters (metrics/nics.py): GPU fabric
    apart from host NICs, stragglers judged on the fabric; per_nic adds a row per NIC under each node."""
    data = freshness.of_run(fetched.data, fetched.window.period, job)
    by_key = {m.key: m for m in metrics}
    # Members: discovered VMs, plus Vertex tasks (or late VMs) that appear only in the data.
    for metric in metrics:
        if not metric.job_level and not metric.per_nic:
            for key, _gpu in data.get(metric.key, {}):
                target.member(key)
    machine = target.machine
    gpus_per_node = machine.gpu_count if machine else None
    gpu_bytes = machine.gpu.memory_gib * 2**30 if machine else None
    none_here = {"nvlink_gbytes_per_s"} if gpus_per_node is not None and gpus_per_node < 2 else set()  # no peer GPU
    nic_data = nicview.index(data) if any(m.per_nic for m in metrics) else None
    not_here = nicview.unmeasured(machine) if nic_data is not None else {}

    # Per-GPU series indexed by node once, so a 64-node --gpus view is not 64 scans of 512 series.
    per_gpu_series: dict[tuple[str, str], list[list[tuple[float, float]]]] = {}
    for metric in metrics:
        for (k, g), pts in data.get(metric.key, {}).items() if not metric.per_nic else ():
            if g is not None:
                per_gpu_series.setdefault((metric.key, k), []).append(pts)

    def series(metric: Metric, member_key: str) -> list[tuple[float, float]] | None:
        rows = data.get(metric.key, {})
        if (member_key, None) in rows:
            return rows[(member_key, None)]
        per = per_gpu_series.get((metric.key, member_key))
        return _by_time(per, metric.key in _SUMMED) if per else None

    node_rows: list[Row] = []
    gpu_rows: dict[str, list[Row]] = {}
    missing: dict[str, list[str]] = {}
    for member in sorted(target.members, key=lambda m: (m.rank is None, m.rank or 0, m.name)):
        row = Row("node", member.name, member.rank)
        hist: dict[str, list[tuple[float, float]] | None] = {}
        for metric in metrics:
            if metric.job_level or metric.per_nic:
                continue
            pts = series(metric, member.key)
            hist[metric.key] = pts
            row.values[metric.key] = freshness.shown(pts, job)
        own = nic_data.get(member.key, {}) if nic_data is not None else {}
        row.values.update(nicview.node_values(own, machine))
        row.unmeasured = dict(not_here)
        for metric in metrics:
            absent = (not own) if metric.per_nic else row.values.get(metric.key) is None
            if not metric.job_level and absent and metric.key not in none_here:
                names = missing.setdefault(metric.source, [])
                if member.name not in names:
                    names.append(member.name)
        _hold(row, hist, fetched.window.period, job)
        _derive(row.values, machine, gpus_per_node, gpu_bytes)
        row.history_of, row.history = _pick_history(hist, fetched)
        node_rows.append(row)
        if per_nic:
            gpu_rows.setdefault(member.name, []).extend(
                Row("nic", f"{member.name}/{nic}", member.rank, values={**v, "role": role},  # type: ignore[dict-item]
                    unmeasured=dict(not_here)) for nic, role, v in nicview.nic_rows(own))
        if per_gpu:
            gpu_rows.setdefault(member.name, []).extend(_gpu_rows(member.key, member.name, member.rank, data, metrics,
                                                                  fetched, gpu_bytes, job))

    # Stragglers on the network: the GPU fabric's own counters where the nodes report them, else Compute's.
    fabric = nicview.judge(node_rows, STRAGGLER_SHARE, IDLE_FABRIC_GBPS)
    _mark(node_rows, network=not fabric)
    all_gpus = [g for rows in gpu_rows.values() for g in rows if g.kind == "gpu"]
    _mark(all_gpus, node_rows if gpu_reference == "nodes" else None if gpu_reference == "gpus" else gpu_reference)

    total = Row("total", f"{target.kind} {target.name}")
    for metric in metrics:
        if metric.job_level:
            total.values[metric.key] = freshness.shown(data.get(metric.key, {}).get(JOB_KEY), job)
    for key in ("net_sent_gbps", "net_recv_gbps", "packets_sent_per_s", "packets_recv_per_s", "gpu_util_pct",
                "gpu_mem_pct", "sm_active_pct", "tensor_active_pct", "nvlink_gbytes_per_s", "pcie_gbytes_per_s",
                "link_share_pct", *nicview.KEYS):
        vals = [r.values[key] for r in node_rows if r.values.get(key) is not None]
        total.values[key] = _combine(vals, key in _SUMMED)  # type: ignore[arg-type]
        held = next((r.held[key] for r in node_rows if key in r.held), None)
        if total.values[key] is None and held:
            total.held[key] = held
    tokens = data.get("tokens_per_s", {}).get(JOB_KEY)
    if tokens:
        total.history_of, total.history = "tokens_per_s", _history(tokens, fetched)
    else:
        total.history_of = node_rows[0].history_of if node_rows else ""
        cols = [r.history for r in node_rows if r.history_of == total.history_of]
        total.history = [(_combine([c[i] for c in cols if c[i] is not None], total.history_of in _SUMMED)
                          if cols else None) for i in range(len(cols[0]) if cols else 0)]
    if "tokens_per_s" in by_key and total.values.get("tokens_per_s") is None:
        missing["trainer"] = [total.name]
    _hold_trainer(total, fetched.data, [m for m in metrics if m.job_level], fetched.window.period,
                  fetched.window.end if now is None else now, job)

    rows: list[Row] = []
    for row in node_rows:
        rows.append(row)
        rows.extend(gpu_rows.get(row.name, []))
    rows.append(total)
    dcgm = any(r.values.get(k) is not None for r in node_rows for k in DCGM_KEYS)
    return Snapshot(target, fetched.window.end if now is None else now, rows, dcgm, missing, fetched.calls,
                    fetched.seconds, job)


# Derived fields follow what they are made of.
_DERIVED = {"net_sent_gbps": ("link_share_pct",), "net_recv_gbps": ("link_share_pct",),
            "gpu_mem_bytes": ("gpu_mem_pct",)}


def _hold(row: Row, hist: dict[str, list[tuple[float, float]] | None], period: float, job: JobSpan | None) -> None:
    """Hold back the row's values whose newest point is not live for the watched job (freshness.node_value)."""
    if job is None:
        return
    for key, pts in hist.items():
        if not pts or row.values.get(key) is None:
            continue
        t = max(pts)[0]
        reason = freshness.node_value(t, period, job)
        if reason and freshness.held(reason):
            row.values[key] = None
            for held in (key, *_DERIVED.get(key, ())):
                row.held[held] = reason
        if reason:
            row.note = row.note or freshness.note(reason, t, job)


def _hold_trainer(total: Row, data: dict, metrics: Sequence[Metric], period: float, now: float,
                  job: JobSpan | None) -> None:
    """Hold back the trainer's numbers when they are not live (freshness.trainer_value), saying what they were
    (an ended job's are shown, as its last). `data`: all the window's points, before and after the job's."""
    newest = {m.key: max(pts) for m in metrics if (pts := data.get(m.key, {}).get(JOB_KEY))}
    if not newest:
        return
    t = max(p[0] for p in newest.values())
    reason = freshness.trainer_value(t, period, now, job)
    if not reason or not freshness.held(reason):  # live, or an ended job's last numbers (said so)
        total.note = freshness.note(reason, t, job) if reason else total.note
        return
    last = ", ".join(f"{_cell(total.values.get(k), fmt)} {label}" for k, label, fmt in
                     (("tokens_per_s", "tok/s", "human"), ("mfu", "MFU", "ratio")) if total.values.get(k) is not None)
    for metric in metrics:  # all of the trainer's columns, also one whose last point fell out of the window
        total.values[metric.key] = None
        total.held[metric.key] = reason
    total.note = freshness.note(reason, t, job, last, now)


def _derive(values: dict[str, float | None], machine: Any, gpus: int | None, gpu_bytes: float | None) -> None:
    sent, recv = values.get("net_sent_gbps"), values.get("net_recv_gbps")
    if machine is not None and (sent is not None or recv is not None):
        values["link_share_pct"] = max(v for v in (sent, recv) if v is not None) / machine.max_net_gbps * 100
    else:
        values.setdefault("link_share_pct", None)
    if "gpu_mem_bytes" in values:
        values["gpu_mem_pct"] = memory_pct(values.pop("gpu_mem_bytes"), values.pop("gpu_mem_free_bytes", None),
                                           gpu_bytes * (gpus or 1) if gpu_bytes else None)


def memory_pct(used: float | None, free: float | None, total: float | None) -> float | None:
    """GPU memory used, in percent: used / (used + free) as the agent reports both, else of the catalog's total."""
    if used is None:
        return None
    if free is not None and used + free > 0:
        return used / (used + free) * 100
    return used / total * 100 if total else None


def _gpu_rows(key: str, node: str, rank: int | None, data: dict, metrics: Sequence[Metric], fetched: Fetched,
              gpu_bytes: float | None, job: JobSpan | None = None) -> list[Row]:
    gpus = sorted({g for m in metrics if m.per_gpu for g in _gpus_of(data.get(m.key, {}), key)},
                  key=lambda g: int(g) if g.isdigit() else 0)
    out = []
    for g in gpus:
        row = Row("gpu", f"{node}/gpu{g}", rank, int(g) if g.isdigit() else None)
        hist = {}
        for metric in metrics:
            if metric.per_gpu:
                pts = data.get(metric.key, {}).get((key, g))
                hist[metric.key] = pts
                row.values[metric.key] = freshness.shown(pts, job)
        _hold(row, hist, fetched.window.period, job)
        _derive(row.values, None, 1, gpu_bytes)
        row.history_of, row.history = _pick_history(hist, fetched)
        out.append(row)
    return out


def _gpus_of(rows: dict, key: str) -> list[str]:
    # Probing the 16 possible GPU numbers beats scanning every (node, GPU) key of a big cluster.
    return [str(g) for g in range(16) if (key, str(g)) in rows]


def _pick_history(hist: dict[str, list[tuple[float, float]] | None], fetched: Fetched) -> tuple[str, list[float | None]]:
    if hist.get("gpu_util_pct"):
        return "gpu_util_pct", _history(hist["gpu_util_pct"], fetched)
    sent, recv = hist.get("net_sent_gbps") or [], hist.get("net_recv_gbps") or []
    if sent or recv:
        return "net_gbps", _history(_by_time([sent, recv], True), fetched)
    return "", _history(None, fetched)


def _mark(rows: list[Row], reference: list[Row] | None = None, network: bool = True) -> None:
    """Flag rows well below the median of their peers (or of `reference`'s) on GPU utilization or network
    throughput."""
    checks = (
        ("gpu_util_pct", "GPU", lambda v: f"{v:.0f}%"),
        *((("net_gbps", "network", lambda v: f"{v:.1f} Gbit/s"),) if network else ()),
    )
    # A node no job runs on is idle, not slow: compared with nothing. Below a floor there is nothing to compare.
    idle = {id(r) for r in rows if (r.values.get("gpu_util_pct") is not None and r.values["gpu_util_pct"] < IDLE_GPU_PCT)}
    for key, label, fmt in checks:
        vals = {}
        for r in rows:
            if id(r) in idle:
                continue
            if key == "net_gbps":
                parts = [r.values.get("net_sent_gbps"), r.values.get("net_recv_gbps")]
                v = sum(p for p in parts if p is not None) if any(p is not None for p in parts) else None
            else:
                v = r.values.get(key)
            if v is not None:
                vals[id(r)] = v
        ref = vals
        if reference is not None:
            ref = {id(r): r.values[key] for r in reference
                   if key in r.values and r.values[key] is not None and r.values[key] >= IDLE_GPU_PCT}
        if len(vals) < 2 and reference is None or not ref:
            continue
        median = statistics.median(ref.values())
        if median <= (IDLE_NET_GBPS if key == "net_gbps" else 0):
            continue
        for r in rows:
            v = vals.get(id(r))
            if v is not None and v < STRAGGLER_SHARE * median:
                r.straggler.append(f"{label} {fmt(v)} vs median {fmt(median)}")


# ---------------------------------------------------------------------------- cells
def _human(v: float) -> str:
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(v) >= size:
            return f"{v / size:.1f}{unit}"
    return f"{v:.0f}"

def _cell(v: float | None, fmt: str) -> str:
    if v is None:
        return "n/a"
    if fmt == "pct":
        return f"{v:.0f}%"
    if fmt == "ratio":
        return f"{v * 100:.1f}%"
    if fmt == "human":
        return _human(v)
    return f"{v:{fmt}}"
