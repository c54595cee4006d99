"""regionInstances.bulkInsert through compute_v1's RegionInstancesClient: the zone it picks, the
location policy it obeys, and a region with no room."""

from __future__ import annotations

import pytest
from google.api_core import exceptions
from google.cloud import compute_v1

from .builders import GPU_TYPE, IMAGE, PROJECT, REGION


def _bulk(count: int, pattern: str, deny: tuple[str, ...] = ()) -> compute_v1.BulkInsertInstanceResource:
    return compute_v1.BulkInsertInstanceResource(
        count=count, name_pattern=pattern,
        instance_properties=compute_v1.InstanceProperties(
            machine_type=GPU_TYPE, scheduling=compute_v1.Scheduling(on_host_maintenance="TERMINATE"),
            disks=[compute_v1.AttachedDisk(boot=True, auto_delete=True, initialize_params=compute_v1.AttachedDiskInitializeParams(
                source_image=IMAGE))],
            network_interfaces=[compute_v1.NetworkInterface(network="global/networks/default")]),
        location_policy=compute_v1.LocationPolicy(locations={
            f"zones/{z}": compute_v1.LocationPolicyLocation(preference="DENY") for z in deny}))


def test_regional_bulk_skips_a_stocked_out_zone_and_reports_a_region_operation(gcp, compute, instances):
    gcp.faults.set_capacity(f"{REGION}-a", GPU_TYPE, 1)  # room for one, two asked: the next zone takes both
    op = compute("RegionInstancesClient").bulk_insert(project=PROJECT, region=REGION,
                                                      bulk_insert_instance_resource_resource=_bulk(2, "r-#"))
    op.result()
    assert op.region.endswith(f"/regions/{REGION}") and not op.zone
    placed = {i.name: i.zone.rsplit("/", 1)[1] for i in instances.list(project=PROJECT, zone=f"{REGION}-b")}
    assert placed == {"r-1": f"{REGION}-b", "r-2": f"{REGION}-b"}
    (bulk_op,) = gcp.compute.list_operations(PROJECT, f"regions/{REGION}", "operationType = bulkInsert")
    status = bulk_op["instancesBulkInsertOperationMetadata"]["perLocationStatus"]
    assert list(status) == [f"zones/{REGION}-b"] and status[f"zones/{REGION}-b"]["createdVmCount"] == 2


def test_regional_bulk_obeys_deny_and_fails_when_no_allowed_zone_has_room(gcp, compute):
    zones = gcp.compute.world.regions[REGION]
    for zone in zones:
        gcp.faults.set_capacity(zone, GPU_TYPE, 0)
    with pytest.raises(exceptions.GoogleAPICallError) as e:
        compute("RegionInstancesClient").bulk_insert(project=PROJECT, region=REGION,
                                                     bulk_insert_instance_resource_resource=_bulk(2, "s-#")).result()
    first = e.value.errors[0]
    assert (first.get("code") if isinstance(first, dict) else first.code) == "VM_MIN_COUNT_NOT_REACHED"
    with pytest.raises(exceptions.BadRequest):  # every zone denied
        compute("RegionInstancesClient").bulk_insert(project=PROJECT, region=REGION,
                                                     bulk_insert_instance_resource_resource=_bulk(1, "t-#", tuple(zones)))
