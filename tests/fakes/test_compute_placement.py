"""Compact placement policies and specific reservations through the real client."""

from __future__ import annotations

import pytest
from google.api_core import exceptions
from google.cloud import compute_v1

from gcpgpu.fakes.server import Emulator

from .builders import FAST_POLL, GPU_TYPE, PROJECT, REGION, ZONE, gpu_vm, insert, quota

POLICY = f"regions/{REGION}/resourcePolicies/compact-1"


def _policy(compute, name: str = "compact-1", vm_count: int | None = 2, region: str = REGION) -> None:
    gpp = compute_v1.ResourcePolicyGroupPlacementPolicy(collocation="COLLOCATED")
    if vm_count is not None:
        gpp.vm_count = vm_count
    compute("ResourcePoliciesClient").insert(
        project=PROJECT, region=region,
        resource_policy_resource=compute_v1.ResourcePolicy(name=name, group_placement_policy=gpp),
    ).result()


def _reservation(compute, name: str = "res-1", count: int = 2, machine_type: str = GPU_TYPE, zone: str = ZONE,
                 required: bool = True) -> None:
    compute("ReservationsClient").insert(project=PROJECT, zone=zone, reservation_resource=compute_v1.Reservation(
        name=name, specific_reservation_required=required,
        specific_reservation=compute_v1.AllocationSpecificSKUReservation(
            count=count, instance_properties=compute_v1.AllocationSpecificSKUAllocationReservedInstanceProperties(
                machine_type=machine_type)),
    )).result(polling=FAST_POLL)


def _in_use(compute, name: str = "res-1") -> int:
    return compute("ReservationsClient").get(project=PROJECT, zone=ZONE, reservation=name).specific_reservation.in_use_count


def test_policy_crud_and_list(compute) -> None:
    policies = compute("ResourcePoliciesClient")
    _policy(compute)
    _policy(compute, "compact-2", vm_count=None)
    got = policies.get(project=PROJECT, region=REGION, resource_policy="compact-1")
    assert (got.group_placement_policy.collocation, got.group_placement_policy.vm_count) == ("COLLOCATED", 2)
    assert got.region.endswith(f"/regions/{REGION}") and got.status == "READY"
    assert [p.name for p in policies.list(request={"project": PROJECT, "region": REGION, "max_results": 1})] == [
        "compact-1", "compact-2"]
    agg = dict(policies.aggregated_list(project=PROJECT))
    assert len(agg[f"regions/{REGION}"].resource_policies) == 2
    with pytest.raises(exceptions.Conflict):
        _policy(compute)
    with pytest.raises(exceptions.BadRequest):
        _policy(compute, "Compact")
    policies.delete(project=PROJECT, region=REGION, resource_policy="compact-2").result()
    with pytest.raises(exceptions.NotFound):
        policies.get(project=PROJECT, region=REGION, resource_policy="compact-2")


def test_policy_vm_count_is_enforced(instances, compute) -> None:
    _policy(compute, vm_count=2)
    insert(instances, gpu_vm("p-0", resource_policies=[POLICY]))
    insert(instances, gpu_vm("p-1", resource_policies=[POLICY]))
    with pytest.raises(exceptions.BadRequest) as e:
        insert(instances, gpu_vm("p-2", resource_policies=[POLICY]))
    assert "vmCount 2" in e.value.message
    got = instances.get(project=PROJECT, zone=ZONE, instance="p-0")
    assert got.resource_policies[0].endswith(POLICY)
    # A slot frees up when a VM goes.
    instances.delete(project=PROJECT, zone=ZONE, instance="p-0").result()
    insert(instances, gpu_vm("p-2", resource_policies=[POLICY]))


def test_policy_region_is_enforced(instances, compute) -> None:
    _policy(compute, "east-compact", region="us-east4")
    with pytest.raises(exceptions.BadRequest) as e:
        insert(instances, gpu_vm("wrong-region", resource_policies=["regions/us-east4/resourcePolicies/east-compact"]))
    assert "region" in e.value.message
    with pytest.raises(exceptions.NotFound):
        insert(instances, gpu_vm("no-policy", resource_policies=[f"regions/{REGION}/resourcePolicies/ghost"]))


def test_policy_cannot_be_deleted_while_instances_use_it(instances, compute) -> None:
    policies = compute("ResourcePoliciesClient")
    _policy(compute)
    insert(instances, gpu_vm("user-0", resource_policies=[POLICY]))
    with pytest.raises(exceptions.BadRequest) as e:
        policies.delete(project=PROJECT, region=REGION, resource_policy="compact-1")
    assert e.value.errors[0]["reason"] == "resourceInUseByAnotherResource"
    assert "instances/user-0" in e.value.message
    instances.delete(project=PROJECT, zone=ZONE, instance="user-0").result()
    policies.delete(project=PROJECT, region=REGION, resource_policy="compact-1").result()


