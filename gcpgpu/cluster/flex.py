"""Flex-start nodes: one instances.insert per node, each waiting for capacity for a while.

DWS flex-start on Compute Engine queues a VM when the request carries
`params.requestValidForDuration` (Compute v1 InstanceParams: "Relative deadline for waiting for
capacity. Relevant only for Instances.Insert API"). The VM exists at once as PENDING, then goes
PROVISIONING -> RUNNING when capacity appears; when the window ends unfilled GCP deletes it
(gcp-facts section 10). `cluster up` shows that it is waiting, and treats a window that ends
with any node unfilled like a stockout: it removes this zone's nodes and tries the next zone.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

from gcpgpu.gcp.errors import Failure, classify
from gcpgpu.gcp.operations import call, parallel, wait_all

from .observe import observe_nodes
from .plan import Plan

if TYPE_CHECKING:
    from .apply import Cluster, Created

POLL_SECONDS = 1.0
GRACE_SECONDS = 120.0  # beyond the request's window before gcpgpu stops waiting on its own


def place_flex(cluster: Cluster, plan: Plan, missing: list[str], zone: str, created: Created) -> Failure | None:
    """Queue one flex-start insert per missing node in `zone` and wait until none is PENDING.
    None on success; a stockout Failure (zone cleaned) when capacity did not come in time."""
    from google.cloud import compute_v1

    from .apply import _is_google

    wait_s = int(plan.spec.flex_wait or 0)
    cluster.report.step("instances", f"Requesting {len(missing)} flex-start {plan.machine.name} VM(s) in {zone} "
                                     f"(one instances.insert each, valid for {_minutes(wait_s)})")

    def insert(name: str) -> Any:
        body = compute_v1.Instance.from_json(json.dumps(cluster._own(plan.flex_insert_body(name, zone))))
        return call(cluster.c("InstancesClient").insert, {"project": cluster.project, "zone": zone,
                                                          "instance_resource": body})

    ops = parallel(insert, missing)
    created.instances += [(zone, n) for n in missing]
    errors = [r for r in ops if isinstance(r, BaseException)]
    errors += [e for e in wait_all(cluster.clients, cluster.project, [o for o in ops if not isinstance(o, BaseException)])
               if e is not None]
    if errors:
        if not _is_google(errors[0]):
            raise errors[0]
        return _give_up(cluster, plan, zone, missing, created, classify(errors[0], from_operation=True))

    deadline = time.monotonic() + wait_s + GRACE_SECONDS
    told = False
    with cluster.report.waiting(f"waiting for flex-start capacity in {zone}") as update:
        while True:
            nodes = {n.name: n for n in observe_nodes(cluster.clients, cluster.project, plan.name) if n.name in missing}
            gone = [n for n in missing if n not in nodes]
            pending = [n for n in missing if n in nodes and nodes[n].status == "PENDING"]
            if gone or (pending and time.monotonic() > deadline):
                what = f"{len(gone or pending)} of {len(missing)} node(s) got no capacity within {_minutes(wait_s)}"
                return _give_up(cluster, plan, zone, missing, created,
                                Failure("stockout", ("flexStartRequestExpired",), what, None))
            if not pending:
                return None
            if not told:
                cluster.report.note(f"waiting for capacity: {len(pending)}/{len(missing)} flex-start VM(s) PENDING "
                                    f"in {zone}; the request stays valid for {_minutes(wait_s)}")
                told = True
            update(f"waiting for flex-start capacity in {zone}: {len(missing) - len(pending)}/{len(missing)} provisioned")
            time.sleep(POLL_SECONDS)


def _give_up(cluster: Cluster, plan: Plan, zone: str, missing: list[str], created: Created,
             failure: Failure) -> Failure:
    cluster._clean_zone(plan, zone, missing, None, created)
    created.instances[:] = [(z, n) for z, n in created.instances if not (z == zone and n in missing)]
    if failure.kind == "transient":
        return Failure("stockout", failure.reasons, failure.message, failure.code)
    return failure


def _minutes(seconds: int) -> str:
    return "now or never" if seconds == 0 else f"{seconds // 60}m" if seconds >= 60 else f"{seconds}s"
