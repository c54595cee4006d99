"""Issue 28: DENSE reservations as googleapiclient's discovery client (not gcpgpu's code) sees them.
Every answer is walked against the Compute v1 discovery document's schemas (test_fabric_discovery.conform)."""

from __future__ import annotations

import pytest
from googleapiclient.errors import HttpError

from .test_fabric_discovery import IMAGE, PROJECT, ZONE, _conform, _wait, compute  # noqa: F401 (fixture)

MT = "a3-ultragpu-8g"


def _dense(compute, name: str, count: int) -> None:  # noqa: F811
    _wait(compute, compute.reservations().insert(project=PROJECT, zone=ZONE, body={
        "name": name, "deploymentType": "DENSE", "specificReservationRequired": True,
        "specificReservation": {"count": count, "instanceProperties": {"machineType": MT}}}).execute())


def _vm(name: str, target: str, model: str | None) -> dict:
    sched = {"onHostMaintenance": "TERMINATE"}
    if model:
        sched.update(provisioningModel=model, instanceTerminationAction="DELETE")
    return {"name": name, "machineType": f"zones/{ZONE}/machineTypes/{MT}",
            "disks": [{"boot": True, "autoDelete": True, "initializeParams": {"sourceImage": IMAGE}}],
            "networkInterfaces": [{"network": "global/networks/default"}], "scheduling": sched,
            "reservationAffinity": {"consumeReservationType": "SPECIFIC_RESERVATION",
                                    "key": "compute.googleapis.com/reservation-name", "values": [target]}}


def test_dense_reservation_refuses_standard_and_takes_reservation_bound_in_a_block(compute):  # noqa: F811
    _dense(compute, "dense", 80)  # 16 hosts a sub-block, 4 a block: two blocks
    res = _conform(compute.reservations().get(project=PROJECT, zone=ZONE, reservation="dense").execute(),
                   "Reservation")
    assert res["deploymentType"] == "DENSE"
    blocks = _conform(compute.reservationBlocks().list(project=PROJECT, zone=ZONE, reservation="dense").execute(),
                      "ReservationBlocksListResponse")["items"]
    assert [(b["count"], b["reservationSubBlockCount"]) for b in blocks] == [(64, 4), (16, 1)]
    second = blocks[1]["name"]

    with pytest.raises(HttpError) as e:
        compute.instances().insert(project=PROJECT, zone=ZONE, body=_vm("std", "dense", None)).execute()
    assert e.value.resp.status == 400
    assert "Instances consuming DENSE reservations must use provisioningModel RESERVATION_BOUND" in str(e.value)

    target = f"dense/reservationBlocks/{second}"
    _wait(compute, compute.instances().insert(project=PROJECT, zone=ZONE,
                                              body=_vm("bound", target, "RESERVATION_BOUND")).execute())
    vm = _conform(compute.instances().get(project=PROJECT, zone=ZONE, instance="bound").execute(), "Instance")
    assert vm["scheduling"]["provisioningModel"] == "RESERVATION_BOUND"
    info = vm["resourceStatus"]["reservationConsumptionInfo"]
    assert info["consumedReservationBlock"].endswith(f"/reservations/dense/reservationBlocks/{second}")
    assert vm["resourceStatus"]["physicalHostTopology"]["block"] == blocks[1]["physicalTopology"]["block"]
    got = _conform(compute.reservationBlocks().get(project=PROJECT, zone=ZONE, reservation="dense",
                                                   reservationBlock=second).execute(), "ReservationBlocksGetResponse")
    assert got["resource"]["inUseCount"] == 1
    subs = _conform(compute.reservationSubBlocks().list(
        project=PROJECT, zone=ZONE, parentName=f"reservations/dense/reservationBlocks/{second}").execute(),
        "ReservationSubBlocksListResponse")["items"]
    assert [s["inUseCount"] for s in subs] == [1]
    assert info["consumedReservationSubBlock"].endswith(f"/reservationSubBlocks/{subs[0]['name']}")


def test_a_full_block_refuses_more_vms(compute):  # noqa: F811
    _dense(compute, "small", 1)
    block = compute.reservationBlocks().list(project=PROJECT, zone=ZONE, reservation="small").execute()["items"][0]
    target = f"small/reservationBlocks/{block['name']}"
    _wait(compute, compute.instances().insert(project=PROJECT, zone=ZONE,
                                              body=_vm("a", target, "RESERVATION_BOUND")).execute())
    op = compute.instances().insert(project=PROJECT, zone=ZONE, body=_vm("b", target, "RESERVATION_BOUND")).execute()
    done = compute.zoneOperations().wait(project=PROJECT, zone=ZONE, operation=op["name"]).execute()
    assert done.get("error"), done


