"""`gcpgpu metrics report`: the tail's series over a longer window, plotted (matplotlib) to PNG or HTML.

One panel per metric, one line per node, the stragglers in red and named in the legend; the HTML
adds a table of each node's averages over the window and embeds the figure, so it is one file to
mail or attach to a bug. The same calls as the tail: one ListTimeSeries per metric type.

A job's report (--job) is titled with the job's name, shades its run on every time axis, averages
only over its run (not the idle margins either side), and draws its training panels per step from
its own log (steps.py) where the log has them, in milliseconds where steps are that short.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import html
import io
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gcpgpu.errors import UsageProblem

from . import nics as nicview
from .jobspan import during
from .query import JOB_KEY, Fetched, Window, fetch
from .sources import Metric, report_metrics_for
from .steps import Steps
from .target import Target
from .view import STRAGGLER_SHARE

SUFFIXES = (".html", ".png")
_MUTED = ("#4c72b0", "#55a868", "#8172b2", "#64b5cd", "#937860", "#8c8c8c", "#ccb974", "#da8bc3")


def check_output(path: str) -> Path:
    """-o FILE must end in .html or .png and sit in a folder that exists (checked before any API call)."""
    out = Path(path)
    if out.suffix.lower() not in SUFFIXES:
        raise UsageProblem(f"-o {path!r} must end in .html or .png")
    if not out.parent.exists():
        raise UsageProblem(f"-o {path!r}: the folder {str(out.parent)!r} does not exist")
    return out


@dataclass
class Panel:
    metric: Metric
    title: str
    unit: str
    lines: dict[str, list[tuple[float, float]]]  # line name -> points, oldest first
    by_step: bool = False  # points are (step, value) from the job's log, not (time, value)


@dataclass(frozen=True)
class JobRun:
    """What a job's report adds: its name and id, its run (shaded; what averages cover) and its steps."""

    id: str
    name: str | None
    started: float | None
    ended: float | None
    steps: Steps | None = None

    @property
    def label(self) -> str:
        return f"job {self.name} ({self.id})" if self.name else f"job {self.id}"

    def during(self, pts: list[tuple[float, float]], period: float) -> list[tuple[float, float]]:
        """The points of the run (jobspan.during: the same ones `metrics tail` averages an ended job over)."""
        return during(pts, period, self.started, self.ended)


def _during(job: JobRun | None, panel: Panel, period: float) -> list[list[tuple[float, float]]]:
    """Each line's points that count for averages: within the job's run (all of a per-step panel's)."""
    return [pts if job is None or panel.by_step else job.during(pts, period) for pts in panel.lines.values()]


def panels(target: Target, fetched: Fetched, metrics: list[Metric], job: JobRun | None = None) -> list[Panel]:
    """The plotted series: per node (a node's GPUs joined), or the job's one line for trainer metrics (per step
    from its log, when `job` has steps)."""
    machine = target.machine
    out = []
    logged = job is not None and job.steps is not None and bool(job.steps.points)
    for metric in metrics:
        rows = fetched.data.get(metric.key, {})
        if not rows or (metric.source == "trainer" and metric.job_level and logged):
            continue
        lines: dict[str, list[tuple[float, float]]] = {}
        title, unit = metric.title, metric.unit
        if metric.job_level:
            pts = rows.get(JOB_KEY, [])
            lines[target.name] = sorted(pts)
        elif metric.per_nic:  # the NICs' own counters: the GPU fabric apart from the host NICs (metrics/nics.py)
            for role, label, roles in nicview.report_roles(machine, metric.key):
                mine = {k: p for k, p in rows.items() if k[1] is not None and k[1].split("|")[0] in roles}
                out.append(Panel(dataclasses.replace(metric, key=f"{metric.key}_{role}"), f"{metric.title}: {label}",
                                 metric.unit, {n: p for n, p in sorted(_per_member(target, mine, True).items()) if p}))
            continue
        else:
            lines = _per_member(target, rows, metric.reducer == "REDUCE_SUM")
        if metric.key == "gpu_mem_free_bytes":
            continue  # drawn inside "GPU memory used"
        if metric.key == "gpu_mem_bytes" and fetched.data.get("gpu_mem_free_bytes"):
            # used / (used + free) per node, as the Ops Agent reports both states.
            free = {n: dict(p) for n, p in _per_member(target, fetched.data["gpu_mem_free_bytes"], True).items()}
            lines = {n: [(t, v / (v + free[n][t]) * 100) for t, v in pts if free.get(n, {}).get(t) is not None
                         and v + free[n][t] > 0] for n, pts in lines.items()}
            title, unit = "GPU memory used", "% of GPU memory"
        elif metric.key == "gpu_mem_bytes":
            if machine is not None and machine.gpu_count:
                total = machine.gpu_count * machine.gpu.memory_gib * 2**30
                lines = {n: [(t, v / total * 100) for t, v in pts] for n, pts in lines.items()}
                title, unit = "GPU memory used", "% of GPU memory"
            else:
                lines = {n: [(t, v / 2**30) for t, v in pts] for n, pts in lines.items()}
                unit = "GiB"
        if metric.key == "mfu":
            lines = {n: [(t, v * 100) for t, v in pts] for n, pts in lines.items()}
            unit = "%"
        if metric.key == "step_time_s" and _short([v for pts in lines.values() for _t, v in pts]):
            lines = {n: [(t, v * 1e3) for t, v in pts] for n, pts in lines.items()}
            unit = "ms"
        out.append(Panel(metric, title, unit, {n: p for n, p in sorted(lines.items()) if p}))
    if logged:
        out += _step_panels(job, target.name)  # type: ignore[arg-type]
    return [p for p in out if p.lines]


