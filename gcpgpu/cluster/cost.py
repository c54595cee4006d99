"""What a cluster has run and cost so far, from what Compute Engine reports on each node.

A node is billed for its machine while it runs (Compute Engine's billing: vCPU, memory and GPUs
stop when the VM stops; disks do not, and are not counted here). Each node's current run began at
its `lastStartTimestamp` (its `creationTimestamp` when the API has no start yet) and ends now,
or at `lastStopTimestamp` for a node that has stopped since. Earlier runs, and nodes deleted
since (a recovery replaces a lost node with a new VM), are not visible on the nodes and are not
counted: the figure is a floor for the cluster's life, exact for its current run.

A node's hourly price is its machine type's in its region under its provisioning model (on-demand, Spot,
flex-start, reservation), from the Cloud Billing Catalog or the bundled table (gcpgpu/pricing says which).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gcpgpu import pricing
from gcpgpu.gcp import clock
from gcpgpu.times import format_duration, parse_timestamp

# States in which Compute Engine bills the machine (instance lifecycle: PROVISIONING and STAGING
# are not billed; STOPPING is until the VM is TERMINATED).
BILLED = ("RUNNING", "STOPPING", "SUSPENDING")


@dataclass(frozen=True)
class NodeRun:
    """One node's current (or last) run: when it began, how long, and at what hourly price."""

    name: str
    started: float | None
    seconds: float
    running: bool
    price_per_hour: float | None  # None: the catalog has no price for this machine and model

    @property
    def cost(self) -> float | None:
        return None if self.price_per_hour is None else self.price_per_hour * self.seconds / 3600


def ended_by_run_limit(node: Any) -> bool:
    """Whether a stopped node's last run lasted its whole maxRunDuration (Compute Engine ended it)."""
    started, stopped = parse_timestamp(node.last_start), parse_timestamp(node.last_stop)
    if not node.max_run_s or started is None or stopped is None:
        return False
    return stopped - started >= node.max_run_s - 1  # Google may end it up to 30 s late, never early


def node_price(machine_type: str, provisioning: str, region: str | None = None) -> float | None:
    """The hourly price per node of a machine type in a region (None: us-central1's) under a provisioning model
    (STANDARD, SPOT, FLEX_START or flex-start, RESERVATION_BOUND), or None where none is known (a VM of a type
    the catalog does not know has no price: not an error)."""
    return pricing.current().price(machine_type, provisioning, region)


def price_note(machine_type: str, region: str | None, *, fetch: bool = True) -> str:
    """Where a node's price comes from, in a few words: 'Cloud Billing Catalog, us-east5, read 2026-12-07'."""
    from gcpgpu import catalog

    book = pricing.current(fetch=fetch)
    try:
        prices = book.node(catalog.get_machine_type(machine_type), region)
    except Exception:  # an unknown machine type has no price note
        return ""
    if prices.source == pricing.book.CATALOG:
        return f"{prices.source}, {prices.region}, read {prices.as_of}"
    return f"{prices.source}, prices of {prices.as_of}, unverified, not per region: {book.note.rsplit(': ', 1)[-1]}"


def plan_price(plan: Any) -> float | None:
    """A cluster plan's hourly price, all nodes, in its region under its provisioning model; None if unknown. A
    plan calls no API: the cached Billing Catalog, else the bundled table."""
    per_node = pricing.current(fetch=False).price(plan.machine.name, plan.spec.provisioning, plan.region)
    return None if per_node is None else round(per_node * plan.spec.nodes, 2)


def plan_prices_source(plan: Any) -> dict[str, str]:
    """pricesAsOf and priceSource of a plan's JSON."""
    from gcpgpu import catalog

    prices = pricing.current(fetch=False).node(catalog.get_machine_type(plan.machine.name), plan.region)
    return {"pricesAsOf": prices.as_of, "priceSource": prices.source}


def node_run(node: Any, now: float | None = None) -> NodeRun:
    """The run of a cluster Node (cluster.observe.Node) as of `now`."""
    now = clock.now() if now is None else now
    started = parse_timestamp(node.last_start) or parse_timestamp(node.created)
    stopped = parse_timestamp(node.last_stop)
    running = node.status in BILLED and started is not None and started <= now
    if running:
        seconds = now - started
    elif started is not None and stopped is not None and stopped > started:
        seconds = stopped - started
    else:
        seconds = 0.0
    return NodeRun(node.name, started, max(seconds, 0.0), running,
                   node_price(node.machine_type, node.provisioning, _region(node)))


def _region(node: Any) -> str | None:
    """A node's region: observe.Node's, else its zone's (a record of a node that carries only its zone)."""
    zone = getattr(node, "zone", "") or ""
    return getattr(node, "region", None) or (zone.rsplit("-", 1)[0] if zone else None)


def summary(nodes: list[Any], now: float | None = None) -> dict[str, Any]:
    """UPTIME (the longest current run, None when no node runs), node-hours and COST SO FAR (None
    when any node's price is unknown: a partial sum would look like the whole bill)."""
    runs = [node_run(n, now) for n in nodes]
    live = [r.seconds for r in runs if r.running]
    costs = [r.cost for r in runs]
    known = all(c is not None for c in costs)
    return {"uptime_s": max(live) if live else None,
            "node_hours": round(sum(r.seconds for r in runs) / 3600, 3),
            "cost_usd": round(sum(c for c in costs if c is not None), 2) if known and runs else None}


def shown_uptime(value: float | None) -> str:
    return "-" if value is None else format_duration(value)


def shown_cost(value: float | None) -> str:
    return "-" if value is None else f"${value:,.2f}"


def node_rows(nodes: list[Any], now: float | None = None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Each node's row (Node.row()) with its uptime and cost so far, and the cluster's totals."""
    now = clock.now() if now is None else now
    rows = []
    for n in nodes:
        run = node_run(n, now)
        rows.append({**n.row(), "uptime_s": round(run.seconds) if run.running else None,
                     "cost_usd": None if run.cost is None else round(run.cost, 2),
                     **({"ends_at": n.ends_at} if n.ends_at else {})})
    return rows, summary(nodes, now)


def cost_line(nodes: list[Any], spent: dict[str, Any]) -> str:
    """The line under `cluster status`'s table: uptime, node-hours, cost so far and its prices' date,
    and when Compute Engine's maxRunDuration ends the first node."""
    cost = shown_cost(spent["cost_usd"]) if spent["cost_usd"] is not None else "- (no catalog price)"
    note = ""
    if nodes and spent["cost_usd"] is not None:
        words = price_note(nodes[0].machine_type, nodes[0].region)
        note = f" ({words})" if words else ""
    ends = sorted(n.ends_at for n in nodes if n.ends_at)
    cap = f"; Compute Engine ends the first node at {ends[0]} (--max-run-duration)" if ends else ""
    return (f"uptime {shown_uptime(spent['uptime_s'])}, {spent['node_hours']:g} node-hours, "
            f"cost so far {cost}{note}{cap}")
