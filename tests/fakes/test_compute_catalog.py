"""Read-only Compute resources through the real client: zones, regions, machine and accelerator
types, images, projects.get; list paging and filters."""

from __future__ import annotations

import pytest
from google.api_core import exceptions

from gcpgpu.fakes.server import Emulator

from .builders import GPU_TYPE, PROJECT, REGION, ZONE


def test_zones_list_pages_through_every_zone(gcp: Emulator, compute) -> None:
    zones = compute("ZonesClient")
    every = [z for zs in gcp.world.regions.values() for z in zs]
    pager = zones.list(request={"project": PROJECT, "max_results": 3})
    pages = list(pager.pages)
    assert len(pages) == -(-len(every) // 3)  # several pages, each a separate request
    assert all(len(p.items) <= 3 for p in pages)
    assert [z.name for p in pages for z in p.items] == every
    assert len(gcp.requests.all(contains="/zones")) == len(pages)


def test_zone_get_and_unknown_zone(compute) -> None:
    zones = compute("ZonesClient")
    z = zones.get(project=PROJECT, zone=ZONE)
    assert (z.name, z.status) == (ZONE, "UP")
    assert z.region.endswith(f"/regions/{REGION}")
    with pytest.raises(exceptions.NotFound) as e:
        zones.get(project=PROJECT, zone="mars-north1-a")
    assert e.value.errors[0]["reason"] == "notFound"


def test_zones_filter_by_name_and_region(gcp: Emulator, compute) -> None:
    zones = compute("ZonesClient")
    got = [z.name for z in zones.list(request={"project": PROJECT, "filter": f"name = {REGION}-*"})]
    assert got == gcp.world.regions[REGION]
    got = [z.name for z in zones.list(request={"project": PROJECT, "filter": "region eq '.*/us-east4'"})]
    assert got == gcp.world.regions["us-east4"]
    with pytest.raises(exceptions.BadRequest) as e:
        list(zones.list(request={"project": PROJECT, "filter": "name = (broken"}))
    assert e.value.errors[0]["reason"] == "invalid"


def test_region_has_the_gpu_quotas_users_check(compute) -> None:
    regions = compute("RegionsClient")
    r = regions.get(project=PROJECT, region=REGION)
    metrics = {q.metric: q for q in r.quotas}
    for m in ("CPUS", "NVIDIA_A100_GPUS", "NVIDIA_A100_80GB_GPUS", "NVIDIA_H100_GPUS",
              "NVIDIA_H100_MEGA_GPUS", "PREEMPTIBLE_NVIDIA_H100_GPUS"):
        assert metrics[m].limit > 0 and metrics[m].usage == 0
    assert {z.rsplit("/", 1)[-1] for z in r.zones} >= {ZONE}
    listed = list(regions.list(request={"project": PROJECT, "max_results": 2}))
    assert REGION in [x.name for x in listed] and len(listed) >= 3
    with pytest.raises(exceptions.NotFound):
        regions.get(project=PROJECT, region="atlantis1")


def test_region_quota_override_shows_in_regions_get(gcp: Emulator, compute) -> None:
    gcp.faults.set_quota(REGION, "NVIDIA_H100_GPUS", 16)
    r = compute("RegionsClient").get(project=PROJECT, region=REGION)
    assert next(q.limit for q in r.quotas if q.metric == "NVIDIA_H100_GPUS") == 16


def test_machine_types_in_a_zone(gcp: Emulator, compute) -> None:
    mts = compute("MachineTypesClient")
    mt = mts.get(project=PROJECT, zone=ZONE, machine_type=GPU_TYPE)
    info = gcp.world.machine_types[GPU_TYPE]
    assert (mt.guest_cpus, mt.memory_mb) == (info.vcpus, info.memory_mb)
    assert mt.accelerators[0].guest_accelerator_type == info.gpu
    assert mt.accelerators[0].guest_accelerator_count == info.gpu_count
    names = [m.name for m in mts.list(request={"project": PROJECT, "zone": ZONE, "max_results": 4})]
    assert names == gcp.world.zone_machine_types[ZONE]
    a3 = [m.name for m in mts.list(request={"project": PROJECT, "zone": ZONE, "filter": "name = a3-*"})]
    assert a3 and all(n.startswith("a3-") for n in a3)
    missing = next(m for m in gcp.world.machine_types if m not in gcp.world.zone_machine_types[ZONE])
    with pytest.raises(exceptions.NotFound):
        mts.get(project=PROJECT, zone=ZONE, machine_type=missing)


def test_machine_types_aggregated_list_covers_every_zone(gcp: Emulator, compute) -> None:
    mts = compute("MachineTypesClient")
    scopes = dict(mts.aggregated_list(request={"project": PROJECT, "filter": f"name = {GPU_TYPE}"}))
    offering = {f"zones/{z}" for z, offered in gcp.world.zone_machine_types.items() if GPU_TYPE in offered}
    assert {s for s, scoped in scopes.items() if scoped.machine_types} == offering


def test_accelerator_types(gcp: Emulator, compute) -> None:
    accs = compute("AcceleratorTypesClient")
    names = [a.name for a in accs.list(project=PROJECT, zone=ZONE)]
    assert names == gcp.world.accelerators_in_zone(ZONE)
    a100 = accs.get(project=PROJECT, zone=ZONE, accelerator_type="nvidia-tesla-a100")
    assert a100.maximum_cards_per_instance >= 8
    assert a100.zone.endswith(f"/zones/{ZONE}")
    only_a4 = next(z for z in gcp.world.zone_machine_types if "nvidia-tesla-a100" not in gcp.world.accelerators_in_zone(z))
    with pytest.raises(exceptions.NotFound):
        accs.get(project=PROJECT, zone=only_a4, accelerator_type="nvidia-tesla-a100")
    agg = dict(accs.aggregated_list(project=PROJECT))
    assert [a.name for a in agg[f"zones/{ZONE}"].accelerator_types] == names


@pytest.mark.parametrize(
    ("image_project", "family"),
    [("debian-cloud", "debian-12"), ("ubuntu-os-cloud", "ubuntu-2204-lts"), ("cos-cloud", "cos-stable"),
     ("deeplearning-platform-release", "common-cu124-debian-11")],
)
def test_public_images_by_family_and_name(compute, image_project: str, family: str) -> None:
    images = compute("ImagesClient")
    img = images.get_from_family(project=image_project, family=family)
    assert (img.family, img.status) == (family, "READY")
    assert images.get(project=image_project, image=img.name).self_link == img.self_link
    assert img.name in [i.name for i in images.list(project=image_project)]


def test_unknown_image_is_not_found(compute) -> None:
    images = compute("ImagesClient")
    with pytest.raises(exceptions.NotFound):
        images.get_from_family(project="debian-cloud", family="windows-95")
    with pytest.raises(exceptions.NotFound):
        images.get(project="debian-cloud", image="debian-1-buzz")


def test_projects_get(compute) -> None:
    p = compute("ProjectsClient").get(project=PROJECT)
    assert p.name == PROJECT and p.id > 0
    assert p.default_service_account.endswith("-compute@developer.gserviceaccount.com")
    gpus = next(q for q in p.quotas if q.metric == "GPUS_ALL_REGIONS")
    assert gpus.limit > 0 and gpus.usage == 0


def test_invalid_project_id_is_refused(compute) -> None:
    with pytest.raises(exceptions.BadRequest):
        compute("ZonesClient").get(project="Not_A_Project", zone=ZONE)
