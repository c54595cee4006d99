"""Deleting what was observed of a cluster, in the order GCP requires, past every failure.

Used by `down` (everything of the cluster) and by a failed `up`'s roll-back (only what that attempt
created). Nodes go first, then reservations, placement policies, firewall rules, Cloud NAT routers,
subnetworks and networks. A deletion that fails does not stop the rest; what failed because another resource still
used it is tried once more after everything else (its users are gone by then). The result is one
line per resource that could not be deleted.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gcpgpu.errors import one_line
from gcpgpu.gcp.clients import Clients
from gcpgpu.gcp.errors import is_not_found
from gcpgpu.gcp.operations import call, parallel, wait_all

from .kinds import KINDS, Kind
from .observe import Observed


def delete_batch(clients: Clients, project: str, kind: Kind, items: list[tuple[str | None, str]],
                 fence: Callable[[], None] = lambda: None) -> list[BaseException | None]:
    """Delete (zone/region, name) items of one kind in parallel and wait for them; each item's error
    (None: deleted or already gone). `fence()` runs right before each request is sent."""
    client = clients.compute(kind.client)

    def delete(item: tuple[str | None, str]) -> Any:
        fence()
        where, name = item
        req: dict[str, Any] = {"project": project, kind.field: name}
        if kind.scope:
            req[kind.scope] = where
        return call(client.delete, req)

    started = parallel(delete, items)
    errors: list[BaseException | None] = [r if isinstance(r, BaseException) else None for r in started]
    pending = [(i, op) for i, op in enumerate(started) if not isinstance(op, BaseException) and op is not None]
    for (i, _op), err in zip(pending, wait_all(clients, project, [op for _i, op in pending]), strict=True):
        errors[i] = err
    return [None if e is not None and is_not_found(e) else e for e in errors]


def delete_observed(clients: Clients, project: str, obs: Observed, step: Any = None,
                    fence: Callable[[], None] = lambda: None) -> list[str]:
    """Delete everything in `obs` in dependency order; one line per resource left, [] when all are gone.
    `fence()` runs before each kind's batch and each request (it raises to stop: the run lost its lease)."""
    failed: list[tuple[Kind, tuple[str | None, str], BaseException]] = []
    for kind in KINDS:
        items = kind.items(obs.of(kind))
        if not items:
            continue
        fence()
        if step:
            step(kind.field, f"Deleting {len(items)} {kind.word}(s)")
        for item, err in zip(items, delete_batch(clients, project, kind, items, fence), strict=True):
            if err is not None:
                failed.append((kind, item, err))
    # Once more, in the same order, for what failed: a resource in use (resourceInUseByAnotherResource)
    # by something deleted since, or a passing error.
    left: list[tuple[Kind, tuple[str | None, str], BaseException]] = []
    for kind in KINDS:
        batch = [f for f in failed if f[0] is kind]
        if not batch:
            continue
        fence()
        errs = delete_batch(clients, project, kind, [f[1] for f in batch], fence)
        left += [(f[0], f[1], e) for f, e in zip(batch, errs, strict=True) if e is not None]
    return [f"{kind.word} {name}" + (f" ({where})" if where else "") + f": {one_line(err)}"
            for kind, (where, name), err in left]
