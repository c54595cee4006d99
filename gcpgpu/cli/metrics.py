"""`gcpgpu metrics`: network, GPU and training metrics from Cloud Monitoring, live, for a whole cluster."""

from __future__ import annotations

from typing import Any

import click

from gcpgpu.errors import UsageProblem
from gcpgpu.output import emit, info
from gcpgpu.settings import Settings

TAIL_FORMATS = ("table", "json", "csv")


def _target_options(fn: click.decorators.FC) -> click.decorators.FC:
    fn = click.option("--job", metavar="JOB", help="A job as 'gcpgpu job submit' printed it (vertex:LOCATION:ID, "
                      "cluster:NAME:JOB) or a Vertex AI custom job's id or name.")(fn)
    return click.option("--cluster", metavar="NAME", help="A gcpgpu cluster (its VMs, found by label).")(fn)


@click.group(epilog="""\b
Examples:
  gcpgpu metrics tail --cluster demo                 live view, refreshed every 5 s
  gcpgpu metrics tail --cluster demo --gpus --once   one snapshot, a row per GPU
  gcpgpu metrics tail --job 123 --format csv         rows for scripts
  gcpgpu metrics report --cluster demo --since 2h -o demo.html
  gcpgpu metrics dashboard create --cluster demo""")
def metrics() -> None:
    """Network, GPU and training metrics from Cloud Monitoring, live, at cluster scale.

    Each refresh makes one Cloud Monitoring call per metric type for the whole cluster
    (aggregated server-side), whatever its size. Stragglers (well below the median of
    their peers on GPU utilization or network throughput) are marked; metrics nobody
    reports show as n/a, with a hint on how to enable them.
    """


@metrics.command()
@_target_options
@click.option("--gpus", is_flag=True, help="A row per GPU under each node.")
@click.option("--nics", is_flag=True, help="A row per NIC under each node (GPU fabric, host, the node's TCP).")
@click.option("--all", "all_rows", is_flag=True,
              help="Every node (and GPU) of a cluster over 64 nodes; by default only the 8 slowest nodes, every "
                   "straggler and every node with a slow GPU are shown, in tables and rows alike.")
@click.option("--interval", type=float, default=5.0, show_default=True, metavar="S", help="Seconds between refreshes.")
@click.option("--once", is_flag=True, help="Print one snapshot and exit.")
@click.option("--format", "fmt", type=click.Choice(TAIL_FORMATS), default=None,
              help="table (default), or rows for scripts: json (one object per row per refresh) or csv.")
@click.pass_obj
def tail(settings: Settings, cluster: str | None, job: str | None, gpus: bool, nics: bool, all_rows: bool,
         interval: float, once: bool, fmt: str | None) -> None:
    """Watch a cluster's or job's nodes: network, GPUs, DCGM and training throughput.

    \b
    Columns: network sent/received (Gbit/s, rates from the DELTA counters), the
    share of the machine's bandwidth (from the catalog), packets/s, GPU utilization
    and memory (Ops Agent), SM / tensor-pipe activity and NVLink / PCIe traffic (DCGM,
    when present), the trainer's tokens/s and MFU (from gcpgpu.node.reporter), and
    the last 15 minutes as a sparkline. The global --format json also streams rows.

    \b
    From each NIC's own counters (gcpgpu.node.nics on every node): the GPU fabric's
    and the host NICs' Gbit/s apart (on a machine with no GPU NICs the host NIC is
    the fabric), congestion notifications and retransmits per second; the header
    says which source each column comes from, and a column a family cannot measure
    says so. Stragglers on the network are judged on the fabric, NIC by NIC.
    """
    from gcpgpu.metrics.tail import Tail, run
    from gcpgpu.metrics.target import pick

    kind, name = pick(cluster, job)
    if gpus and kind == "job":
        raise UsageProblem("--gpus needs --cluster: Vertex AI reports accelerator use per task, not per GPU")
    if nics and kind == "job":
        raise UsageProblem("--nics needs --cluster: Vertex AI reports network use per task, not per NIC")
    if not 1 <= interval <= 3600:
        raise UsageProblem(f"--interval {interval:g} must be between 1 and 3600 seconds")
    fmt = fmt or settings.format  # the root's table|json|yaml when no local --format is given
    project = settings.project
    run(Tail(settings.clients, project, kind, name, per_gpu=gpus, per_nic=nics, job=job, region=settings.optional("region"),
             all_rows=all_rows), fmt, interval, once)


@metrics.command()
@_target_options
@click.option("--since", metavar="DURATION", help="How far back: e.g. 30m, 2h, 1d (at most six weeks). Default: "
              "with --job, the job's run (from its start to its end, with a margin); else 1h.")
