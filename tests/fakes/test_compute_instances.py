"""Instances through the real client: insert, bulkInsert, get, list, aggregatedList, delete,
setLabels, setMetadata, stop, start, and the errors the real API gives for each."""

from __future__ import annotations

import pytest
from google.api_core import exceptions
from google.cloud import compute_v1

from gcpgpu.fakes.server import Emulator

from .builders import (
    CPU_TYPE,
    FAST_POLL,
    GPU_TYPE,
    PROJECT,
    REGION,
    ZONE,
    gpu_vm,
    insert,
    quota,
    vm,
    zone_without,
)

OTHER_ZONE = "us-central1-b"


def test_insert_get_delete(instances) -> None:
    op = instances.insert(project=PROJECT, zone=ZONE, instance_resource=vm("web-1", labels={"team": "ml"}))
    assert op.result() is None
    assert op.operation_type == "insert" and op.target_link.endswith("/instances/web-1")
    got = instances.get(project=PROJECT, zone=ZONE, instance="web-1")
    assert got.status == "RUNNING"
    assert got.machine_type.endswith(f"/zones/{ZONE}/machineTypes/{CPU_TYPE}")
    assert got.labels == {"team": "ml"} and got.label_fingerprint
    assert got.id == op.target_id
    assert got.disks[0].boot and got.disks[0].source.endswith(f"/zones/{ZONE}/disks/web-1")
    assert got.network_interfaces[0].network.endswith("/global/networks/default")
    assert got.network_interfaces[0].network_i_p.startswith("10.128.")  # the default us-central1 subnet
    assert got.scheduling.on_host_maintenance == "MIGRATE"  # the API's default for a CPU VM

    del_op = instances.delete(project=PROJECT, zone=ZONE, instance="web-1")
    del_op.result()
    assert del_op.operation_type == "delete"
    with pytest.raises(exceptions.NotFound) as e:
        instances.get(project=PROJECT, zone=ZONE, instance="web-1")
    assert e.value.errors[0]["reason"] == "notFound"
    with pytest.raises(exceptions.NotFound):
        instances.delete(project=PROJECT, zone=ZONE, instance="web-1")


def test_list_pages_and_filters(instances) -> None:
    for i in range(7):
        insert(instances, vm(f"node-{i}", labels={"team": "ml" if i % 2 == 0 else "infra", "rank": str(i)}))
    pager = instances.list(request={"project": PROJECT, "zone": ZONE, "max_results": 2})
    pages = list(pager.pages)
    assert [len(p.items) for p in pages] == [2, 2, 2, 1]
    assert [i.name for i in instances.list(request={"project": PROJECT, "zone": ZONE, "max_results": 2})] == [
        f"node-{i}" for i in range(7)
    ]  # the pager follows nextPageToken by itself

    def names(flt: str) -> list[str]:
        return [i.name for i in instances.list(request={"project": PROJECT, "zone": ZONE, "filter": flt})]

    assert names("labels.team = ml") == ["node-0", "node-2", "node-4", "node-6"]
    assert names("labels.team = ml AND labels.rank = 2") == ["node-2"]
    assert names("(labels.rank = 1) OR (labels.rank = 5)") == ["node-1", "node-5"]
    assert names("name eq 'node-[3-4]'") == ["node-3", "node-4"]
    assert names("name != node-0 AND labels.team = ml") == ["node-2", "node-4", "node-6"]
    assert names("status = RUNNING") == [f"node-{i}" for i in range(7)]
    assert names("labels.missing:*") == []
    assert names(f"machineType = {CPU_TYPE}") == [f"node-{i}" for i in range(7)]
    with_filter_pages = instances.list(request={"project": PROJECT, "zone": ZONE, "filter": "labels.team = ml",
                                                 "max_results": 3})
    assert len(list(with_filter_pages.pages)) == 2


