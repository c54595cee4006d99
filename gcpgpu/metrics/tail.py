"""`gcpgpu metrics tail`: refresh a target's snapshot every few seconds and show it.

A table for people (redrawn in place on a terminal, printed once per refresh when piped), or rows
for scripts: JSON lines (one object per row per refresh) or CSV (one header, then rows). Hints for
missing metrics print once per session, on stderr, never into the rows.
"""

from __future__ import annotations

import csv
import io
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO, Any

from gcpgpu.gcp import clock as gcp_clock

from . import focus, jobspan
from .query import Window, fetch
from .render import records, table
from .sources import metrics_for
from .target import Target, resolve
from .view import FIELDS, Snapshot, build

REDISCOVER_S = 300.0  # a cluster's VMs rarely change; look them up again every 5 minutes
JOB_STATE_S = 15.0  # how often a job's state (started, ended) is read again while it has not ended
FORMATS = ("table", "json", "csv", "yaml")


@dataclass
class Tail:
    """One tail session: the target, its metrics, and what has been said already."""

    clients: Any
    project: str
    kind: str
    name: str
    per_gpu: bool = False
    per_nic: bool = False  # a row per NIC under each node (--nics)
    clock: Callable[[], float] = gcp_clock.now  # the cloud's clock (the emulator's, under test)
    target: Target | None = None
    discovered_at: float = 0.0
    hinted: set[str] = field(default_factory=set)
    job: str | None = None  # --job as given: its start and end say which values are live (freshness.py)
    region: str | None = None  # where a Vertex job given by number alone runs
    span: jobspan.JobSpan | None = None
    span_read_at: float = float("-inf")
    all_rows: bool = False  # a big cluster's every row, not only the slowest and the stragglers (focus.py)

    def refresh(self) -> Snapshot:
        """Discover (first time, then every few minutes) and fetch one snapshot."""
        now = self.clock()
        if self.target is None or (self.kind == "cluster" and now - self.discovered_at > REDISCOVER_S):
            self.target = resolve(self.clients, self.project, self.kind, self.name)
            self.discovered_at = now
        if self.job and not (self.span and self.span.over) and now - self.span_read_at >= JOB_STATE_S:
            self.span = jobspan.read(self.clients, self.project, self.job, self.region) or self.span
            self.span_read_at = now
        metrics = metrics_for(self.kind, self.per_nic)
        window = Window.recent(now)
        ended = self.span is not None and self.span.run is not None
        if ended:
            # An ended job's whole run, in the window `metrics report` plots it in: its figures are its run's
            # averages, however long ago it ended, the same at every refresh and the same as the report's.
            window = self.span.window(now) or window  # type: ignore[union-attr]
        if focus.focused(self.target, self.all_rows):
            return focus.refresh(self.clients, self.target, metrics, window, self.per_gpu, now, self.span,
                                 self.per_nic)
        fetched = fetch(self.clients, self.target, metrics, window, self.per_gpu, latest_only=not ended)
        return build(self.target, fetched, metrics, self.per_gpu, now=now, job=self.span, per_nic=self.per_nic)

    def new_hints(self, snapshot: Snapshot) -> list[str]:
        fresh = [h for h in snapshot.hints() if h not in self.hinted]
        self.hinted.update(fresh)
        return fresh


def render_table(snapshot: Snapshot, out: IO[str]) -> None:
    from rich.console import Console

    if getattr(out, "isatty", lambda: False)():
        console = Console(file=out, highlight=False)
        console.print(table(snapshot, width=console.width))
        return
    # Piped: the table's natural width, no colour, no trailing blanks (as output.emit does).
    buffer = io.StringIO()
    Console(file=buffer, width=400, highlight=False, color_system=None).print(table(snapshot))
    out.write("".join(line.rstrip() + "\n" for line in buffer.getvalue().splitlines()))


class RowWriter:
    """Streams snapshots as JSON lines, CSV (header once) or YAML documents."""

    def __init__(self, fmt: str, out: IO[str]) -> None:
        self.fmt = fmt
        self.out = out
        self._csv: Any = None

    def write(self, snapshot: Snapshot) -> None:
        if self.fmt == "json":
            for rec in records(snapshot):
                self.out.write(json.dumps(rec, default=str) + "\n")
        elif self.fmt == "csv":
            if self._csv is None:
                self._csv = csv.DictWriter(self.out, fieldnames=["time", "target", *FIELDS], extrasaction="ignore")
                self._csv.writeheader()
            for rec in records(snapshot, with_history=False):
                rec["straggler_reasons"] = "; ".join(rec["straggler_reasons"])
                self._csv.writerow({k: ("" if v is None else v) for k, v in rec.items()})
        else:
            import yaml

            self.out.write("---\n" + yaml.safe_dump(records(snapshot), sort_keys=False))
        self.out.flush()


def run(tail: Tail, fmt: str, interval: float, once: bool, out: IO[str] | None = None,
        err: IO[str] | None = None, max_refreshes: int | None = None) -> Snapshot | None:
    """The tail loop; returns the last snapshot. Ctrl-C ends it quietly."""
    out = out if out is not None else sys.stdout
    err = err if err is not None else sys.stderr
    live = fmt == "table" and not once and getattr(out, "isatty", lambda: False)()
    if live:
        return _run_live(tail, interval, out, max_refreshes)
    writer = RowWriter(fmt, out) if fmt != "table" else None
    last: Snapshot | None = None
    count = 0
    try:
        while True:
            started = time.monotonic()
            last = tail.refresh()
            if writer is None:
                render_table(last, out)
            else:
                writer.write(last)
            for hint in tail.new_hints(last):
                err.write(hint + "\n")
            count += 1
            if once or (max_refreshes is not None and count >= max_refreshes):
                return last
            if writer is None:
                out.write("\n")
            out.flush()
            time.sleep(max(0.0, interval - (time.monotonic() - started)))
    except KeyboardInterrupt:
        return last


def _run_live(tail: Tail, interval: float, out: IO[str], max_refreshes: int | None) -> Snapshot | None:
    from rich.console import Console, Group
    from rich.live import Live
    from rich.text import Text

    from gcpgpu.errors import describe_google_error, is_google_error

    console = Console(file=out, highlight=False)
    last: Snapshot | None = None
    hints: list[str] = []
    count = 0
    with Live(Text("fetching metrics ..."), console=console, auto_refresh=False, transient=False) as screen:
        try:
            while True:
                started = time.monotonic()
                status = ""
                try:
                    last = tail.refresh()
                    hints += tail.new_hints(last)
                    status = f"{last.calls} API calls in {last.seconds:.2f} s; refreshing every {interval:g} s (Ctrl-C stops)"
                except Exception as e:  # keep the last view up through a passing outage
                    if not is_google_error(e) or last is None:
                        raise
                    status = f"refresh failed, showing the previous one: {describe_google_error(e)}"
                parts: list[Any] = [table(last, width=console.width)] if last is not None else []
                parts += [Text(h, style="yellow") for h in hints] + [Text(status, style="dim")]
                screen.update(Group(*parts), refresh=True)
                count += 1
                if max_refreshes is not None and count >= max_refreshes:
                    return last
                time.sleep(max(0.0, interval - (time.monotonic() - started)))
        except KeyboardInterrupt:
            return last
