"""What a cluster job has run and cost so far: node-hours x the catalog's price (cluster/cost.py).

The job's window runs from its submission to its end (now while it runs). Each of its nodes counts
for the part of that window it was up: a node that is there now from the later of the job's start
and the VM's own start (a node a recovery recreated starts late) to the window's end or the VM's
stop; a node a recovery replaced counts from its own start (the job's, or the recovery that made it)
to that recovery, as the job's history records it. Time between a loss and the new VM is not billed
and not counted. Disks are not counted, as `cluster status` does not count them. A Slurm cluster's job counts its
nodes for the time it held them (held): not while it waited in the queue or for its requeue.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from gcpgpu.cluster import cost
from gcpgpu.cluster.observe import observe_nodes
from gcpgpu.gcp import clock
from gcpgpu.gcp.clients import Clients
from gcpgpu.jobs.state import JobState, Spent
from gcpgpu.times import parse_timestamp


def job_spent(clients: Clients, project: str, state: JobState | Mapping[str, Any],
              now: float | None = None) -> dict[str, Any]:
    """uptime_s, node_hours, cost_usd (None without a catalog price) and the price_per_hour of a node of
    a cluster job's `state` (a JobState, or its dict)."""
    if not isinstance(state, JobState):
        state = JobState.from_dict(state)
    now = clock.now() if now is None else now
    begin = parse_timestamp(state.created)
    if begin is None:
        return {"uptime_s": None, "node_hours": None, "cost_usd": None, "price_per_hour": None}
    end = parse_timestamp(state.ended) or now
    if state.waits_in_queue:  # a shared queue's job (the backend says: jobs/cluster/backend.py)
        return _queued_spent(clients, project, state, begin, end)
    names = {r["node"] for r in state.per_node}
    nodes = [n for n in observe_nodes(clients, project, state.cluster or "") if n.name in names]
    seconds = 0.0
    since = {name: begin for name in names}  # when each node's current VM joined the job, as recorded
    for entry in state.history:
        if entry.get("kind") == "retry":
            continue  # same nodes, still up
        at = parse_timestamp(entry.get("at")) or begin
        for name in entry.get("lost") or []:
            seconds += max(0.0, min(at, end) - since.get(name, begin))
            since[name] = at
    for node in nodes:
        run = cost.node_run(node, now)
        if run.started is None:
            continue
        stop = end if run.running else min(end, run.started + run.seconds)
        seconds += max(0.0, stop - max(begin, run.started))
    provisioning = nodes[0].provisioning if nodes else "STANDARD"
    return _figures(end - begin, seconds, cost.node_price(str(state.machine_type or ""), provisioning,
                                                          nodes[0].region if nodes else None))


def _figures(window_s: float, node_s: float, price: float | None) -> dict[str, Any]:
    """job_spent's figures: `price_per_hour` is the node's (None: no catalog price), what goodput's
    lost node-time is priced at (`job status`, `cost report`)."""
    return {"uptime_s": round(window_s), "node_hours": round(node_s / 3600, 3),
            "cost_usd": None if price is None else round(price * node_s / 3600, 2), "price_per_hour": price}


def held(state: JobState, end: float) -> list[tuple[float, float]]:
    """When a Slurm cluster's job held its nodes: each attempt from its start (the first's `started`, a later
    one's history entry's `delivered`) to its loss, preemption or requeue (the next entry's `at`) or the job's
    end (`end`: now while it runs). Queued, and between a requeue and its next start, it holds none."""
    starts = [parse_timestamp(state.started)] + [parse_timestamp(h.get("delivered")) for h in state.history]
    stops = [parse_timestamp(h.get("at")) for h in state.history] + [end]
    return [(a, min(b, end)) for a, b in zip(starts, stops, strict=True) if a is not None and b is not None and b > a]


def _queued_spent(clients: Clients, project: str, state: JobState, begin: float, end: float) -> dict[str, Any]:
    """job_spent of a Slurm cluster's job: its nodes (nnodes, whole nodes: --exclusive) for the time it held them."""
    seconds = sum(b - a for a, b in held(state, end)) * int(state.nnodes or 1)
    nodes = observe_nodes(clients, project, state.cluster or "")
    price = cost.node_price(str(state.machine_type or ""), nodes[0].provisioning if nodes else "STANDARD",
                            nodes[0].region if nodes else None)
    return _figures(end - begin, seconds, price)


def with_spent(clients: Clients, project: str, state: JobState) -> JobState:
    """`state` with job_spent's figures, and uptime and cost as `job status`'s table shows them."""
    got = job_spent(clients, project, state)
    return replace(state, spent=Spent(uptime_s=got["uptime_s"], node_hours=got["node_hours"],
                                      cost_usd=got["cost_usd"], uptime=cost.shown_uptime(got["uptime_s"]),
                                      cost=cost.shown_cost(got["cost_usd"]), price_per_hour=got["price_per_hour"]))