def test_list_in_an_empty_zone_and_unknown_zone(instances) -> None:
    assert list(instances.list(project=PROJECT, zone=OTHER_ZONE)) == []
    # An unknown zone in a collection's path is a bad argument to the real API, not a 404.
    with pytest.raises(exceptions.BadRequest) as e:
        list(instances.list(project=PROJECT, zone="us-central1-z"))
    assert "Unknown zone" in e.value.message
    with pytest.raises(exceptions.BadRequest):
        insert(instances, vm("nowhere", zone="us-central1-z"), zone="us-central1-z")


def test_aggregated_list_across_zones_with_paging(gcp: Emulator, instances) -> None:
    insert(instances, vm("a-1"))
    insert(instances, vm("a-2"))
    insert(instances, vm("b-1", zone=OTHER_ZONE), zone=OTHER_ZONE)
    insert(instances, vm("e-1", zone="us-east4-a"), zone="us-east4-a")
    found: dict[str, list[str]] = {}
    # A scope comes back on every page that holds some of its VMs: accumulate, don't overwrite.
    for scope, scoped in instances.aggregated_list(request={"project": PROJECT, "max_results": 1}):
        found.setdefault(scope, []).extend(i.name for i in scoped.instances)
    found = {k: v for k, v in found.items() if v}
    assert found == {f"zones/{ZONE}": ["a-1", "a-2"], f"zones/{OTHER_ZONE}": ["b-1"], "zones/us-east4-a": ["e-1"]}
    assert len(gcp.requests.all(contains="/aggregated/instances")) == 4  # one VM a page
    scoped = dict(instances.aggregated_list(request={"project": PROJECT, "filter": "name = a-*"}))
    assert [i.name for i in scoped[f"zones/{ZONE}"].instances] == ["a-1", "a-2"]
    assert scoped[f"zones/{OTHER_ZONE}"].warning.code == "NO_RESULTS_ON_PAGE"


def test_already_exists(instances) -> None:
    insert(instances, vm("dup"))
    with pytest.raises(exceptions.Conflict) as e:
        insert(instances, vm("dup"))
    assert e.value.errors[0]["reason"] == "alreadyExists"
    insert(instances, vm("dup", zone=OTHER_ZONE), zone=OTHER_ZONE)  # names are per zone


@pytest.mark.parametrize("name", ["Upper", "9lives", "under_score", "trailing-", "x" * 64, "dot.ted"])
def test_names_follow_rfc_1035(instances, name: str) -> None:
    with pytest.raises(exceptions.BadRequest) as e:
        insert(instances, vm(name))
    assert e.value.errors[0]["reason"] == "invalid"
    assert "regex" in e.value.message


def test_longest_legal_name(instances) -> None:
    name = "a" + "-b" * 31  # 63 characters
    insert(instances, vm(name))
    assert instances.get(project=PROJECT, zone=ZONE, instance=name).name == name


def test_machine_type_not_offered_in_the_zone(gcp: Emulator, instances) -> None:
    zone = zone_without(gcp, "a3-ultragpu-8g")
    with pytest.raises(exceptions.BadRequest) as e:
        insert(instances, gpu_vm("h200", "a3-ultragpu-8g", zone=zone), zone=zone)
    assert e.value.errors[0]["reason"] == "invalid"
    assert f"does not exist in zone '{zone}'" in e.value.message
    with pytest.raises(exceptions.BadRequest):
        insert(instances, vm("nonsense", "z9-imaginary-1"))


def test_gpu_vm_needs_on_host_maintenance_terminate(instances) -> None:
    with pytest.raises(exceptions.BadRequest) as e:
        insert(instances, vm("a100", GPU_TYPE))  # scheduling left at the default, MIGRATE
    assert "live migration" in e.value.message
    with pytest.raises(exceptions.BadRequest):
        insert(instances, vm("a100", GPU_TYPE, on_host_maintenance="MIGRATE"))
    # An N1 with attached GPUs is a GPU VM too.
    with pytest.raises(exceptions.BadRequest):
        insert(instances, vm("n1-gpu", "n1-standard-8", guest_accelerators=[("nvidia-tesla-a100", 1)]))
    insert(instances, gpu_vm("a100"))
    got = instances.get(project=PROJECT, zone=ZONE, instance="a100")
    assert got.scheduling.on_host_maintenance == "TERMINATE"
    assert got.guest_accelerators[0].accelerator_type.endswith("/acceleratorTypes/nvidia-tesla-a100")
    assert got.guest_accelerators[0].accelerator_count == 1