def _short(seconds: list[float]) -> bool:
    """Whether steps this long are read in milliseconds (under a second, typically)."""
    return bool(seconds) and statistics.median(seconds) < 1.0


def _step_panels(job: JobRun, fallback: str) -> list[Panel]:
    """The job's training panels per step, from its log: one line, named for the job."""
    steps = job.steps
    assert steps is not None
    out = []
    for key, (title, unit) in steps.fields.items():
        pts = [(float(step), v) for step, v in steps.series(key)]
        if key == "step_time_ms" and not _short([v / 1e3 for _s, v in pts]):
            pts, unit = [(s, v / 1e3) for s, v in pts], "s"
        metric = Metric(key, title, "", "trainer", "", "", unit=unit, job_level=True)
        out.append(Panel(metric, title, unit, {job.name or fallback: pts} if pts else {}, by_step=True))
    return out


def _per_member(target: Target, rows: dict, summed: bool) -> dict[str, list[tuple[float, float]]]:
    """One line per node: its GPUs' (or NICs') series joined per timestamp, summed or averaged."""
    per_member: dict[str, dict[float, list[float]]] = {}
    for (key, _gpu), pts in rows.items():
        bucket = per_member.setdefault(target.member(key).name, {})
        for t, v in pts:
            bucket.setdefault(t, []).append(v)
    return {name: sorted((t, sum(vs) if summed else statistics.fmean(vs)) for t, vs in bucket.items())
            for name, bucket in per_member.items()}


def stragglers(panel_list: list[Panel], job: JobRun | None = None, period: float = 60.0) -> dict[str, str]:
    """Nodes whose average (over the job's run, for a job) is well below the median node's, with the reason."""
    found: dict[str, str] = {}
    # The network judged on the GPU fabric's own counters where the nodes wrote them, else Compute's.
    fabric = {"nic_sent_gbps_fabric", "nic_recv_gbps_fabric"}
    judged = {"gpu_util_pct"} | (fabric if any(p.metric.key in fabric for p in panel_list)
                                 else {"net_sent_gbps", "net_recv_gbps"})
    for panel in panel_list:
        if panel.metric.key not in judged or len(panel.lines) < 2:
            continue
        means = {n: statistics.fmean(v for _t, v in pts) for n, pts in zip(panel.lines, _during(job, panel, period),
                                                                             strict=True) if pts}
        if len(means) < 2:
            continue
        median = statistics.median(means.values())
        for name, mean in means.items():
            if median > 0 and mean < STRAGGLER_SHARE * median:
                reason = f"{panel.title} {_fmt(mean)} {panel.unit} vs median {_fmt(median)}"
                found[name] = f"{found[name]}; {reason}" if name in found else reason
    return found


def _fmt(v: float) -> str:
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e4)):
        if abs(v) >= size:
            return f"{v / (size if unit != 'k' else 1e3):.1f}{unit}"
    return f"{v:.1f}"


