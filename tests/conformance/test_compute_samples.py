"""Compute Engine as Google's published Python samples use it, against the emulator.

The calls follow python-docs-samples `compute/client_library/snippets/` (instances/create_start_instance,
list_all, delete_protection, spot, from_instance_template, bulk_insert, instance_templates), written
afresh with google-cloud-compute in its default (REST) transport. The only change a sample needs is
where its clients point: `client_options={"api_endpoint": "http://127.0.0.1:PORT"}` and anonymous
credentials. (The samples' `wait_for_extended_operation` calls `operation.result()`; with the
emulator's default timings an operation is already DONE when returned, so the library's polling
trap of gcp-facts section 5 does not arise here.)
"""

from __future__ import annotations

import uuid
from collections import defaultdict

import pytest
from google.api_core import exceptions
from google.auth.credentials import AnonymousCredentials
from google.cloud import compute_v1

PROJECT = "samples-project"
ZONE = "us-central1-a"


@pytest.fixture
def client(gcp):
    """client("InstancesClient") -> that compute_v1 client, pointed at the emulator."""
    def make(name: str):
        return getattr(compute_v1, name)(credentials=AnonymousCredentials(),
                                         client_options={"api_endpoint": f"http://{gcp.address}"})
    return make


def wait(operation) -> None:
    """The samples' wait_for_extended_operation: result(), then raise the operation's error if it has one."""
    operation.result(timeout=60)
    if operation.error_code:
        raise operation.exception() or RuntimeError(operation.error_message)


def boot_disk(client, project: str, family: str) -> compute_v1.AttachedDisk:
    image = client("ImagesClient").get_from_family(project=project, family=family)
    disk = compute_v1.AttachedDisk(boot=True, auto_delete=True, type_="PERSISTENT")
    disk.initialize_params = compute_v1.AttachedDiskInitializeParams(
        source_image=image.self_link, disk_size_gb=10, disk_type=f"zones/{ZONE}/diskTypes/pd-balanced")
    return disk


def create_instance(client, name: str, *, machine_type: str = "n1-standard-1", delete_protection: bool = False,
                    spot: bool = False) -> compute_v1.Instance:
    instance = compute_v1.Instance(name=name, machine_type=f"zones/{ZONE}/machineTypes/{machine_type}",
                                   disks=[boot_disk(client, "debian-cloud", "debian-12")],
                                   network_interfaces=[compute_v1.NetworkInterface(network="global/networks/default")])
    if delete_protection:
        instance.deletion_protection = True
    if spot:
        instance.scheduling = compute_v1.Scheduling(provisioning_model=compute_v1.Scheduling.ProvisioningModel.SPOT.name,
                                                    instance_termination_action="STOP")
    request = compute_v1.InsertInstanceRequest(zone=ZONE, project=PROJECT, instance_resource=instance)
    wait(client("InstancesClient").insert(request=request))
    return client("InstancesClient").get(project=PROJECT, zone=ZONE, instance=name)


def test_create_from_public_image_list_all_stop_start_delete(client):
    vm = create_instance(client, "sample-vm")
    assert vm.status == "RUNNING" and vm.machine_type.endswith("/machineTypes/n1-standard-1")
    create_instance(client, "sample-e2", machine_type="e2-standard-4")
    all_instances = defaultdict(list)  # list_all.py: aggregated_list, 50 a page, the pager pages
    for zone, response in client("InstancesClient").aggregated_list(
            request=compute_v1.AggregatedListInstancesRequest(project=PROJECT, max_results=50)):
        if response.instances:
            all_instances[zone].extend(i.name for i in response.instances)
    assert dict(all_instances) == {f"zones/{ZONE}": ["sample-e2", "sample-vm"]}
    instances = client("InstancesClient")
    wait(instances.stop(project=PROJECT, zone=ZONE, instance="sample-vm"))
    assert instances.get(project=PROJECT, zone=ZONE, instance="sample-vm").status == "TERMINATED"
    wait(instances.start(project=PROJECT, zone=ZONE, instance="sample-vm"))
    wait(instances.delete(project=PROJECT, zone=ZONE, instance="sample-vm"))
    with pytest.raises(exceptions.NotFound):
        instances.get(project=PROJECT, zone=ZONE, instance="sample-vm")


def test_delete_protection_samples(client):
    vm = create_instance(client, "protected", delete_protection=True)
    assert vm.deletion_protection is True  # delete_protection/get.py
    instances = client("InstancesClient")
    with pytest.raises(exceptions.BadRequest) as e:
        instances.delete(project=PROJECT, zone=ZONE, instance="protected")
    assert e.value.errors[0]["reason"] == "invalidResourceUsage"
    wait(instances.set_deletion_protection(request=compute_v1.SetDeletionProtectionInstanceRequest(
        project=PROJECT, zone=ZONE, resource="protected", deletion_protection=False)))  # delete_protection/set.py
    assert instances.get(project=PROJECT, zone=ZONE, instance="protected").deletion_protection is False
    wait(instances.delete(project=PROJECT, zone=ZONE, instance="protected"))


