"""A big cluster's tail: the worst nodes and GPUs and every straggler, not 1,024 or 8,192 rows.

Over FOCUS_OVER nodes (and unless --all), one refresh is two rounds of calls, each a fixed number:
  1. every column per node, reduced server-side (cross-series reducers grouped by instance), and
     GPU utilization reduced with REDUCE_MIN per instance: each node's worst GPU, so a single slow
     GPU shows without fetching 8,192 series;
  2. with --gpus, the per-GPU columns for the nodes shown only (a one_of filter on their ids).
The nodes shown: every straggler, every node whose worst GPU is well below the GPUs' median, and
the WORST nodes with the lowest GPU utilization (network throughput where no GPU reports).
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Sequence
from typing import Any

from .query import Fetched, Window, fetch
from .sources import AGENT, Metric
from .target import Target
from .view import IDLE_GPU_PCT, STRAGGLER_SHARE, Snapshot, build

FOCUS_OVER = 64  # nodes; up to this many, every row is shown
WORST = 8
# Each node's worst GPU: the mean per GPU over each minute, then the minimum over the node's GPUs.
WORST_GPU = Metric("worst_gpu_util_pct", "worst GPU utilization", AGENT + "utilization", "ops_agent", "ALIGN_MEAN",
                   "REDUCE_MIN", 1.0, "%")


def focused(target: Target, all_rows: bool) -> bool:
    return not all_rows and target.kind == "cluster" and len(target.members) > FOCUS_OVER


def refresh(clients: Any, target: Target, metrics: Sequence[Metric], window: Window, per_gpu: bool,
            now: float, job: Any, per_nic: bool = False) -> Snapshot:
    """One focused refresh (see the module's docstring): a Snapshot of the rows worth showing."""
    fetched = fetch(clients, target, [*metrics, WORST_GPU], window, False, latest_only=True)
    nodes = build(target, fetched, metrics, False, now=now, job=job, per_nic=per_nic)
    keep = pick(nodes, fetched, target)
    snap = nodes
    if per_gpu:
        # The shown nodes' GPU rows, from their per-GPU columns, compared with every node's median;
        # node rows, stragglers among nodes and the total stay those of all nodes (round 1).
        shown = dataclasses.replace(target, members=[m for m in target.members if m.name in keep])
        detail = fetch(clients, shown, [m for m in metrics if m.per_gpu], window, True, latest_only=True)
        node_rows = [r for r in nodes.rows if r.kind == "node"]
        gpus = build(shown, detail, metrics, True, now=now, job=job, gpu_reference=node_rows)
        by_node: dict[str, list[Any]] = {}
        for row in gpus.rows:
            if row.kind == "gpu":
                by_node.setdefault(row.name.rsplit("/", 1)[0], []).append(row)
        for row in nodes.rows:  # --nics: each node's NIC rows stay under it, before its GPUs
            if row.kind == "nic":
                by_node.setdefault(row.name.rsplit("/", 1)[0], []).insert(0, row)
        snap = dataclasses.replace(nodes, rows=[g for r in nodes.rows if r.kind != "nic"
                                                for g in [r, *by_node.get(r.name, [])]],
                                   calls=nodes.calls + detail.calls, seconds=nodes.seconds + detail.seconds)
    node_count = sum(r.kind == "node" for r in snap.rows)
    shown_nodes: set[str] = set()
    rows = []
    for row in snap.rows:
        node = row.name.rsplit("/", 1)[0] if row.kind in ("gpu", "nic") else row.name
        if row.kind == "total" or node in keep:
            rows.append(row)
            if row.kind == "node":
                shown_nodes.add(node)
    snap.rows = rows
    snap.hidden = node_count - len(shown_nodes)
    return snap


def pick(snap: Snapshot, fetched: Fetched, target: Target) -> set[str]:
    """The nodes to show: stragglers, nodes with a GPU well below the median, and the WORST lowest."""
    nodes = [r for r in snap.rows if r.kind == "node"]
    keep = {r.name for r in nodes if r.straggler}
    util = {r.name: r.values.get("gpu_util_pct") for r in nodes}
    busy = [v for v in util.values() if v is not None and v >= IDLE_GPU_PCT]
    if busy:
        median = statistics.median(busy)
        worst_gpu = fetched.data.get(WORST_GPU.key, {})
        by_key = {m.key: m.name for m in target.members}
        for (key, _gpu), points in worst_gpu.items():
            low = max(points)[1] if points else None
            if low is not None and IDLE_GPU_PCT <= low < STRAGGLER_SHARE * median and key in by_key:
                keep.add(by_key[key])

    def throughput(r: Any) -> float | None:
        if r.values.get("gpu_util_pct") is not None:
            return r.values["gpu_util_pct"]
        parts = [r.values.get("net_sent_gbps"), r.values.get("net_recv_gbps")]
        return sum(p for p in parts if p is not None) if any(p is not None for p in parts) else None

    ranked = sorted((r for r in nodes if throughput(r) is not None), key=lambda r: (throughput(r), r.rank or 0))
    keep.update(r.name for r in ranked[:WORST])
    if not ranked:
        keep.update(r.name for r in nodes[:WORST])
    return keep
