"""Instance templates (global and regional), VMs made from them, deletion protection and the open
catalog, through the real compute_v1 client."""

from __future__ import annotations

import pytest
from google.api_core import exceptions
from google.cloud import compute_v1

from .builders import PROJECT, REGION, ZONE, vm


def _template(name: str, machine_type: str = "n2-standard-4") -> compute_v1.InstanceTemplate:
    return compute_v1.InstanceTemplate(name=name, properties=compute_v1.InstanceProperties(
        machine_type=machine_type, labels={"made": "tpl"},
        disks=[compute_v1.AttachedDisk(boot=True, auto_delete=True, initialize_params=compute_v1.AttachedDiskInitializeParams(
            source_image="projects/rocky-linux-cloud/global/images/family/rocky-linux-9"))],
        network_interfaces=[compute_v1.NetworkInterface(network="global/networks/default")]))


def test_global_template_insert_get_list_delete_and_vms_from_it(compute, instances) -> None:
    templates = compute("InstanceTemplatesClient")
    templates.insert(project=PROJECT, instance_template_resource=_template("tpl")).result()
    got = templates.get(project=PROJECT, instance_template="tpl")
    assert got.properties.machine_type == "n2-standard-4" and got.self_link.endswith("/global/instanceTemplates/tpl")
    assert [t.name for t in templates.list(project=PROJECT)] == ["tpl"]
    with pytest.raises(exceptions.Conflict):
        templates.insert(project=PROJECT, instance_template_resource=_template("tpl"))

    instances.insert(request={"project": PROJECT, "zone": ZONE, "source_instance_template": "global/instanceTemplates/tpl",
                              "instance_resource": compute_v1.Instance(name="one")}).result()
    one = instances.get(project=PROJECT, zone=ZONE, instance="one")
    assert one.machine_type.endswith("/machineTypes/n2-standard-4") and one.labels["made"] == "tpl"
    instances.bulk_insert(project=PROJECT, zone=ZONE, bulk_insert_instance_resource_resource=compute_v1.BulkInsertInstanceResource(
        count=2, name_pattern="t-#", source_instance_template=f"projects/{PROJECT}/global/instanceTemplates/tpl")).result()
    assert sorted(i.name for i in instances.list(project=PROJECT, zone=ZONE)) == ["one", "t-1", "t-2"]

    templates.delete(project=PROJECT, instance_template="tpl").result()
    with pytest.raises(exceptions.NotFound):
        templates.get(project=PROJECT, instance_template="tpl")
    with pytest.raises(exceptions.NotFound):
        instances.insert(request={"project": PROJECT, "zone": ZONE, "source_instance_template": "global/instanceTemplates/tpl",
                                  "instance_resource": compute_v1.Instance(name="two")})


def test_regional_template_serves_its_region_only(compute, instances) -> None:
    regional = compute("RegionInstanceTemplatesClient")
    regional.insert(project=PROJECT, region=REGION, instance_template_resource=_template("rt", "e2-standard-2")).result()
    assert regional.get(project=PROJECT, region=REGION, instance_template="rt").region.endswith(f"/regions/{REGION}")
    assert [t.name for t in compute("InstanceTemplatesClient").list(project=PROJECT)] == []  # global list
    instances.insert(request={"project": PROJECT, "zone": ZONE, "instance_resource": compute_v1.Instance(name="r1"),
                              "source_instance_template": f"regions/{REGION}/instanceTemplates/rt"}).result()
    with pytest.raises(exceptions.BadRequest):
        instances.insert(request={"project": PROJECT, "zone": "us-east4-a", "instance_resource": compute_v1.Instance(name="r2"),
                                  "source_instance_template": f"regions/{REGION}/instanceTemplates/rt"})
    regional.delete(project=PROJECT, region=REGION, instance_template="rt").result()


def test_deletion_protection_refuses_delete_until_lifted(instances) -> None:
    body = vm("keep")
    body.deletion_protection = True
    instances.insert(project=PROJECT, zone=ZONE, instance_resource=body).result()
    with pytest.raises(exceptions.BadRequest) as e:
        instances.delete(project=PROJECT, zone=ZONE, instance="keep")
    assert "protected against deletion" in e.value.message and e.value.errors[0]["reason"] == "invalidResourceUsage"
    instances.set_deletion_protection(request={"project": PROJECT, "zone": ZONE, "resource": "keep",
                                               "deletion_protection": False}).result()
    instances.delete(project=PROJECT, zone=ZONE, instance="keep").result()


@pytest.mark.parametrize(("machine_type", "vcpus", "memory_mb"), [
    ("n1-standard-1", 1, 3840), ("n1-highcpu-2", 2, 1843), ("n1-highcpu-32", 32, 29491), ("n2-highmem-16", 16, 131072), ("e2-standard-4", 4, 16384),
    ("c2-standard-60", 60, 245760), ("n4-highcpu-8", 8, 16384), ("e2-micro", 2, 1024)])
def test_general_purpose_types_follow_their_familys_rule(compute, machine_type, vcpus, memory_mb) -> None:
    mt = compute("MachineTypesClient").get(project=PROJECT, zone=ZONE, machine_type=machine_type)
    assert (mt.guest_cpus, mt.memory_mb) == (vcpus, memory_mb)
    with pytest.raises(exceptions.BadRequest):  # a size the family does not have
        compute("InstancesClient").insert(project=PROJECT, zone=ZONE, instance_resource=vm("x", "n1-standard-3"))


@pytest.mark.parametrize(("image_project", "family"), [
    ("rocky-linux-cloud", "rocky-linux-9"), ("ubuntu-os-cloud", "ubuntu-2204-lts"), ("centos-cloud", "centos-stream-9"),
    ("cos-cloud", "cos-121-lts"), ("ubuntu-os-accelerator-images", "ubuntu-accelerator-2404-amd64-with-nvidia-580")])
def test_public_image_families_resolve_by_pattern(compute, image_project, family) -> None:
    images = compute("ImagesClient")
    img = images.get_from_family(project=image_project, family=family)
    assert img.family == family and img.status == "READY"
    assert images.get(project=image_project, image=img.name).family == family
    with pytest.raises(exceptions.NotFound):
        images.get_from_family(project=image_project, family=f"{family}-nope")