def test_spot_vm_sample(client):
    vm = create_instance(client, "spot-vm", spot=True)
    assert vm.scheduling.provisioning_model == compute_v1.Scheduling.ProvisioningModel.SPOT.name  # spot/is_spot_vm.py


def create_template(client, name: str) -> compute_v1.InstanceTemplate:
    """instance_templates/create.py: a template with a boot disk from a public family and the default network."""
    disk = compute_v1.AttachedDisk(boot=True, auto_delete=True)
    disk.initialize_params = compute_v1.AttachedDiskInitializeParams(
        source_image="projects/debian-cloud/global/images/family/debian-12", disk_size_gb=250)
    template = compute_v1.InstanceTemplate(name=name, properties=compute_v1.InstanceProperties(
        machine_type="e2-standard-4", disks=[disk],
        network_interfaces=[compute_v1.NetworkInterface(network="global/networks/default")]))
    wait(client("InstanceTemplatesClient").insert(project=PROJECT, instance_template_resource=template))
    return client("InstanceTemplatesClient").get(project=PROJECT, instance_template=name)


def test_instance_from_template_and_with_overrides(client):
    template = create_template(client, "sample-template")
    assert [t.name for t in client("InstanceTemplatesClient").list(project=PROJECT)] == ["sample-template"]
    instances = client("InstancesClient")
    wait(instances.insert(request=compute_v1.InsertInstanceRequest(  # from_instance_template/create_from_template.py
        project=PROJECT, zone=ZONE, source_instance_template=template.self_link,
        instance_resource=compute_v1.Instance(name="from-template"))))
    assert instances.get(project=PROJECT, zone=ZONE, instance="from-template").machine_type.endswith("/e2-standard-4")
    # create_from_template_with_overrides.py: another machine type and a second disk.
    extra = compute_v1.AttachedDisk(auto_delete=True, boot=False, type_="PERSISTENT")
    extra.initialize_params = compute_v1.AttachedDiskInitializeParams(
        disk_size_gb=50, source_image="projects/debian-cloud/global/images/family/debian-11")
    vm = compute_v1.Instance(name="overridden", machine_type=f"zones/{ZONE}/machineTypes/n2-standard-8",
                             disks=[*template.properties.disks, extra])
    wait(instances.insert(request=compute_v1.InsertInstanceRequest(
        project=PROJECT, zone=ZONE, instance_resource=vm, source_instance_template=template.self_link)))
    got = instances.get(project=PROJECT, zone=ZONE, instance="overridden")
    assert got.machine_type.endswith("/n2-standard-8") and len(got.disks) == 2
    wait(client("InstanceTemplatesClient").delete(project=PROJECT, instance_template="sample-template"))


def test_bulk_insert_sample_and_its_label_filter(client):
    template = create_template(client, "bulk-template")
    labels = {"bulk_batch": uuid.uuid4().hex}  # bulk_insert.py: a batch label to find the VMs by
    resource = compute_v1.BulkInsertInstanceResource(
        source_instance_template=template.self_link, count=5, min_count=5, name_pattern="inst-####",
        instance_properties=compute_v1.InstanceProperties(labels=labels))
    wait(client("InstancesClient").bulk_insert(request=compute_v1.BulkInsertInstanceRequest(
        project=PROJECT, zone=ZONE, bulk_insert_instance_resource_resource=resource)))
    listed = client("InstancesClient").list(request=compute_v1.ListInstancesRequest(
        project=PROJECT, zone=ZONE, filter=" AND ".join(f"labels.{k}:{v}" for k, v in labels.items())))
    assert [i.name for i in listed] == [f"inst-000{n}" for n in range(1, 6)]


def test_bulk_insert_below_min_count_raises_the_summary_error(client, gcp):
    gcp.faults.set_capacity(ZONE, "e2-standard-4", 2)
    template = create_template(client, "short-template")
    resource = compute_v1.BulkInsertInstanceResource(
        source_instance_template=template.self_link, count=4, min_count=3, name_pattern="short-#")
    with pytest.raises(exceptions.GoogleAPICallError) as e:
        wait(client("InstancesClient").bulk_insert(request=compute_v1.BulkInsertInstanceRequest(
            project=PROJECT, zone=ZONE, bulk_insert_instance_resource_resource=resource)))
    assert "Requested minimum count of 3 VMs could not be created." in str(e.value)
    assert e.value.errors[0].code == "VM_MIN_COUNT_NOT_REACHED"  # the summary first, as the real API puts it
    assert list(client("InstancesClient").list(project=PROJECT, zone=ZONE)) == []