def test_spot_gpu_vm_defaults_to_terminate(instances) -> None:
    insert(instances, vm("spot", GPU_TYPE, provisioning_model="SPOT"))  # as gcloud sends --provisioning-model=SPOT
    got = instances.get(project=PROJECT, zone=ZONE, instance="spot")
    assert (got.scheduling.on_host_maintenance, got.scheduling.automatic_restart) == ("TERMINATE", False)
    with pytest.raises(exceptions.BadRequest):
        insert(instances, vm("spot-migrating", GPU_TYPE, provisioning_model="SPOT", on_host_maintenance="MIGRATE"))


def test_accelerator_not_offered_in_the_zone(gcp: Emulator, instances) -> None:
    zone = next(z for z in gcp.world.zone_machine_types if "nvidia-b200" not in gcp.world.accelerators_in_zone(z))
    with pytest.raises(exceptions.BadRequest) as e:
        insert(instances, vm("b200", "n1-standard-8", zone=zone, on_host_maintenance="TERMINATE",
                             guest_accelerators=[("nvidia-b200", 8)]), zone=zone)
    assert "nvidia-b200" in e.value.message


def test_set_labels_with_fingerprint(instances) -> None:
    insert(instances, vm("labelled", labels={"a": "1"}))
    fp = instances.get(project=PROJECT, zone=ZONE, instance="labelled").label_fingerprint
    instances.set_labels(project=PROJECT, zone=ZONE, instance="labelled",
                         instances_set_labels_request_resource=compute_v1.InstancesSetLabelsRequest(
                             labels={"a": "1", "cluster": "demo"}, label_fingerprint=fp)).result()
    got = instances.get(project=PROJECT, zone=ZONE, instance="labelled")
    assert got.labels == {"a": "1", "cluster": "demo"}
    assert got.label_fingerprint != fp
    # The old fingerprint is stale now: the real API answers 412 conditionNotMet.
    with pytest.raises(exceptions.PreconditionFailed) as e:
        instances.set_labels(project=PROJECT, zone=ZONE, instance="labelled",
                             instances_set_labels_request_resource=compute_v1.InstancesSetLabelsRequest(
                                 labels={"b": "2"}, label_fingerprint=fp))
    assert e.value.errors[0]["reason"] == "conditionNotMet"
    assert instances.get(project=PROJECT, zone=ZONE, instance="labelled").labels == {"a": "1", "cluster": "demo"}
    with pytest.raises(exceptions.BadRequest):  # label values are lowercase
        instances.set_labels(project=PROJECT, zone=ZONE, instance="labelled",
                             instances_set_labels_request_resource=compute_v1.InstancesSetLabelsRequest(
                                 labels={"a": "Big"}, label_fingerprint=got.label_fingerprint))
    with pytest.raises(exceptions.NotFound):
        instances.set_labels(project=PROJECT, zone=ZONE, instance="ghost",
                             instances_set_labels_request_resource=compute_v1.InstancesSetLabelsRequest(
                                 labels={}, label_fingerprint=fp))


def test_set_metadata_with_fingerprint(instances) -> None:
    insert(instances, vm("meta"))
    md = instances.get(project=PROJECT, zone=ZONE, instance="meta").metadata
    new = compute_v1.Metadata(fingerprint=md.fingerprint,
                              items=[compute_v1.Items(key="startup-script", value="#!/bin/sh\necho hi\n")])
    instances.set_metadata(project=PROJECT, zone=ZONE, instance="meta", metadata_resource=new).result()
    got = instances.get(project=PROJECT, zone=ZONE, instance="meta").metadata
    assert [(i.key, i.value) for i in got.items] == [("startup-script", "#!/bin/sh\necho hi\n")]
    with pytest.raises(exceptions.PreconditionFailed):
        instances.set_metadata(project=PROJECT, zone=ZONE, instance="meta", metadata_resource=new)


