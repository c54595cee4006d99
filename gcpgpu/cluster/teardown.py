"""Deleting what was observed of a cluster, in the order GCP requires, past every failure.

Used by `down` (everything of the cluster) and by a failed `up`'s roll-back (only what that attempt
created). Nodes go first, then reservations, placement policies, firewall rules, Cloud NAT routers,
subnetworks and networks. A deletion that fails does not stop the rest; what failed because another resource still
used it is tried once more after everything else (its users are gone by then). The result is one
line per resource that could not be deleted.
"""

from __future__ import annotations

from typing import Any

from gcpgpu.errors import describe_google_error, is_google_error
from gcpgpu.gcp.clients import Clients
from gcpgpu.gcp.errors import is_not_found
from gcpgpu.gcp.operations import call, parallel, wait_all

from .observe import Observed

# (Observed list, client, scope argument, resource argument, words for people)
ORDER = [
    ("nodes", "InstancesClient", "zone", "instance", "node"),
    ("reservations", "ReservationsClient", "zone", "reservation", "reservation"),
    ("policies", "ResourcePoliciesClient", "region", "resource_policy", "placement policy"),
    ("firewalls", "FirewallsClient", None, "firewall", "firewall rule"),
    ("routers", "RoutersClient", "region", "router", "Cloud NAT router"),
    ("subnets", "SubnetworksClient", "region", "subnetwork", "subnetwork"),
    ("networks", "NetworksClient", None, "network", "network"),
]


def items_of(obs: Observed, kind: str) -> list[tuple[str | None, str]]:
    """(zone or region or None, name) of every resource of one kind in `obs`."""
    if kind == "nodes":
        return [(n.zone, n.name) for n in obs.nodes]
    if kind == "reservations":
        return [(r["zone"], r["name"]) for r in obs.reservations]
    if kind == "policies":
        return [(p["region"], p["name"]) for p in obs.policies]
    if kind in ("subnets", "routers"):
        return [(s["region"], s["name"]) for s in getattr(obs, kind)]
    return [(None, n) for n in getattr(obs, kind)]


def one_line(exc: BaseException) -> str:
    """An error as one line, whatever it is (a Google error, a connection failure, a timeout)."""
    text = describe_google_error(exc) if is_google_error(exc) else f"{type(exc).__name__}: {exc}"
    return " ".join(text.split())[:300]


def delete_batch(clients: Clients, project: str, client_name: str, scope: str | None, field_name: str,
                 items: list[tuple[str | None, str]]) -> list[BaseException | None]:
    """Delete items in parallel and wait for them; each item's error (None: deleted or already gone)."""
    client = clients.compute(client_name)

    def delete(item: tuple[str | None, str]) -> Any:
        where, name = item
        req: dict[str, Any] = {"project": project, field_name: name}
        if scope:
            req[scope] = where
        return call(client.delete, req)

    started = parallel(delete, items)
    errors: list[BaseException | None] = [r if isinstance(r, BaseException) else None for r in started]
    pending = [(i, op) for i, op in enumerate(started) if not isinstance(op, BaseException) and op is not None]
    for (i, _op), err in zip(pending, wait_all(clients, project, [op for _i, op in pending]), strict=True):
        errors[i] = err
    return [None if e is not None and is_not_found(e) else e for e in errors]


def delete_observed(clients: Clients, project: str, obs: Observed, step: Any = None) -> list[str]:
    """Delete everything in `obs` in dependency order; one line per resource left, [] when all are gone."""
    failed: list[tuple[tuple, tuple[str | None, str], BaseException]] = []
    for entry in ORDER:
        kind, client_name, scope, field_name, word = entry
        items = items_of(obs, kind)
        if not items:
            continue
        if step:
            step(field_name, f"Deleting {len(items)} {word}(s)")
        for item, err in zip(items, delete_batch(clients, project, client_name, scope, field_name, items),
                             strict=True):
            if err is not None:
                failed.append((entry, item, err))
    # Once more, in the same order, for what failed: a resource in use (resourceInUseByAnotherResource)
    # by something deleted since, or a passing error.
    left: list[tuple[tuple, tuple[str | None, str], BaseException]] = []
    for entry in ORDER:
        batch = [f for f in failed if f[0] is entry]
        if not batch:
            continue
        _kind, client_name, scope, field_name, _word = entry
        errs = delete_batch(clients, project, client_name, scope, field_name, [f[1] for f in batch])
        left += [(f[0], f[1], e) for f, e in zip(batch, errs, strict=True) if e is not None]
    return [f"{entry[4]} {name}" + (f" ({where})" if where else "") + f": {one_line(err)}"
            for entry, (where, name), err in left]
