"""`gcpgpu cost`: what the project's clusters and jobs cost, from gcpgpu's own records (costs/report.py)."""

from __future__ import annotations

import click

from gcpgpu.output import Column, emit, info
from gcpgpu.settings import Settings


def _money(value: float | None) -> str:
    return "-" if value is None else f"${value:,.2f}"


@click.group()
def cost() -> None:
    """What the project's GPU clusters and jobs have cost, by job, cluster, label or user."""


@cost.command()
@click.option("--since", default="30d", show_default=True, metavar="DURATION",
              help="What ran within this long before now (e.g. 7d, 12h): each cluster (with all its jobs) and Vertex AI "
              "job counts its whole cost.")
@click.option("--by", "by", default="job", show_default=True, metavar="job|cluster|label|user",
              help="Sum by job (a cluster's time no job used is its '(no job)' row), cluster (Vertex AI jobs by "
              "region), label (user labels: a cluster under each of its labels), or user.")
@click.pass_obj
def report(settings: Settings, since: str, by: str) -> None:
    """Node-hours and dollars of clusters (live and deleted), cluster jobs and Vertex AI jobs.

    \b
    Each figure is the COST SO FAR its own view showed: a live cluster's nodes' runs ('cluster status'),
    a job's nodes for its time ('job status'; jobs sharing a Slurm cluster split it by nodes and time),
    a deleted cluster's as 'cluster down' recorded it. LOST is what the jobs' lost goodput parts cost
    (recoveries, restarts, stalls, waits) at their node price.
    """
    from gcpgpu.costs import report as costs
    from gcpgpu.gcp import clock

    by = costs.parse_by(by)
    window = costs.parse_since(since)
    now = clock.now()
    found = costs.select(costs.items(settings.clients, settings.project, settings.optional("region"), now, info),
                         now - window)
    rows = costs.group(found, by)
    whole = costs.total(rows)
    notes = []
    if by == "user":
        notes.append("a job counts for who submitted it, a cluster's time no job used for who made the cluster"
                     + ("; 'unknown': made before gcpgpu kept who made it" if any(r["user"] == "unknown" for r in rows)
                        else ""))
    if by == "label":
        notes.append("a cluster with several labels counts under each: the rows may add up to more than the total")
    if whole["unpriced"]:
        notes.append(f"{whole['unpriced']} cluster(s) or job(s) have no price (no catalog price; Vertex AI's own "
                     "prices are not in the catalog): their node-hours are counted, their dollars are not")
    if settings.format != "table":
        emit({"since": since, "by": by, "rows": rows, "total": whole, "notes": notes})
        return
    for r in rows:
        r["lost"] = _money(sum(r["lost_usd"].values())) if r["lost_usd"] else "-"
        r["shown_cost"] = _money(r["cost_usd"]) + (" +?" if r["unpriced"] else "")
    columns: list = [Column(by, by.upper())]
    if by == "job":
        columns += [Column("name", "NAME"), Column("cluster", "CLUSTER"), Column("state", "STATE")]
    columns += [Column("node_hours", "NODE-HOURS", justify="right"), Column("shown_cost", "COST", justify="right"),
                Column("lost", "LOST", justify="right")]
    emit(rows, columns, title=f"Cost by {by}, since {since} ago", empty="Nothing ran in that time.")
    lost = sum(whole["lost_usd"].values())
    parts = ", ".join(f"{k.replace('_', ' ')} {_money(v)}" for k, v in sorted(whole["lost_usd"].items()) if v)
    info(f"total {_money(whole['cost_usd'])} over {whole['node_hours']:g} node-hours"
         + (f"; lost goodput {_money(lost)} ({parts})" if parts else ""))
    for line in notes:
        info(f"note: {line}")
