"""Operations: PENDING -> RUNNING -> DONE over time, instances PROVISIONING -> STAGING -> RUNNING,
polling through the real client's ExtendedOperation, operations get/wait/list/delete."""

from __future__ import annotations

import time

import pytest
from google.api_core import exceptions
from google.cloud import compute_v1

from gcpgpu.fakes.server import Emulator

from .builders import FAST_POLL, GPU_TYPE, PROJECT, REGION, ZONE, gpu_vm, insert, quota, vm

Status = compute_v1.Operation.Status


def test_operation_and_instance_progress_over_the_emulators_time(gcp: Emulator, compute, instances) -> None:
    """Each state shows in turn as the emulator's clock moves: the clock is stopped and moved here 10 ms at a
    look, so a slow machine's long gaps between looks cannot skip the RUNNING of a 0.3 s operation."""
    gcp.faults.operation_seconds = 0.3
    gcp.clock.freeze()
    zone_ops = compute("ZoneOperationsClient")
    t0 = gcp.clock.now()
    op = instances.insert(project=PROJECT, zone=ZONE, instance_resource=vm("slow"))
    op_states, vm_states = [op.status], []
    while True:
        o = zone_ops.get(project=PROJECT, zone=ZONE, operation=op.name)
        i = instances.get(project=PROJECT, zone=ZONE, instance="slow")
        if o.status != op_states[-1]:
            op_states.append(o.status)
        if not vm_states or i.status != vm_states[-1]:
            vm_states.append(i.status)
        if o.status == Status.DONE and i.status == "RUNNING":
            break
        assert gcp.clock.now() - t0 < 5, (op_states, vm_states)  # 5 s of the emulator's time: it never ended
        gcp.clock.advance(0.01)
    assert op_states == [Status.PENDING, Status.RUNNING, Status.DONE]
    assert vm_states == ["PROVISIONING", "STAGING", "RUNNING"]
    assert 0.25 <= gcp.clock.now() - t0 <= 0.35  # the operation's 0.3 s, on the emulator's clock


def test_result_polls_the_emulator_until_done(gcp: Emulator, instances) -> None:
    gcp.faults.operation_seconds = 0.3
    t0 = time.monotonic()
    op = instances.insert(project=PROJECT, zone=ZONE, instance_resource=vm("polled"))
    assert op.status != Status.DONE
    assert op.result(polling=FAST_POLL) is None
    assert time.monotonic() - t0 >= 0.25
    assert op.done() and op.status == Status.DONE
    # The polling went to the emulator through operations.get, not to compute.googleapis.com.
    polls = gcp.requests.all(method="GET", contains=f"/zones/{ZONE}/operations/{op.name}")
    assert len(polls) >= 2
    assert instances.get(project=PROJECT, zone=ZONE, instance="polled").status == "RUNNING"


def test_frozen_clock_steps_through_each_state(gcp: Emulator, compute, instances) -> None:
    gcp.clock.freeze()
    gcp.faults.operation_seconds = 10
    zone_ops = compute("ZoneOperationsClient")
    op = instances.insert(project=PROJECT, zone=ZONE, instance_resource=vm("stepwise"))

    def state() -> tuple[int, str]:
        o = zone_ops.get(project=PROJECT, zone=ZONE, operation=op.name)
        return o.status, instances.get(project=PROJECT, zone=ZONE, instance="stepwise").status

    assert state() == (Status.PENDING, "PROVISIONING")  # PENDING for the first 20% of the time
    gcp.clock.advance(3)
    assert state() == (Status.RUNNING, "PROVISIONING")
    gcp.clock.advance(3)
    assert state() == (Status.RUNNING, "STAGING")
    gcp.clock.advance(4)
    assert state() == (Status.DONE, "RUNNING")
    assert op.result(polling=FAST_POLL) is None
    done = zone_ops.get(project=PROJECT, zone=ZONE, operation=op.name)
    assert done.progress == 100 and done.end_time and done.start_time