@click.option("-o", "--output", required=True, metavar="FILE", help="Where to write: FILE.html or FILE.png.")
@click.pass_obj
def report(settings: Settings, cluster: str | None, job: str | None, since: str | None, output: str) -> None:
    """Plot a cluster's or job's metrics over time to an HTML page or a PNG.

    One panel per metric, one line per node, stragglers in red and named. The HTML
    page adds each node's averages over the window and embeds the figure. A job's
    report covers its run unless --since says otherwise, is titled with the job's
    name, shades its run, averages over the run alone, and draws the training
    panels per step from the job's own log (the trainer's step lines, or a
    command's lines that carry a step).
    """
    from gcpgpu.metrics.query import Window, parse_since
    from gcpgpu.metrics.report import check_output, make_report
    from gcpgpu.metrics.target import pick, resolve

    kind, name = pick(cluster, job)
    seconds = parse_since(since) if since is not None else None
    path = check_output(output)
    project = settings.project
    target = resolve(settings.clients, project, kind, name)
    window = Window.since(seconds) if seconds is not None else None
    run = None
    if job:
        span_window, run = _job_run(settings, job, explain=window is None)
        window = window or span_window
    summary = make_report(settings.clients, target, window or Window.since(3600), path, run)
    if settings.format != "table":
        emit(summary)
        return
    slow = f"; stragglers: {', '.join(summary['stragglers'])}" if summary["stragglers"] else ""
    info(f"Wrote {summary['output']} ({len(summary['panels'])} panel(s){slow}).")


def _job_run(settings: Settings, job: str, explain: bool) -> tuple[Any, Any]:
    """(the job's run as a report window, or None: the last hour; what the report shows of the job, or None
    when its id says too little), saying which window when `explain` (no --since)."""
    from gcpgpu.errors import CloudError
    from gcpgpu.metrics import jobspan, steps
    from gcpgpu.metrics.report import JobRun

    span = jobspan.read(settings.clients, settings.project, job, settings.optional("region"), strict=True)
    run = None
    if span is not None:
        try:
            logged = steps.read(settings.clients, settings.project, jobspan.job_id(job, settings.optional("region")))
        except CloudError as e:  # no permission on the log, say: the trainer's panels come from Monitoring
            info(f"note: the job's log could not be read ({e}): training panels per minute, from Cloud Monitoring")
            logged = None
        run = JobRun(span.id, span.name, span.started, span.ended, logged)
    window = span.window(jobspan.clock()) if span is not None else None
    if not explain:
        return None, run
    if window is None:
        why = ("it has not started" if span is not None else
               "its start and end are unknown (give the id 'gcpgpu job submit' printed, or --region for a number)")
        info(f"note: plotting the last hour: {why}; --since chooses the window")
        return None, run
    ended = "" if span.ended is None else f" to its end at {_clock(span.ended)}"
    info(f"Plotting job {span.id} from its start at {_clock(span.started)}{ended} ({span.state}), with a margin "
         "either side; --since chooses another window")
    return window, run


def _clock(epoch: float | None) -> str:
    import datetime as dt

    return "?" if epoch is None else dt.datetime.fromtimestamp(epoch, dt.timezone.utc).strftime("%H:%M:%S UTC")


@metrics.group()
def dashboard() -> None:
    """A Cloud Monitoring dashboard for a cluster (network, GPU utilization, training throughput)."""


@dashboard.command("create")
@click.option("--cluster", required=True, metavar="NAME", help="The gcpgpu cluster.")
@click.pass_obj
def dashboard_create(settings: Settings, cluster: str) -> None:
    """Create the cluster's dashboard, or update it to the cluster's current nodes."""
    from gcpgpu.metrics import dashboard as dash
    from gcpgpu.metrics.target import check_cluster_name, resolve

    name = check_cluster_name(cluster)
    project = settings.project
    result = dash.create(settings.clients, resolve(settings.clients, project, "cluster", name))
    if settings.format != "table":
        emit(result)
        return
    info(f"Dashboard {result['action']} for cluster {name}: {result['url']}")


@dashboard.command("delete")
@click.option("--cluster", required=True, metavar="NAME", help="The gcpgpu cluster.")
@click.pass_obj
def dashboard_delete(settings: Settings, cluster: str) -> None:
    """Delete the cluster's dashboard (none left is not an error)."""
    from gcpgpu.metrics import dashboard as dash
    from gcpgpu.metrics.target import check_cluster_name

    name = check_cluster_name(cluster)
    gone = dash.delete(settings.clients, settings.project, name)
    if settings.format != "table":
        emit({"cluster": name, "deleted": gone})
        return
    info(f"Deleted {len(gone)} dashboard(s) of cluster {name}." if gone else f"No dashboard for cluster {name}.")