def test_stop_and_start_release_and_take_quota(compute, instances) -> None:
    regions = compute("RegionsClient")
    insert(instances, gpu_vm("stoppable"))
    used = quota(regions.get(project=PROJECT, region=REGION), "NVIDIA_A100_GPUS")[0]
    assert used == 1
    op = instances.stop(project=PROJECT, zone=ZONE, instance="stoppable")
    op.result()
    assert op.operation_type == "stop"
    assert instances.get(project=PROJECT, zone=ZONE, instance="stoppable").status == "TERMINATED"
    assert quota(regions.get(project=PROJECT, region=REGION), "NVIDIA_A100_GPUS")[0] == 0  # stopped VMs hold no GPUs
    instances.start(project=PROJECT, zone=ZONE, instance="stoppable").result()
    assert instances.get(project=PROJECT, zone=ZONE, instance="stoppable").status == "RUNNING"
    assert quota(regions.get(project=PROJECT, region=REGION), "NVIDIA_A100_GPUS")[0] == 1
    with pytest.raises(exceptions.NotFound):
        instances.stop(project=PROJECT, zone=ZONE, instance="ghost")


def test_a_stopped_gpu_vm_can_fail_to_start(gcp: Emulator, instances) -> None:
    insert(instances, gpu_vm("sleeper"))
    instances.stop(project=PROJECT, zone=ZONE, instance="sleeper").result()
    gcp.faults.stockout(ZONE, GPU_TYPE)  # someone else took the zone's last A100s meanwhile
    with pytest.raises(exceptions.ServiceUnavailable) as e:
        instances.start(project=PROJECT, zone=ZONE, instance="sleeper").result(polling=FAST_POLL)
    assert e.value.errors[0].code == "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS"
    assert instances.get(project=PROJECT, zone=ZONE, instance="sleeper").status == "TERMINATED"
    gcp.faults.set_capacity(ZONE, GPU_TYPE, 1)
    gcp.faults.set_quota(REGION, "NVIDIA_A100_GPUS", 0)
    with pytest.raises(exceptions.Forbidden) as e:
        instances.start(project=PROJECT, zone=ZONE, instance="sleeper").result(polling=FAST_POLL)
    assert e.value.errors[0].code == "QUOTA_EXCEEDED"
    gcp.faults.set_quota(REGION, "NVIDIA_A100_GPUS", 1)
    instances.start(project=PROJECT, zone=ZONE, instance="sleeper").result(polling=FAST_POLL)
    assert instances.get(project=PROJECT, zone=ZONE, instance="sleeper").status == "RUNNING"


def _bulk(count: int, *, name_pattern: str = "", per_instance: list[str] | None = None, min_count: int | None = None,
          machine_type: str = GPU_TYPE, **props) -> compute_v1.BulkInsertInstanceResource:
    body = compute_v1.BulkInsertInstanceResource(
        count=count,
        instance_properties=compute_v1.InstanceProperties(
            machine_type=machine_type,
            disks=[compute_v1.AttachedDisk(boot=True, initialize_params=compute_v1.AttachedDiskInitializeParams(
                source_image="projects/debian-cloud/global/images/family/debian-12"))],
            network_interfaces=[compute_v1.NetworkInterface(network="global/networks/default")],
            scheduling=compute_v1.Scheduling(on_host_maintenance="TERMINATE", automatic_restart=False),
            labels={"cluster": "bulk"},
            **props,
        ),
    )
    if name_pattern:
        body.name_pattern = name_pattern
    if per_instance:
        body.per_instance_properties = {n: compute_v1.BulkInsertInstanceResourcePerInstanceProperties()
                                        for n in per_instance}
    if min_count is not None:
        body.min_count = min_count
    return body


