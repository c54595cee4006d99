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