def build_figure(target: Target, panel_list: list[Panel], slow: dict[str, str], window: Window,
                 job: JobRun | None = None) -> Any:
    """All panels in one matplotlib Figure, two columns, each with the whole window on its time axis
    (a job's per-step panels: its steps), the job's run shaded.

    Readable at any window: concise date ticks (distinct labels, from seconds to weeks), every
    sample marked while a line has few of them (a new cluster's single point shows), and y
    limits computed from the data so no line sits on or beyond an edge.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.dates import AutoDateLocator, ConciseDateFormatter
    from matplotlib.figure import Figure
    from matplotlib.ticker import EngFormatter

    cols = 2 if len(panel_list) > 1 else 1
    rows = max(1, (len(panel_list) + cols - 1) // cols)
    fig = Figure(figsize=(7.0 * cols, 2.9 * rows + 0.8), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    start = dt.datetime.fromtimestamp(window.start, dt.timezone.utc)
    end = dt.datetime.fromtimestamp(window.end, dt.timezone.utc)
    fig.suptitle(f"{job.label if job else target.label}: {start:%Y-%m-%d %H:%M} to {end:%Y-%m-%d %H:%M} UTC"
                 + (f"; stragglers: {', '.join(sorted(slow))}" if slow else ""), fontsize=12,
                 color="#b00020" if slow else "black")
    if not panel_list:
        ax = fig.add_subplot(1, 1, 1)
        ax.text(0.5, 0.5, "no metrics in this window", ha="center", va="center")
        ax.set_axis_off()
    for i, panel in enumerate(panel_list):
        ax = fig.add_subplot(rows, cols, i + 1)
        for j, (name, pts) in enumerate(panel.lines.items()):
            # A Monitoring point is stamped at the end of the interval it describes: drawn at that interval's
            # middle, so a busy minute falls inside the job's shaded run, not a minute after it.
            times: list[Any] = [x if panel.by_step else dt.datetime.fromtimestamp(x - window.period / 2, dt.timezone.utc)
                                for x, _v in pts]
            values = [v for _t, v in pts]
            marker = "o" if len(pts) <= MARKED_POINTS else None  # a lone sample is a dot, not nothing
            if name in slow:
                ax.plot(times, values, color="#d62728", linewidth=2.4, marker=marker, markersize=5,
                        label=f"{name} (straggler)", zorder=3)
            else:
                ax.plot(times, values, color=_MUTED[j % len(_MUTED)], linewidth=1.0, alpha=0.8, marker=marker,
                        markersize=3.5, label=name if len(panel.lines) <= 8 else None)
        ax.set_title(panel.title + (" (per step, from the job's log)" if panel.by_step else ""), fontsize=10,
                     loc="left")
        ax.set_ylabel(panel.unit, fontsize=8)
        ax.tick_params(labelsize=7)
        if panel.by_step:
            ax.set_xlabel("step", fontsize=8)
        else:
            _time_axis(ax, start, end, job, AutoDateLocator, ConciseDateFormatter)
        ax.set_ylim(*y_limits([v for pts in panel.lines.values() for _t, v in pts], panel.unit.startswith("%")))
        if max((abs(v) for pts in panel.lines.values() for _t, v in pts), default=0) >= 1e4:
            ax.yaxis.set_major_formatter(EngFormatter(sep=""))  # 5M, not 5 with "1e6" over the title
        ax.grid(True, alpha=0.3)
        handles, labels = ax.get_legend_handles_labels()
        if labels:
            ax.legend(fontsize=7, loc="best", ncol=min(4, len(labels)))
    return fig


MARKED_POINTS = 30  # lines with at most this many samples show each one as a marker
RUN_SHADE = "#f2c14e"


def _time_axis(ax: Any, start: dt.datetime, end: dt.datetime, job: JobRun | None, locator_cls: Any,
               formatter_cls: Any) -> None:
    locator = locator_cls(tz=dt.timezone.utc, minticks=3, maxticks=8)
    ax.xaxis.set_major_locator(locator)
    # Seconds ticks read 05:41:30, not a bare "30" that repeats every minute.
    ax.xaxis.set_major_formatter(formatter_cls(
        locator, tz=dt.timezone.utc, formats=["%Y", "%b", "%d", "%H:%M", "%H:%M", "%H:%M:%S"]))
    if job is not None and job.started is not None:  # the job's run, behind the lines
        ran = dt.datetime.fromtimestamp(job.ended, dt.timezone.utc) if job.ended is not None else end
        ax.axvspan(dt.datetime.fromtimestamp(job.started, dt.timezone.utc), ran, color=RUN_SHADE, alpha=0.18,
                   zorder=0, label="the job's run")
    # The requested window, as the title says, not just where data is; a sliver more on the right
    # so a point stamped "now" shows whole.
    ax.set_xlim(start, end + (end - start) * 0.015)


def y_limits(values: list[float], percent: bool) -> tuple[float, float]:
    """Limits that hold every value with a margin; from 0 for percentages and other values near it."""
    if not values:
        return (0.0, 100.0) if percent else (0.0, 1.0)
    lo, hi = min(values), max(values)
    pad = (hi - lo) * 0.08 or abs(hi) * 0.08 or 1.0
    bottom = lo - pad
    if lo >= 0 and (percent or bottom < 0 or lo < 0.5 * hi):
        bottom = 0.0
    return bottom, hi + max(pad, (hi - bottom) * 0.08)  # the margin is of the span shown


def figure_png(target: Target, panel_list: list[Panel], slow: dict[str, str], window: Window,
               job: JobRun | None = None) -> bytes:
    """The figure of build_figure as PNG bytes."""
    fig = build_figure(target, panel_list, slow, window, *([job] if job is not None else []))
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    return buffer.getvalue()


def _key(panel: Panel) -> str:
    """A node panel's column as `metrics tail` names it (GPU memory drawn in % is its gpu_mem_pct)."""
    return "gpu_mem_pct" if panel.metric.key == "gpu_mem_bytes" and panel.unit.startswith("%") else panel.metric.key


