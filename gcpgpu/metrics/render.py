"""The tail's snapshot drawn: a rich table (stragglers in red, n/a dimmed, sparklines) or flat records for JSON/CSV.

view.py makes the rows; this draws them. Split from view.py along that seam.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from . import freshness
from . import nics as nicview
from .view import FIELDS, SPARK, STRAGGLER_SHARE, Row, Snapshot, _cell


def sparkline(values: Sequence[float | None], top: float | None = None) -> str:
    """Recent history in block characters; a gap (no data that minute) is a space."""
    present = [v for v in values if v is not None]
    if not present:
        return ""
    hi = top if top else max(present)
    if hi <= 0:
        hi = 1.0
    return "".join(" " if v is None else SPARK[min(len(SPARK) - 1, max(0, int(v / hi * (len(SPARK) - 1) + 0.5)))]
                   for v in values)


def columns(snapshot: Snapshot) -> list[tuple[str, str, str]]:
    """(header, field, format) of the table's columns for this snapshot."""
    cols = [("SENT Gb/s", "net_sent_gbps", ".1f"), ("RECV Gb/s", "net_recv_gbps", ".1f")]
    if snapshot.target.kind == "cluster":
        cols += [("LINK", "link_share_pct", "pct"), ("PKT/s TX/RX", "packets", ""),
                 # The NICs' own counters (metrics/nics.py): the GPU fabric apart from the host NICs.
                 ("FABRIC Gb/s TX/RX", "fabric", ""), ("HOST Gb/s TX/RX", "host", ""), ("CNP/s", "cnp_per_s", "human"),
                 ("RETX/s", "retrans_per_s", "human")]
    cols += [("GPU", "gpu_util_pct", "pct"), ("GPU MEM", "gpu_mem_pct", "pct")]
    if snapshot.dcgm:
        cols += [("SM", "sm_active_pct", "pct"), ("TENSOR", "tensor_active_pct", "pct"),
                 ("NVLINK GB/s", "nvlink_gbytes_per_s", ".1f"), ("PCIE GB/s", "pcie_gbytes_per_s", ".1f")]
    cols += [("TOK/s", "tokens_per_s", "human"), ("MFU", "mfu", "ratio")]
    return cols


def cells(row: Row, snapshot: Snapshot) -> list[str]:
    out = []
    for _header, key, fmt in columns(snapshot):
        if key in row.held or (key == "packets" and "packets_sent_per_s" in row.held):
            out.append("-")  # a value that is not live (the row's STATUS says why): not n/a, not a number
        elif row.kind in ("node", "gpu", "nic") and key in ("tokens_per_s", "mfu"):
            out.append("")  # the trainer's numbers are the job's: they show on the total row
        elif row.kind in ("gpu", "nic") and key in ("net_sent_gbps", "net_recv_gbps", "link_share_pct", "packets",
                                                    "gpu_util_pct", "gpu_mem_pct", "sm_active_pct", "tensor_active_pct",
                                                    "nvlink_gbytes_per_s", "pcie_gbytes_per_s"):
            out.append("")  # network is per VM, not per GPU
        elif key in ("fabric", "host") and row.kind != "gpu":
            tx, rx = row.values.get(f"{key}_sent_gbps"), row.values.get(f"{key}_recv_gbps")
            out.append("" if row.kind == "nic" and tx is None and rx is None else
                       "n/a" if tx is None and rx is None else f"{_cell(tx, '.2f')}/{_cell(rx, '.2f')}")
        elif row.kind == "gpu" and key in ("fabric", "host", "cnp_per_s", "retrans_per_s"):
            out.append("")
        elif key in row.unmeasured:
            out.append(row.unmeasured[key].split(":")[0])  # what this family cannot measure: said, never 0
        elif key == "packets":
            tx, rx = row.values.get("packets_sent_per_s"), row.values.get("packets_recv_per_s")
            out.append("n/a" if tx is None and rx is None else f"{_cell(tx, 'human')}/{_cell(rx, 'human')}")
        else:
            out.append(_cell(row.values.get(key), fmt))
    return out


def _spark_top(row: Row, snapshot: Snapshot) -> float | None:
    if row.history_of == "gpu_util_pct":
        return 100.0
    machine = snapshot.target.machine
    if row.history_of == "net_gbps" and machine is not None:
        return 2.0 * machine.max_net_gbps * (len(snapshot.target.members) if row.kind == "total" else 1)
    return None


# Columns a narrow terminal gives up first (the rest: node, network, GPU, throughput, status).
_DROP_ORDER = ("pcie_gbytes_per_s", "nvlink_gbytes_per_s", "packets", "sm_active_pct", "gpu_mem_pct",
               "tensor_active_pct", "link_share_pct", "cnp_per_s", "host", "history")