def test_bulk_insert_with_name_pattern(gcp: Emulator, instances) -> None:
    op = instances.bulk_insert(project=PROJECT, zone=ZONE, bulk_insert_instance_resource_resource=_bulk(
        3, name_pattern="train-##"))
    op.result()
    assert op.operation_type == "bulkInsert"
    got = list(instances.list(request={"project": PROJECT, "zone": ZONE, "filter": "labels.cluster = bulk"}))
    assert [i.name for i in got] == ["train-01", "train-02", "train-03"]
    assert all(i.status == "RUNNING" and i.guest_accelerators[0].accelerator_count == 1 for i in got)
    assert len({i.network_interfaces[0].network_i_p for i in got}) == 3
    assert len(gcp.requests.all(method="POST")) == 1  # one call made three VMs
    # The pattern skips names already taken.
    instances.bulk_insert(project=PROJECT, zone=ZONE, bulk_insert_instance_resource_resource=_bulk(
        2, name_pattern="train-##")).result()
    assert len(list(instances.list(project=PROJECT, zone=ZONE))) == 5


def test_bulk_insert_with_per_instance_names(instances) -> None:
    instances.bulk_insert(project=PROJECT, zone=ZONE, bulk_insert_instance_resource_resource=_bulk(
        2, per_instance=["head", "worker"])).result()
    assert sorted(i.name for i in instances.list(project=PROJECT, zone=ZONE)) == ["head", "worker"]
    with pytest.raises(exceptions.Conflict):
        instances.bulk_insert(project=PROJECT, zone=ZONE, bulk_insert_instance_resource_resource=_bulk(
            1, per_instance=["head"]))


def test_bulk_insert_validates_like_insert(instances) -> None:
    body = _bulk(2, name_pattern="bad-##")
    body.instance_properties.scheduling.on_host_maintenance = "MIGRATE"
    with pytest.raises(exceptions.BadRequest):
        instances.bulk_insert(project=PROJECT, zone=ZONE, bulk_insert_instance_resource_resource=body)
    with pytest.raises(exceptions.BadRequest):  # neither names nor a pattern
        instances.bulk_insert(project=PROJECT, zone=ZONE, bulk_insert_instance_resource_resource=_bulk(2))
    with pytest.raises(exceptions.BadRequest):
        instances.bulk_insert(project=PROJECT, zone=ZONE, bulk_insert_instance_resource_resource=_bulk(
            2, name_pattern="x-##", min_count=3))
    assert list(instances.list(project=PROJECT, zone=ZONE)) == []


def test_bulk_insert_min_count_takes_what_capacity_allows(gcp: Emulator, instances) -> None:
    gcp.faults.set_capacity(ZONE, GPU_TYPE, 3)
    op = instances.bulk_insert(project=PROJECT, zone=ZONE, bulk_insert_instance_resource_resource=_bulk(
        4, name_pattern="part-#", min_count=2))
    op.result(polling=FAST_POLL)
    assert [i.name for i in instances.list(project=PROJECT, zone=ZONE)] == ["part-1", "part-2", "part-3"]
    with pytest.raises(exceptions.ServiceUnavailable) as e:  # capacity is gone now
        instances.bulk_insert(project=PROJECT, zone=ZONE, bulk_insert_instance_resource_resource=_bulk(
            2, name_pattern="more-#")).result(polling=FAST_POLL)
    # The bulk operation carries the summary; the cause sits on the group's per-VM inserts.
    assert [x.code for x in e.value.errors] == ["VM_MIN_COUNT_NOT_REACHED"]
    assert e.value.errors[0].message == "Requested minimum count of 2 VMs could not be created."


