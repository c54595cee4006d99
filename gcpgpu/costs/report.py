"""`gcpgpu cost report`: what the project's clusters and jobs cost, from gcpgpu's own records of node runs.

What it reads (every figure is the COST SO FAR its own view shows, so the report sums what was seen):

    live clusters      each node's run (cluster/cost.py: `cluster status`'s COST SO FAR), and each job in the
                       cluster's job records (jobs/cluster/spent.py: `job status`'s; a Slurm cluster's job
                       counts its nodes for the time it held them, so jobs sharing a cluster split it)
    deleted clusters   the cost record `cluster down` (or the cluster's own autostop or spend cap) kept
                       (costs/ledger.py), with its jobs' figures as they were then
    Vertex AI jobs     the region's custom jobs (--region): node-hours, and the cost `job status` shows

A cluster's time that no job used is its "(no job)" row in --by job, so --by job and --by cluster add
up to the same total. --since keeps what ran within the window (a cluster that ended before it is left
out; one kept keeps all its jobs) and counts each with its whole cost so far. Each job's lost goodput parts
(jobs/goodput.py) are priced at its node price (goodput.lost_usd) where its log tells them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gcpgpu.errors import UsageProblem
from gcpgpu.gcp.clients import Clients
from gcpgpu.times import parse_duration, parse_timestamp

BY = ("job", "cluster", "label", "user")
UNKNOWN_USER = "unknown"
NO_JOB = "(no job)"
NO_LABEL = "(no label)"
MAX_SINCE_S = 10 * 366 * 86400


def parse_by(value: str) -> str:
    if value not in BY:
        raise UsageProblem(f"--by {value!r} is not a grouping: use one of {', '.join(BY)}")
    return value


def parse_since(value: str) -> int:
    """'30d', '12h' -> seconds (from a minute to ten years); one line naming --since otherwise."""
    if str(value).strip().startswith("-"):
        raise UsageProblem(f"--since {value!r} is negative: give how far back to look, e.g. --since 30d")
    return parse_duration(value, "--since", at_least=60, at_most=MAX_SINCE_S)


def _vertex_items(clients: Clients, project: str, region: str, now: float) -> list[dict[str, Any]]:
    from gcpgpu.jobs import ids
    from gcpgpu.jobs.vertex import describe, with_spent

    from .ledger import user_labels

    out = []
    pager = clients.job_service(region).list_custom_jobs(
        request={"parent": f"projects/{project}/locations/{region}", "page_size": 100})
    for job in pager:
        state = with_spent(describe(ids.vertex(job.name), job), now)
        spent = state.spent
        out.append({"kind": "job", "job": state.id, "name": state.name, "cluster": f"vertex:{region}",
                    "state": state.state, "nodes": state.nodes, "machine_type": state.machine_type,
                    "started": state.created, "ended": state.ended, "labels": user_labels(dict(job.labels)),
                    "user": state.submitter,
                    "node_hours": spent.node_hours if spent else 0.0, "cost_usd": spent.cost_usd if spent else None})
    return out


def _cluster_items(record: dict[str, Any], live: bool) -> list[dict[str, Any]]:
    """A cluster's line and its jobs' lines, from its cost record (ledger.snapshot's)."""
    cluster = {"kind": "cluster", "cluster": record["cluster"], "machine_type": record.get("machine_type"),
               "nodes": record.get("nodes"), "provisioning": record.get("provisioning"),
               "region": record.get("region"), "started": record.get("started"),
               "ended": None if live else record.get("ended"), "labels": record.get("labels") or {},
               "node_hours": record.get("node_hours") or 0.0, "cost_usd": record.get("cost_usd"),
               "live": live, "user": record.get("owner"), **({"why": record["why"]} if record.get("why") else {})}
    jobs = [{"kind": "job", "job": j.get("id"), "name": j.get("name"), "cluster": record["cluster"],
             "state": j.get("state"), "nodes": j.get("nnodes"), "machine_type": record.get("machine_type"),
             "started": j.get("created"), "ended": j.get("ended") if not live or j.get("final") else None,
             "labels": record.get("labels") or {}, "node_hours": j.get("node_hours") or 0.0,
             "cost_usd": j.get("cost_usd"), "lost_usd": j.get("lost_usd"), "user": j.get("submitter")}
            for j in record.get("jobs") or []]
    return [cluster, *jobs]


def items(clients: Clients, project: str, region: str | None, now: float,
          say: Callable[[str], None] = lambda _line: None) -> list[dict[str, Any]]:
    """Every cluster (live, then deleted) and job gcpgpu has a record of, each with its node-hours and cost."""
    from gcpgpu.cluster.observe import project_nodes

    from . import ledger

    out: list[dict[str, Any]] = []
    for name in sorted({n.cluster for n in project_nodes(clients, project) if n.cluster}):
        record = ledger.snapshot(clients, project, name, now, goodput=True)
        if record is not None:
            out += _cluster_items(record, live=True)
    for record in ledger.read(clients, project):
        out += _cluster_items(record, live=False)
    if region:
        out += _vertex_items(clients, project, region, now)
    else:
        say("note: no region set, so no Vertex AI jobs counted (pass --region REGION)")
    return out


def within(item: dict[str, Any], since: float) -> bool:
    """Whether `item` ran at some time after `since` (one that has not ended runs now)."""
    ended = parse_timestamp(item.get("ended"))
    return ended is None or ended >= since


def select(found: list[dict[str, Any]], since: float) -> list[dict[str, Any]]:
    """What --since keeps: each cluster that ran after `since` with all its jobs (so that its jobs and its
    "(no job)" time add up to its cost), and each Vertex AI job that did."""
    kept = {i["cluster"] for i in found if i["kind"] == "cluster" and within(i, since)}
    return [i for i in found if i["cluster"] in kept or (i["kind"] == "job" and str(i["cluster"]).startswith("vertex:")
                                                          and within(i, since))]


def _add(row: dict[str, Any], item: dict[str, Any]) -> None:
    row["node_hours"] = round(row["node_hours"] + float(item.get("node_hours") or 0.0), 3)
    if item.get("cost_usd") is None:
        row["unpriced"] += 1
    else:
        row["cost_usd"] = round(row["cost_usd"] + float(item["cost_usd"]), 2)
    for part, usd in (item.get("lost_usd") or {}).items():
        row["lost_usd"][part] = round(row["lost_usd"].get(part, 0.0) + usd, 2)


def _keys(item: dict[str, Any], by: str) -> list[str]:
    if by == "cluster":
        return [item["cluster"]]
    if by == "user":  # a job's submitter; a cluster's time no job used, its maker's (gcp/identity.py)
        return [item.get("user") or UNKNOWN_USER]
    if by == "label":
        return [f"{k}={v}" for k, v in sorted((item.get("labels") or {}).items())] or [NO_LABEL]
    return [item.get("job") or f"{item['cluster']} {NO_JOB}"]


def group(found: list[dict[str, Any]], by: str) -> list[dict[str, Any]]:
    """The report's rows: `found` (items()) summed by job, cluster, label or user. By job, each cluster's
    time no job used is a row of its own; by any other, a cluster counts its whole cost and its jobs
    (part of it) are not counted again, and a Vertex AI job counts as itself."""
    rows: dict[str, dict[str, Any]] = {}
    clusters = [i for i in found if i["kind"] == "cluster"]
    jobs = [i for i in found if i["kind"] == "job"]
    if by in ("job", "user"):  # a shared cluster's cost split among its jobs: theirs, then the time none used
        counted = list(jobs)
        for c in clusters:
            mine = [j for j in jobs if j["cluster"] == c["cluster"] and j["started"] and c["started"]
                    and j["started"] >= c["started"]]
            known = c["cost_usd"] is not None and all(j["cost_usd"] is not None for j in mine)
            counted.append({**c, "job": None,
                            "node_hours": max(0.0, round(c["node_hours"] - sum(j["node_hours"] for j in mine), 3)),
                            "cost_usd": max(0.0, round(c["cost_usd"] - sum(j["cost_usd"] for j in mine), 2))
                            if known else None, "lost_usd": None})
    else:
        counted = clusters + [j for j in jobs if str(j["cluster"]).startswith("vertex:")]
    for item in counted:
        for key in _keys(item, by):
            row = rows.setdefault(key, {by: key, "node_hours": 0.0, "cost_usd": 0.0, "unpriced": 0, "lost_usd": {}})
            if by == "job":
                row.update(name=item.get("name") or "-", cluster=item["cluster"], state=item.get("state") or "-")
            _add(row, item)
    return sorted(rows.values(), key=lambda r: (-r["cost_usd"], r[by]))


def total(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {"node_hours": 0.0, "cost_usd": 0.0, "unpriced": 0, "lost_usd": {}}
    for r in rows:
        _add(out, r)
        out["unpriced"] += r["unpriced"]
    return out
