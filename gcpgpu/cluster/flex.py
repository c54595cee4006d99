"""Flex-start nodes: one instances.insert per node, each waiting for capacity for a while.

DWS flex-start on Compute Engine queues a VM when the request carries
`params.requestValidForDuration` (Compute v1 InstanceParams: "Relative deadline for waiting for
capacity. Relevant only for Instances.Insert API"). The VM exists at once as PENDING, then goes
PROVISIONING -> RUNNING when capacity appears; when the window ends unfilled GCP deletes it
(gcp-facts section 10). `cluster up` shows that it is waiting, and treats a window that ends
with any node unfilled like a stockout: it removes this zone's nodes and tries the next zone.
"""

from __future__ import annotations

import time
from typing import Any

from gcpgpu.errors import is_google_error
from gcpgpu.gcp.errors import Failure, classify

from .observe import observe_nodes
from .plan import Plan
from .session import Session

POLL_SECONDS = 1.0
GRACE_SECONDS = 120.0  # beyond the request's window before gcpgpu stops waiting on its own


def place_flex(session: Session, plan: Plan, missing: list[str], zone: str) -> Failure | None:
    """Queue one flex-start insert per missing node in `zone` and wait until none is PENDING.
    None on success; a stockout Failure (zone cleaned) when capacity did not come in time."""
    wait_s = int(plan.spec.flex_wait or 0)
    session.report.step("instances", f"Requesting {len(missing)} flex-start {plan.machine.name} VM(s) in {zone} "
                                     f"(one instances.insert each, valid for {_minutes(wait_s)})")

    def insert(name: str) -> Any:
        body = session.owned("Instance", plan.flex_insert_body(name, zone))
        return session.call(session.client("InstancesClient").insert, {"project": session.project, "zone": zone,
                                                               "instance_resource": body})

    try:
        session.batch(insert, missing)
    except Exception as e:
        if not is_google_error(e):
            raise
        return _give_up(session, plan, zone, missing, classify(e, from_operation=True))

    deadline = time.monotonic() + wait_s + GRACE_SECONDS
    told = False
    with session.report.waiting(f"waiting for flex-start capacity in {zone}") as update:
        while True:
            nodes = {n.name: n for n in observe_nodes(session.clients, session.project, plan.name) if n.name in missing}
            gone = [n for n in missing if n not in nodes]
            pending = [n for n in missing if n in nodes and nodes[n].status == "PENDING"]
            if gone or (pending and time.monotonic() > deadline):
                what = f"{len(gone or pending)} of {len(missing)} node(s) got no capacity within {_minutes(wait_s)}"
                return _give_up(session, plan, zone, missing,
                                Failure("stockout", ("flexStartRequestExpired",), what, None))
            if not pending:
                return None
            if not told:
                session.report.note(f"waiting for capacity: {len(pending)}/{len(missing)} flex-start VM(s) PENDING "
                                    f"in {zone}; the request stays valid for {_minutes(wait_s)}")
                told = True
            update(f"waiting for flex-start capacity in {zone}: {len(missing) - len(pending)}/{len(missing)} provisioned")
            time.sleep(POLL_SECONDS)


def _give_up(session: Session, plan: Plan, zone: str, missing: list[str], failure: Failure) -> Failure:
    session.clean_zone(plan.name, zone, missing)
    if failure.kind == "transient":
        return Failure("stockout", failure.reasons, failure.message, failure.code)
    return failure


def _minutes(seconds: int) -> str:
    return "now or never" if seconds == 0 else f"{seconds // 60}m" if seconds >= 60 else f"{seconds}s"
