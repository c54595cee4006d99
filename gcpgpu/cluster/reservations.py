"""Reservations as A3 Ultra, A4 and A4X capacity is sold: reservations with their blocks and sub-blocks,
calendar-mode future reservations, and the advice on when and where to get one.

API values, all from the Compute v1 discovery document that googleapiclient ships unless said
otherwise: `FutureReservation` {specificSkuProperties {totalCount, instanceProperties
{machineType}}, timeWindow {startTime, endTime}, planningStatus SUBMITTED, reservationMode CALENDAR,
deploymentType DENSE, reservationName, specificReservationRequired,
autoDeleteAutoCreatedReservations, status.procurementStatus (PENDING_APPROVAL, APPROVED,
PROVISIONING, FULFILLED, CANCELLED, ...), status.autoCreatedReservations}; `advice.calendarMode`
(FutureResourcesSpec {targetResources.specificSkuResources {machineType, instanceCount},
timeRangeSpec {startTimeNotEarlierThan, minDuration, maxDuration}, deploymentType}; answer
FutureResourcesRecommendation {location "zones/Z", startTime, endTime, otherLocations});
`ReservationBlock` / `ReservationSubBlock` {count, inUseCount, healthInfo.healthStatus}.
Calendar-mode bounds (1 to 90 days, starting at most 8 weeks ahead) are recalled from Google's
calendar-mode guide: unverified here, kept as data below.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from gcpgpu.errors import CloudError, UsageProblem
from gcpgpu.times import format_duration, format_timestamp, parse_duration, parse_timestamp

DAY = 86400
CALENDAR_DURATION_S = (1 * DAY, 90 * DAY)  # unverified (see above)
CALENDAR_LEAD_S = 56 * DAY  # unverified
CALENDAR_RULE = "a calendar-mode reservation lasts 1 to 90 days (e.g. --duration 7d)"
POLL_SECONDS = 30.0
_sleep = time.sleep  # tests put the emulator's clock forward here instead of sleeping


def parse_window_length(value: Any, where: str = "--duration") -> int:
    """A calendar-mode window's length: 1 to 90 days, refused in one line before any API call (exit 2)."""
    seconds = parse_duration(value, where, at_most=366 * DAY, too_long=f"out of range: {CALENDAR_RULE}")
    check_window_length(seconds, where)
    return seconds


def check_window_length(seconds: int, where: str = "--duration") -> None:
    lo, hi = CALENDAR_DURATION_S
    if not lo <= seconds <= hi:
        raise UsageProblem(f"{where} {format_duration(seconds)} is out of range: {CALENDAR_RULE}")


def parse_when(value: str, where: str, now: float) -> float:
    """An RFC 3339 time, or a delay from now ('2h', '3d', at most 8 weeks); epoch seconds."""
    text = str(value).strip()
    when = parse_timestamp(text)
    if when is not None:
        return when
    return now + parse_duration(
        text.removeprefix("+"), where, at_most=CALENDAR_LEAD_S,
        too_long="more than 8 weeks ahead; calendar mode reserves at most 8 weeks in advance",
        malformed="must be an RFC 3339 time (2026-12-01T08:00:00Z) or a delay from now (e.g. 2h, 3d)")


def check_calendar_window(start: float, seconds: int, now: float, start_flag: str = "--start") -> None:
    """What calendar mode allows, refused before any API call (exit 2)."""
    if start <= now:
        raise UsageProblem(f"{start_flag} {format_timestamp(start)} is in the past; a calendar-mode window starts in "
                           "the future (e.g. --start 2d)")
    if start - now > CALENDAR_LEAD_S:
        raise UsageProblem(f"{start_flag} {format_timestamp(start)} is more than 8 weeks ahead; calendar mode "
                           "reserves at most 8 weeks in advance")
    check_window_length(seconds)


def _zone(link: str) -> str:
    return str(link).rsplit("/", 1)[-1]


# ---------------------------------------------------------------------- reading
def list_all(clients: Any, project: str) -> tuple[list[dict], list[dict]]:
    """(reservations, future reservations) of the project, one row each."""
    from gcpgpu.gcp.compute import compute_types

    compute = compute_types()

    res_rows, fr_rows = [], []
    for _scope, scoped in clients.compute("ReservationsClient").aggregated_list(
            request=compute.AggregatedListReservationsRequest(project=project)):
        for r in scoped.reservations:
            res_rows.append(reservation_row(r))
    for _scope, scoped in clients.compute("FutureReservationsClient").aggregated_list(
            request=compute.AggregatedListFutureReservationsRequest(project=project)):
        for f in scoped.future_reservations:
            fr_rows.append(future_row(f))
    return sorted(res_rows, key=lambda r: r["name"]), sorted(fr_rows, key=lambda r: r["name"])