def _rfc(ts: float) -> str:
    import time
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def test_calendar_mode_is_advised_created_and_delivered_on_the_emulators_clock(gcp, compute):  # noqa: F811
    now = gcp.clock.now()
    advice = _conform(compute.advice().calendarMode(project=PROJECT, region=ZONE[:-2], body={
        "futureResourcesSpecs": {"a": {
            "targetResources": {"specificSkuResources": {"machineType": MT, "instanceCount": "2"}},
            "timeRangeSpec": {"startTimeNotEarlierThan": _rfc(now + 3600), "minDuration": "172800s"},
            "deploymentType": "DENSE"}}}).execute(), "CalendarModeAdviceResponse")
    rec = advice["recommendations"][0]["recommendationsPerSpec"]["a"]
    assert rec["recommendationType"] == "FUTURE_RESERVATION" and rec["location"].startswith("zones/")
    zone = rec["location"].split("/")[1]
    _wait(compute, compute.futureReservations().insert(project=PROJECT, zone=zone, body={
        "name": "cal", "reservationMode": "CALENDAR", "planningStatus": "SUBMITTED", "deploymentType": "DENSE",
        "reservationName": "cal", "specificReservationRequired": True,
        "specificSkuProperties": {"totalCount": "2", "instanceProperties": {"machineType": MT}},
        "timeWindow": {"startTime": rec["startTime"], "endTime": rec["endTime"]}}).execute())
    fr = _conform(compute.futureReservations().get(project=PROJECT, zone=zone, futureReservation="cal").execute(),
                  "FutureReservation")
    assert fr["status"]["procurementStatus"] == "PENDING_APPROVAL"
    with pytest.raises(HttpError):
        compute.reservations().get(project=PROJECT, zone=zone, reservation="cal").execute()
    gcp.clock.advance(3700)
    fr = compute.futureReservations().get(project=PROJECT, zone=zone, futureReservation="cal").execute()
    assert fr["status"]["procurementStatus"] == "FULFILLED"
    res = _conform(compute.reservations().get(project=PROJECT, zone=zone, reservation="cal").execute(), "Reservation")
    assert res["deploymentType"] == "DENSE" and res["deleteAtTime"]
    listed = _conform(compute.futureReservations().aggregatedList(project=PROJECT).execute(),
                      "FutureReservationsAggregatedListResponse")
    assert [f["name"] for f in listed["items"][f"zones/{zone}"]["futureReservations"]] == ["cal"]


@pytest.mark.parametrize("window,why", [
    ({"startTime": "2000-01-01T00:00:00Z", "duration": {"seconds": "86400"}}, "in the future"),
    ({"startTime": "START", "duration": {"seconds": "3600"}}, "1 to 90 days"),
    ({"startTime": "START", "duration": {"seconds": str(91 * 86400)}}, "1 to 90 days"),
])
def test_calendar_mode_refuses_a_past_or_out_of_range_window(gcp, compute, window, why):  # noqa: F811
    window = {**window, "startTime": window["startTime"].replace("START", _rfc(gcp.clock.now() + 7200))}
    with pytest.raises(HttpError) as e:
        compute.futureReservations().insert(project=PROJECT, zone=ZONE, body={
            "name": "bad", "reservationMode": "CALENDAR",
            "specificSkuProperties": {"totalCount": "1", "instanceProperties": {"machineType": MT}},
            "timeWindow": window}).execute()
    assert e.value.resp.status == 400 and why in str(e.value)


def test_report_host_as_faulty_moves_the_vm_to_a_new_host_and_degrades_its_sub_block(gcp, compute):  # noqa: F811
    _dense(compute, "rr", 2)
    _wait(compute, compute.instances().insert(project=PROJECT, zone=ZONE,
                                              body=_vm("vm", "rr", "RESERVATION_BOUND")).execute())
    gcp.clock.advance(120)
    before = compute.instances().get(project=PROJECT, zone=ZONE, instance="vm").execute()["resourceStatus"]
    with pytest.raises(HttpError) as e:  # the request's own rule: IMMEDIATE only
        compute.instances().reportHostAsFaulty(project=PROJECT, zone=ZONE, instance="vm", body={
            "disruptionSchedule": "FUTURE"}).execute()
    assert e.value.resp.status == 400
    _wait(compute, compute.instances().reportHostAsFaulty(project=PROJECT, zone=ZONE, instance="vm", body={
        "disruptionSchedule": "IMMEDIATE",
        "faultReasons": [{"behavior": "UNRECOVERABLE_GPU_ERROR", "description": "Xid 79"}]}).execute())
    vm = _conform(compute.instances().get(project=PROJECT, zone=ZONE, instance="vm").execute(), "Instance")
    assert vm["status"] in ("REPAIRING", "RUNNING")
    after = vm["resourceStatus"]
    assert after["physicalHost"] != before["physicalHost"]
    assert after["physicalHostTopology"]["subblock"] == before["physicalHostTopology"]["subblock"]
    block = compute.reservationBlocks().list(project=PROJECT, zone=ZONE, reservation="rr").execute()["items"][0]
    assert block["healthInfo"]["healthStatus"] == "DEGRADED"


def test_a_maintenance_fault_shows_as_upcoming_maintenance(gcp, compute):  # noqa: F811
    _dense(compute, "mm", 1)
    _wait(compute, compute.instances().insert(project=PROJECT, zone=ZONE,
                                              body=_vm("vm", "mm", "RESERVATION_BOUND")).execute())
    gcp.faults.update({"maintenance": "vm@2h"})
    vm = _conform(compute.instances().get(project=PROJECT, zone=ZONE, instance="vm").execute(), "Instance")
    up = vm["resourceStatus"]["upcomingMaintenance"]
    assert (up["type"], up["maintenanceStatus"]) == ("SCHEDULED", "PENDING")
    gcp.clock.advance(2 * 3600 + 60)
    vm = compute.instances().get(project=PROJECT, zone=ZONE, instance="vm").execute()
    assert vm["resourceStatus"]["upcomingMaintenance"]["maintenanceStatus"] == "ONGOING"