def test_bulk_insert_with_placement_policy_counts_every_vm(instances, compute) -> None:
    _policy(compute, vm_count=2)
    props = compute_v1.InstanceProperties(
        machine_type=GPU_TYPE, resource_policies=["compact-1"],
        disks=[compute_v1.AttachedDisk(boot=True, initialize_params=compute_v1.AttachedDiskInitializeParams(
            source_image="projects/debian-cloud/global/images/family/debian-12"))],
        network_interfaces=[compute_v1.NetworkInterface(network="global/networks/default")],
        scheduling=compute_v1.Scheduling(on_host_maintenance="TERMINATE"),
    )
    with pytest.raises(exceptions.BadRequest):
        instances.bulk_insert(project=PROJECT, zone=ZONE, bulk_insert_instance_resource_resource=compute_v1.BulkInsertInstanceResource(
            count=3, name_pattern="c-#", instance_properties=props))
    instances.bulk_insert(project=PROJECT, zone=ZONE, bulk_insert_instance_resource_resource=compute_v1.BulkInsertInstanceResource(
        count=2, name_pattern="c-#", instance_properties=props)).result()
    assert all(i.resource_policies[0].endswith(POLICY) for i in instances.list(project=PROJECT, zone=ZONE))


def test_specific_reservation_is_consumed_and_fails_when_full(gcp: Emulator, instances, compute) -> None:
    regions = compute("RegionsClient")
    _reservation(compute, count=2)
    res = compute("ReservationsClient").get(project=PROJECT, zone=ZONE, reservation="res-1")
    assert (res.specific_reservation.count, res.specific_reservation.in_use_count, res.status) == (2, 0, "READY")
    # The reservation itself holds the GPUs' quota.
    assert quota(regions.get(project=PROJECT, region=REGION), "NVIDIA_A100_GPUS")[0] == 2

    insert(instances, gpu_vm("r-0", reservation="res-1"))
    assert _in_use(compute) == 1
    insert(instances, gpu_vm("r-1", reservation="res-1"))
    assert _in_use(compute) == 2
    assert quota(regions.get(project=PROJECT, region=REGION), "NVIDIA_A100_GPUS")[0] == 2  # not counted twice

    with pytest.raises(exceptions.BadRequest) as e:  # full: the error comes inside the operation
        insert(instances, gpu_vm("r-2", reservation="res-1"))
    assert "does not have available resources" in e.value.errors[0].message
    with pytest.raises(exceptions.NotFound):
        instances.get(project=PROJECT, zone=ZONE, instance="r-2")

    instances.delete(project=PROJECT, zone=ZONE, instance="r-0").result()
    assert _in_use(compute) == 1
    insert(instances, gpu_vm("r-2", reservation="res-1"))
    assert _in_use(compute) == 2


def test_specific_reservation_errors(instances, compute) -> None:
    _reservation(compute, count=1)
    with pytest.raises(exceptions.NotFound):
        insert(instances, gpu_vm("r-x", reservation="no-such-reservation"))
    with pytest.raises(exceptions.BadRequest):  # reservation holds a2-highgpu-1g, not a2-highgpu-2g
        insert(instances, gpu_vm("r-y", "a2-highgpu-2g", reservation="res-1"))
    with pytest.raises(exceptions.Conflict):
        _reservation(compute, count=1)
    with pytest.raises(exceptions.BadRequest):
        _reservation(compute, "bad-type", machine_type="z9-imaginary-1")
    assert _in_use(compute) == 0


def test_any_reservation_is_used_unless_specific_is_required(instances, compute) -> None:
    _reservation(compute, "open-res", count=1, required=False)
    insert(instances, gpu_vm("anyone"))  # default affinity ANY_RESERVATION
    assert _in_use(compute, "open-res") == 1
    _reservation(compute, "closed-res", count=1, required=True)
    insert(instances, gpu_vm("another"))
    assert _in_use(compute, "closed-res") == 0


def test_reservations_list_and_delete(compute) -> None:
    reservations = compute("ReservationsClient")
    for i in range(3):
        _reservation(compute, f"res-{i}", count=1)
    assert [r.name for r in reservations.list(request={"project": PROJECT, "zone": ZONE, "max_results": 2})] == [
        "res-0", "res-1", "res-2"]
    reservations.delete(project=PROJECT, zone=ZONE, reservation="res-1").result()
    assert [r.name for r in reservations.list(project=PROJECT, zone=ZONE)] == ["res-0", "res-2"]


def test_reservation_is_refused_beyond_quota(gcp: Emulator, compute) -> None:
    gcp.faults.set_quota(REGION, "NVIDIA_A100_GPUS", 4)
    with pytest.raises(exceptions.Forbidden) as e:
        _reservation(compute, count=5)
    assert e.value.errors[0].code == "QUOTA_EXCEEDED"
    assert list(compute("ReservationsClient").list(project=PROJECT, zone=ZONE)) == []
    _reservation(compute, count=4)  # exactly the limit fits