def reservation_row(r: Any) -> dict:
    spec = r.specific_reservation
    count, used = int(spec.count), int(spec.in_use_count)
    return {"name": r.name, "zone": _zone(r.zone), "machine_type": _zone(spec.instance_properties.machine_type),
            "count": count, "in_use": used, "free": count - used, "deployment": r.deployment_type or "-",
            "ends": r.delete_at_time or "-", "status": r.status}


def future_row(f: Any) -> dict:
    sku = f.specific_sku_properties
    return {"name": f.name, "zone": _zone(f.zone), "machine_type": _zone(sku.instance_properties.machine_type),
            "count": int(sku.total_count or 0), "mode": f.reservation_mode or "-",
            "status": f.status.procurement_status or f.planning_status or "-",
            "start": f.time_window.start_time, "end": f.time_window.end_time or "-",
            "reservations": [x.rsplit("/", 1)[-1] for x in f.status.auto_created_reservations]}


def find_zone(clients: Any, project: str, name: str, zone: str | None) -> tuple[str, str]:
    """(zone, 'reservation' | 'future') of the reservation or future reservation called `name`."""
    reservations, futures = list_all(clients, project)
    for kind, rows in (("reservation", reservations), ("future", futures)):
        for row in rows:
            if row["name"] == name and (zone is None or row["zone"] == zone):
                return row["zone"], kind
    where = f" in {zone}" if zone else ""
    raise CloudError(f"no reservation or future reservation named {name}{where} in project {project} "
                     "(see 'gcpgpu reservation list')")


def blocks(clients: Any, project: str, zone: str, name: str) -> list[dict]:
    """The reservation's blocks, each with its sub-blocks: size, in use, free and health."""
    from gcpgpu.gcp.compute import compute_types

    compute = compute_types()

    out = []
    for b in clients.compute("ReservationBlocksClient").list(
            request=compute.ListReservationBlocksRequest(project=project, zone=zone, reservation=name)):
        subs = []
        for s in clients.compute("ReservationSubBlocksClient").list(request=compute.ListReservationSubBlocksRequest(
                project=project, zone=zone, parent_name=f"reservations/{name}/reservationBlocks/{b.name}")):
            subs.append({"name": s.name, "count": s.count, "in_use": s.in_use_count, "free": s.count - s.in_use_count,
                         "health": s.health_info.health_status or "-"})
        out.append({"name": b.name, "count": b.count, "in_use": b.in_use_count, "free": b.count - b.in_use_count,
                    "health": b.health_info.health_status or "-", "sub_blocks": subs})
    return out


# ---------------------------------------------------------------------- calendar mode
def advise(clients: Any, project: str, region: str, machine_type: str, count: int, seconds: int,
           earliest: float) -> dict:
    """advice.calendarMode for one spec: where and when, and why not elsewhere."""
    from gcpgpu.gcp.compute import compute_types

    compute = compute_types()

    spec = compute.FutureResourcesSpec(
        deployment_type="DENSE",
        target_resources=compute.FutureResourcesSpecTargetResources(
            specific_sku_resources=compute.FutureResourcesSpecSpecificSKUResources(
                machine_type=machine_type, instance_count=count)),
        time_range_spec=compute.FlexibleTimeRange(start_time_not_earlier_than=format_timestamp(earliest),
                                                     min_duration=f"{seconds}s", max_duration=f"{seconds}s"))
    got = clients.compute("AdviceClient").calendar_mode(request=compute.CalendarModeAdviceRpcRequest(
        project=project, region=region,
        calendar_mode_advice_request_resource=compute.CalendarModeAdviceRequest(
            future_resources_specs={"spec": spec})))
    recs = [r.recommendations_per_spec["spec"] for r in got.recommendations if "spec" in r.recommendations_per_spec]
    if not recs:
        return {"zone": None, "start": None, "end": None, "others": {}}
    rec = recs[0]
    return {"zone": _zone(rec.location) if rec.location else None, "start": rec.start_time or None,
            "end": rec.end_time or None,
            "others": {_zone(k): f"{v.status}{': ' + v.details if v.details else ''}"
                       for k, v in rec.other_locations.items()}}