def test_delete_stops_then_forgets_and_releases_quota_when_done(gcp: Emulator, compute, instances) -> None:
    regions = compute("RegionsClient")
    insert(instances, gpu_vm("doomed"))
    gcp.clock.freeze()
    gcp.faults.operation_seconds = 10
    op = instances.delete(project=PROJECT, zone=ZONE, instance="doomed")
    assert instances.get(project=PROJECT, zone=ZONE, instance="doomed").status == "STOPPING"
    assert quota(regions.get(project=PROJECT, region=REGION), "NVIDIA_A100_GPUS")[0] == 1
    with pytest.raises(exceptions.Conflict):  # the name is still taken while it stops
        instances.insert(project=PROJECT, zone=ZONE, instance_resource=gpu_vm("doomed"))
    gcp.clock.advance(10)
    with pytest.raises(exceptions.NotFound):
        instances.get(project=PROJECT, zone=ZONE, instance="doomed")
    assert quota(regions.get(project=PROJECT, region=REGION), "NVIDIA_A100_GPUS")[0] == 0
    assert op.result(polling=FAST_POLL) is None


def test_stop_passes_through_stopping(gcp: Emulator, instances) -> None:
    insert(instances, vm("halt"))
    gcp.clock.freeze()
    gcp.faults.operation_seconds = 4
    instances.stop(project=PROJECT, zone=ZONE, instance="halt")
    assert instances.get(project=PROJECT, zone=ZONE, instance="halt").status == "STOPPING"
    gcp.clock.advance(4)
    assert instances.get(project=PROJECT, zone=ZONE, instance="halt").status == "TERMINATED"
    instances.start(project=PROJECT, zone=ZONE, instance="halt")
    assert instances.get(project=PROJECT, zone=ZONE, instance="halt").status == "STAGING"
    gcp.clock.advance(4)
    assert instances.get(project=PROJECT, zone=ZONE, instance="halt").status == "RUNNING"


def test_operation_error_appears_only_when_done(gcp: Emulator, compute, instances) -> None:
    gcp.faults.set_quota(REGION, "NVIDIA_A100_GPUS", 0)
    gcp.clock.freeze()
    gcp.faults.operation_seconds = 5
    op = instances.insert(project=PROJECT, zone=ZONE, instance_resource=gpu_vm("over-quota"))
    assert op.status == Status.PENDING and not op.error.errors
    gcp.clock.advance(5)
    with pytest.raises(exceptions.Forbidden) as e:
        op.result(polling=FAST_POLL)
    assert e.value.errors[0].code == "QUOTA_EXCEEDED"
    done = compute("ZoneOperationsClient").get(project=PROJECT, zone=ZONE, operation=op.name)
    assert (done.http_error_status_code, done.error.errors[0].code) == (403, "QUOTA_EXCEEDED")


def test_wait_returns_when_done(gcp: Emulator, compute, instances) -> None:
    gcp.faults.operation_seconds = 0.3
    op = instances.insert(project=PROJECT, zone=ZONE, instance_resource=vm("waited"))
    t0 = time.monotonic()
    done = compute("ZoneOperationsClient").wait(project=PROJECT, zone=ZONE, operation=op.name)
    assert done.status == Status.DONE
    # Not before the operation's end, and long before the 2 minutes after which operations.wait gives up.
    assert 0.15 <= time.monotonic() - t0 < 60
    assert len(gcp.requests.all(method="POST", contains="/wait")) == 1  # one call, the server waited


def test_wait_on_a_frozen_clock_answers_at_once(gcp: Emulator, compute, instances) -> None:
    gcp.clock.freeze()
    gcp.faults.operation_seconds = 60
    op = instances.insert(project=PROJECT, zone=ZONE, instance_resource=vm("frozen"))
    t0 = time.monotonic()
    assert compute("ZoneOperationsClient").wait(project=PROJECT, zone=ZONE, operation=op.name).status != Status.DONE
    assert time.monotonic() - t0 < 60  # answered, not held for operations.wait's 2 minutes