def table(snapshot: Snapshot, width: int | None = None) -> Any:
    """A rich Table of the snapshot: stragglers in red with the reason, n/a dimmed.

    With a width (a terminal's), the least telling columns are left out until the table fits,
    rather than squeezing every cell into an ellipsis.
    """
    dropped: set[str] = set()
    t = _table(snapshot, dropped, wrap=width is not None)
    if width is None:
        return t
    from rich.console import Console
    from rich.measure import Measurement

    console = Console(width=10_000)
    for key in _DROP_ORDER:
        if Measurement.get(console, console.options, t).maximum <= width:
            break
        dropped.add(key)
        t = _table(snapshot, dropped, wrap=True)
    return t


def _table(snapshot: Snapshot, dropped: set[str], wrap: bool) -> Any:
    from rich import box
    from rich.table import Table
    from rich.text import Text

    stamp = dt.datetime.fromtimestamp(snapshot.time, dt.timezone.utc).strftime("%H:%M:%S UTC")
    machine = snapshot.target.machine
    title = (f"{snapshot.target.label}: {len([r for r in snapshot.rows if r.kind == 'node'])} "
             f"{'node' if snapshot.target.kind == 'cluster' else 'task'}(s)"
             + (f" of {machine.name} ({machine.max_net_gbps} Gbit/s each)" if machine else "") + f" at {stamp}"
             + (f"; {freshness.job_line(snapshot.job, snapshot.time)}" if snapshot.job else "")
             + (f"\nshowing the {len([r for r in snapshot.rows if r.kind == 'node'])} slowest and every straggler; "
                f"{snapshot.hidden} more within {STRAGGLER_SHARE:.0%} of the median (--all shows every row)"
                if snapshot.hidden else ""))
    # Under the table: where each network column comes from on this family.
    caption = _sources_line(snapshot) if snapshot.target.kind == "cluster" else None
    t = Table(title=title, caption=caption, box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, title_justify="left",
              caption_justify="left")
    t.add_column("NODE" if snapshot.target.kind == "cluster" else "TASK", no_wrap=True)
    shown = [i for i, (_h, key, _f) in enumerate(columns(snapshot)) if key not in dropped]
    for i in shown:
        t.add_column(columns(snapshot)[i][0], justify="right", no_wrap=True)
    if "history" not in dropped:
        t.add_column("LAST 15 MIN", no_wrap=True)
    # On a terminal the reasons wrap; piped, each row stays one line for grep and awk.
    t.add_column("STATUS", min_width=16, max_width=44 if wrap else None, no_wrap=not wrap)
    for row in snapshot.rows:
        style = "red" if row.straggler else ("bold" if row.kind == "total" else "")
        name = ("  " + row.name.rsplit("/", 1)[-1]) if row.kind == "gpu" else row.name
        status = ("straggler: " + "; ".join(row.straggler)) if row.straggler else row.note
        rendered = [Text(name, style=style)]
        values = cells(row, snapshot)
        for i in shown:
            rendered.append(Text(values[i], style="dim" if values[i] == "n/a" else style))
        if "history" not in dropped:
            rendered.append(Text(sparkline(row.history, _spark_top(row, snapshot)), style="cyan"))
        rendered.append(Text(status, style="red" if row.straggler else "yellow" if status else ""))
        if row.kind == "total":
            t.add_section()
        t.add_row(*rendered)
    return t


def records(snapshot: Snapshot, with_history: bool = True) -> list[dict[str, Any]]:
    """Flat rows for JSON and CSV, each stamped with the snapshot's time and target."""
    stamp = dt.datetime.fromtimestamp(snapshot.time, dt.timezone.utc).isoformat()
    out = []
    for row in snapshot.rows:
        rec: dict[str, Any] = {"time": stamp, "target": snapshot.target.label}
        for key in FIELDS:
            if key in ("kind", "name", "rank", "gpu"):
                rec[key] = getattr(row, key)
            elif key == "straggler":
                rec[key] = bool(row.straggler)
            elif key == "straggler_reasons":
                rec[key] = list(row.straggler)
            elif key == "note":
                rec[key] = row.note or None
            else:
                rec[key] = _round(row.values.get(key))
        if row.kind == "nic":
            rec["role"] = row.values.get("role")
        if row.unmeasured:
            rec["unmeasured"] = dict(row.unmeasured)
        if row.kind == "total" and snapshot.target.kind == "cluster":
            rec["sources"] = nicview.sources(snapshot.target.machine)
        if with_history:
            rec["history_of"] = row.history_of
            rec["history"] = [_round(v) for v in row.history]
        out.append(rec)
    return out


def _sources_line(snapshot: Snapshot) -> str:
    """Where each network column comes from, on this family."""
    src = nicview.sources(snapshot.target.machine)
    return (f"SENT/RECV: {src['sent_recv']}; FABRIC: {src['fabric']}; HOST: {src['host']}; "
            f"CNP: {src['cnp']}; RETX: {src['retrans']}")


def _round(v: float | str | None) -> float | str | None:
    if isinstance(v, str):
        return v
    # Scripts want numbers, not 17 digits of float noise; 4 significant decimals is plenty here.
    return None if v is None else round(v, 4)