def test_bulk_insert_groups_one_insert_operation_per_vm(gcp: Emulator, instances, compute) -> None:
    gcp.faults.set_capacity(ZONE, GPU_TYPE, 3)
    op = instances.bulk_insert(project=PROJECT, zone=ZONE, bulk_insert_instance_resource_resource=_bulk(
        4, name_pattern="g-#", min_count=2))
    op.result(polling=FAST_POLL)
    bulk = compute("ZoneOperationsClient").get(project=PROJECT, zone=ZONE, operation=op.name)
    group = bulk.operation_group_id
    assert group
    status = bulk.instances_bulk_insert_operation_metadata.per_location_status[f"zones/{ZONE}"]
    assert (status.target_vm_count, status.created_vm_count, status.failed_to_create_vm_count) == (4, 3, 1)
    ops = list(compute("ZoneOperationsClient").list(request={
        "project": PROJECT, "zone": ZONE, "filter": f"operationGroupId={group}"}))
    inserts = [o for o in ops if o.operation_type == "insert"]
    assert sorted(o.target_link.rsplit("/", 1)[1] for o in inserts) == ["g-1", "g-2", "g-3", "g-4"]
    failed = [o for o in inserts if o.error.errors]
    assert [o.target_link.rsplit("/", 1)[1] for o in failed] == ["g-4"]
    assert failed[0].error.errors[0].code == "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS"
    # Below minCount: nothing made, the summary on the bulk operation, the cause on every insert.
    with pytest.raises(exceptions.ServiceUnavailable):
        instances.bulk_insert(project=PROJECT, zone=ZONE, bulk_insert_instance_resource_resource=_bulk(
            2, name_pattern="h-#")).result(polling=FAST_POLL)
    ops = list(compute("ZoneOperationsClient").list(request={
        "project": PROJECT, "zone": ZONE, "filter": "operationType = bulkInsert"}))
    group2 = ops[-1].operation_group_id
    assert group2 and group2 != group
    assert ops[-1].instances_bulk_insert_operation_metadata.per_location_status[f"zones/{ZONE}"].created_vm_count == 0
    grouped = list(compute("ZoneOperationsClient").list(request={
        "project": PROJECT, "zone": ZONE, "filter": f"operationGroupId={group2} AND operationType=insert"}))
    assert [o.error.errors[0].code for o in grouped] == ["ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS"] * 2
    assert [i.name for i in instances.list(project=PROJECT, zone=ZONE)] == ["g-1", "g-2", "g-3"]


def _fingerprint_past_the_62nd_letter(instances, name: str) -> str:
    """Relabel `name` until its label fingerprint holds one of base64's two alphabet-specific letters."""
    for i in range(200):
        fp = instances.get(project=PROJECT, zone=ZONE, instance=name).label_fingerprint
        if set(fp) & set("+/-_"):
            return fp
        instances.set_labels(project=PROJECT, zone=ZONE, instance=name, instances_set_labels_request_resource=(
            compute_v1.InstancesSetLabelsRequest(labels={"n": str(i)}, label_fingerprint=fp))).result()
    raise AssertionError("no fingerprint with '+', '/', '-' or '_' in 200 tries")


def test_fingerprints_use_the_url_safe_alphabet_and_either_alphabet_is_accepted(instances) -> None:
    insert(instances, vm("labelled"))
    fp = _fingerprint_past_the_62nd_letter(instances, "labelled")
    # As Compute writes `format: byte` fields (real responses read e.g. "IZjMMp0A_8k="): never '+' or '/'.
    assert set(fp) & set("-_") and not set(fp) & set("+/") and fp.endswith("=")
    # gcloud decodes and re-encodes what it read; other clients may send the standard alphabet or
    # drop the padding: the same bytes are the same fingerprint.
    standard = fp.replace("-", "+").replace("_", "/")
    instances.set_labels(project=PROJECT, zone=ZONE, instance="labelled", instances_set_labels_request_resource=(
        compute_v1.InstancesSetLabelsRequest(labels={"a": "1"}, label_fingerprint=standard.rstrip("=")))).result()
    got = instances.get(project=PROJECT, zone=ZONE, instance="labelled")
    assert got.labels == {"a": "1"}
    with pytest.raises(exceptions.PreconditionFailed):  # the old fingerprint, in either alphabet, is stale
        instances.set_labels(project=PROJECT, zone=ZONE, instance="labelled", instances_set_labels_request_resource=(
            compute_v1.InstancesSetLabelsRequest(labels={}, label_fingerprint=fp)))
    md = got.metadata
    instances.set_metadata(project=PROJECT, zone=ZONE, instance="labelled", metadata_resource=compute_v1.Metadata(
        fingerprint=md.fingerprint.replace("-", "+").replace("_", "/"),
        items=[compute_v1.Items(key="k", value="v")])).result()
    assert [i.key for i in instances.get(project=PROJECT, zone=ZONE, instance="labelled").metadata.items] == ["k"]