def averages(panel_list: list[Panel], window: Window, job: JobRun | None = None) -> dict[str, dict[str, float]]:
    """Each node's mean of each panel (over the job's run, for a job): the HTML table's figures, and what
    `metrics tail` shows for the job once it has ended (both average jobspan.during's points)."""
    out: dict[str, dict[str, float]] = {}
    for name in sorted({n for p in panel_list for n in p.lines if not p.metric.job_level}):
        for p in panel_list:
            pts = p.lines.get(name) if not p.metric.job_level else None
            pts = job.during(pts, window.period) if job is not None and pts else pts
            if pts:
                out.setdefault(name, {})[_key(p)] = statistics.fmean(v for _t, v in pts)
    return out


def html_page(target: Target, panel_list: list[Panel], slow: dict[str, str], window: Window, png: bytes,
              job: JobRun | None = None) -> str:
    """One self-contained HTML file: a summary table of each node's averages (over the job's run, for a
    job) and the figure."""
    shown = [p for p in panel_list if not p.metric.job_level]
    means = averages(panel_list, window, job)
    head = "".join(f"<th>{html.escape(p.title)}<br><small>{html.escape(p.unit)}</small></th>" for p in shown)
    body = []
    for name, row in means.items():
        cells = [f"<td>{_fmt(row[_key(p)])}</td>" if _key(p) in row else "<td class=na>n/a</td>" for p in shown]
        flag = f"<td class=slow>straggler: {html.escape(slow[name])}</td>" if name in slow else "<td></td>"
        body.append(f"<tr{' class=slowrow' if name in slow else ''}><td>{html.escape(name)}</td>{''.join(cells)}{flag}</tr>")
    trainer = [(p, pts) for p in panel_list if p.metric.job_level and (pts := _during(job, p, window.period)[0])]
    trainer_line = ", ".join(f"{html.escape(p.title)} {_fmt(statistics.fmean(v for _t, v in pts))} "
                             f"{html.escape(p.unit)}".rstrip() for p, pts in trainer)
    start = dt.datetime.fromtimestamp(window.start, dt.timezone.utc)
    end = dt.datetime.fromtimestamp(window.end, dt.timezone.utc)
    image = base64.b64encode(png).decode()
    label = job.label if job is not None else target.label
    over = " Averages are over the job's run (shaded), not the margins either side." if job is not None else ""
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>gcpgpu metrics: {html.escape(label)}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }}
table {{ border-collapse: collapse; margin: 1em 0; font-size: 0.9em; }}
th, td {{ border-bottom: 1px solid #ddd; padding: 4px 10px; text-align: right; }}
th:first-child, td:first-child {{ text-align: left; }}
.slowrow td {{ color: #b00020; font-weight: 600; }} .na {{ color: #999; }} .slow {{ text-align: left; }}
img {{ max-width: 100%; }}
</style></head><body>
<h1>{html.escape(label)}</h1>
<p>{start:%Y-%m-%d %H:%M} to {end:%H:%M} UTC, one point per {window.period / 60:g} min.{over}
{('Stragglers: <b>' + html.escape(', '.join(sorted(slow))) + '</b>.') if slow else 'No stragglers.'}
{('Trainer averages: ' + trainer_line + '.') if trainer_line else 'No trainer metrics (start gcpgpu.node.reporter beside the trainer).'}</p>
<table><tr><th>{'node' if target.kind == 'cluster' else 'task'}</th>{head}<th></th></tr>
{''.join(body)}
</table>
<img alt="metrics over time" src="data:image/png;base64,{image}">
<p><small>Made by gcpgpu metrics report from Cloud Monitoring.</small></p>
</body></html>
"""


def make_report(clients: Any, target: Target, window: Window, output: Path, job: JobRun | None = None) -> dict[str, Any]:
    """Fetch the window's series, plot them, write `output` (.png or .html); returns a summary."""
    metrics = list(report_metrics_for(target.kind))
    fetched = fetch(clients, target, metrics, window)
    panel_list = panels(target, fetched, metrics, job)
    slow = stragglers(panel_list, job, window.period)
    png = figure_png(target, panel_list, slow, window, job)
    if output.suffix.lower() == ".png":
        output.write_bytes(png)
    else:
        output.write_text(html_page(target, panel_list, slow, window, png, job), encoding="utf-8")
    return {"output": str(output), "panels": [p.title for p in panel_list], "stragglers": sorted(slow),
            "averages": {n: {k: round(v, 3) for k, v in row.items()} for n, row in averages(panel_list, window, job).items()},
            "api_calls": fetched.calls, "bytes": output.stat().st_size}