def create(clients: Any, project: str, zone: str, name: str, machine_type: str, count: int, start: float,
           seconds: int) -> Any:
    """A calendar-mode future reservation whose delivered reservation carries the same name, so
    `cluster up --reservation NAME --wait-for-start` consumes it."""
    from gcpgpu.gcp.compute import compute_types

    compute = compute_types()

    from gcpgpu.gcp.operations import call, wait

    fr = compute.FutureReservation(
        name=name, reservation_mode="CALENDAR", planning_status="SUBMITTED", deployment_type="DENSE",
        reservation_name=name, specific_reservation_required=True, auto_delete_auto_created_reservations=True,
        description="gcpgpu calendar-mode reservation",
        specific_sku_properties=compute.FutureReservationSpecificSKUProperties(
            total_count=count, instance_properties=compute.AllocationSpecificSKUAllocationReservedInstanceProperties(
                machine_type=machine_type)),
        time_window=compute.FutureReservationTimeWindow(start_time=format_timestamp(start),
                                                           end_time=format_timestamp(start + seconds)))
    op = call(clients.compute("FutureReservationsClient").insert,
              {"project": project, "zone": zone, "future_reservation_resource": fr})
    return wait(clients, project, op)


def cancel(clients: Any, project: str, zone: str, name: str) -> None:
    from gcpgpu.gcp.operations import call, wait

    op = call(clients.compute("FutureReservationsClient").cancel,
              {"project": project, "zone": zone, "future_reservation": name})
    wait(clients, project, op)


def wait_for_start(clients: Any, project: str, name: str, zones: list[str], note: Callable[[str], None],
                   timeout: float | None = None) -> tuple[str, str]:
    """Wait until future reservation `name` (in one of `zones`) has delivered its reservation; returns
    (zone, reservation name). Says where it stands whenever its status changes and every few polls."""
    from gcpgpu.gcp.errors import is_not_found

    fr, zone = None, None
    for z in zones:
        try:
            fr = clients.compute("FutureReservationsClient").get(project=project, zone=z, future_reservation=name)
            zone = z
            break
        except Exception as e:
            if not is_not_found(e):
                raise
    if fr is None:
        return "", ""  # no future reservation by that name: a plain reservation, nothing to wait for
    deadline = None if timeout is None else time.monotonic() + timeout
    last, polls = None, 0
    while True:
        state = fr.status.procurement_status
        if state == "FULFILLED" and fr.status.auto_created_reservations:
            note(f"future reservation {name} ({zone}): window open, reservation "
                 f"{_zone(fr.status.auto_created_reservations[0])} delivered")
            return zone, _zone(fr.status.auto_created_reservations[0])
        if state in ("CANCELLED", "DECLINED", "FAILED"):
            raise CloudError(f"future reservation {name} ({zone}) is {state}: nothing will be delivered")
        if state != last or polls % 10 == 0:
            left = _until(fr.time_window.start_time)
            note(f"waiting for future reservation {name} ({zone}): {state}, window opens at "
                 f"{fr.time_window.start_time}{left}")
        last, polls = state, polls + 1
        if deadline is not None and time.monotonic() > deadline:
            raise CloudError(f"future reservation {name} ({zone}) has not started in time ({state})")
        _sleep(POLL_SECONDS)
        fr = clients.compute("FutureReservationsClient").get(project=project, zone=zone, future_reservation=name)


def _until(start: str) -> str:
    when = parse_timestamp(start)
    secs = 0 if when is None else when - time.time()
    if secs <= 0:
        return ""
    return f" (in about {int(secs // 3600)}h{int(secs % 3600 // 60):02d}m by this machine's clock)"


def wait_for_plan(clients: Any, project: str, plan: Any, note: Callable[[str], None]) -> None:
    """`cluster up --wait-for-start`: when the plan's --reservation is a future reservation, wait for
    its window and point the plan at the reservation it delivers (and that reservation's zone)."""
    from gcpgpu.cluster.reservation_use import parse_target

    target = parse_target(plan.spec.reservation)
    zone, delivered = wait_for_start(clients, project, target.reservation, list(plan.zones), note)
    if not delivered:
        return
    plan.spec.zones = [zone]
    if delivered != target.reservation:
        plan.spec.reservation = str(plan.spec.reservation).replace(target.reservation, delivered, 1)
        plan.instance_properties["reservationAffinity"]["values"] = [plan.spec.reservation]