def test_region_and_global_operations_wait(gcp: Emulator, compute) -> None:
    gcp.faults.operation_seconds = 0.2
    op = compute("NetworksClient").insert(project=PROJECT, network_resource=compute_v1.Network(
        name="w-net", auto_create_subnetworks=False))
    assert compute("GlobalOperationsClient").wait(project=PROJECT, operation=op.name).status == Status.DONE
    op = compute("ResourcePoliciesClient").insert(project=PROJECT, region=REGION, resource_policy_resource=compute_v1.ResourcePolicy(
        name="w-pol", group_placement_policy=compute_v1.ResourcePolicyGroupPlacementPolicy(collocation="COLLOCATED")))
    assert compute("RegionOperationsClient").wait(project=PROJECT, region=REGION, operation=op.name).status == Status.DONE


def test_operations_list_filter_paging_and_delete(compute, instances) -> None:
    zone_ops = compute("ZoneOperationsClient")
    for i in range(3):
        insert(instances, vm(f"o-{i}"))
    instances.delete(project=PROJECT, zone=ZONE, instance="o-0").result()
    pager = zone_ops.list(request={"project": PROJECT, "zone": ZONE, "max_results": 2})
    assert len(list(pager.pages)) == 2
    ops = list(zone_ops.list(request={"project": PROJECT, "zone": ZONE, "filter": "operationType = insert"}))
    assert len(ops) == 3 and all(o.status == Status.DONE for o in ops)
    deletes = list(zone_ops.list(request={"project": PROJECT, "zone": ZONE, "filter": "operationType = delete"}))
    assert [o.target_link.rsplit("/", 1)[-1] for o in deletes] == ["o-0"]
    agg = dict(compute("GlobalOperationsClient").aggregated_list(project=PROJECT))
    assert len(agg[f"zones/{ZONE}"].operations) == 4
    zone_ops.delete(project=PROJECT, zone=ZONE, operation=ops[0].name)
    with pytest.raises(exceptions.NotFound):
        zone_ops.get(project=PROJECT, zone=ZONE, operation=ops[0].name)
    assert len(list(zone_ops.list(project=PROJECT, zone=ZONE))) == 3


def test_unknown_operation_is_not_found(compute) -> None:
    with pytest.raises(exceptions.NotFound):
        compute("ZoneOperationsClient").get(project=PROJECT, zone=ZONE, operation="operation-0-none")
    with pytest.raises(exceptions.NotFound):
        compute("GlobalOperationsClient").wait(project=PROJECT, operation="operation-0-none")


def test_gpu_instance_timeline_uses_bulk_insert_operation(gcp: Emulator, compute, instances) -> None:
    gcp.clock.freeze()
    gcp.faults.operation_seconds = 2
    body = compute_v1.BulkInsertInstanceResource(count=2, name_pattern="g-#", instance_properties=compute_v1.InstanceProperties(
        machine_type=GPU_TYPE, scheduling=compute_v1.Scheduling(on_host_maintenance="TERMINATE"),
        disks=[compute_v1.AttachedDisk(boot=True, initialize_params=compute_v1.AttachedDiskInitializeParams(
            source_image="projects/debian-cloud/global/images/family/debian-12"))],
        network_interfaces=[compute_v1.NetworkInterface(network="global/networks/default")]))
    op = instances.bulk_insert(project=PROJECT, zone=ZONE, bulk_insert_instance_resource_resource=body)
    assert {i.status for i in instances.list(project=PROJECT, zone=ZONE)} == {"PROVISIONING"}
    gcp.clock.advance(2)
    assert {i.status for i in instances.list(project=PROJECT, zone=ZONE)} == {"RUNNING"}
    assert compute("ZoneOperationsClient").get(project=PROJECT, zone=ZONE, operation=op.name).status == Status.DONE
