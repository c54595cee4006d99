"""What SkyPilot and dstack pick by default, through googleapiclient: N1 VMs with attached GPUs
(T4, V100, P100, P4) where Google's GPU table offers them, nicType spelled as SkyPilot spells it,
and their own public images."""

from __future__ import annotations

import json

import pytest
from google.auth.credentials import AnonymousCredentials
from googleapiclient.discovery import build
from googleapiclient.errors import HttpError

PROJECT = "n1-gpu-project"


@pytest.fixture
def compute(gcp):
    return build("compute", "v1", credentials=AnonymousCredentials(), static_discovery=True,
                 client_options={"api_endpoint": f"http://{gcp.address}/compute/v1/"})


def _body(name: str, zone: str, machine: str, gpu: tuple[str, int] | None = None,
          image: str = "projects/debian-cloud/global/images/family/debian-12", **nic) -> dict:
    body = {"name": name, "machineType": f"zones/{zone}/machineTypes/{machine}",
            "disks": [{"boot": True, "initializeParams": {"sourceImage": image}}],
            "networkInterfaces": [{"network": "global/networks/default", **nic}],
            "scheduling": {"onHostMaintenance": "TERMINATE"}}
    if gpu:
        body["guestAccelerators"] = [{"acceleratorType": f"zones/{zone}/acceleratorTypes/{gpu[0]}",
                                      "acceleratorCount": gpu[1]}]
    return body


def _refused(compute, body: dict, zone: str) -> dict:
    with pytest.raises(HttpError) as e:
        compute.instances().insert(project=PROJECT, zone=zone, body=body).execute()
    assert e.value.resp.status == 400, e.value.content
    return json.loads(e.value.content)["error"]


def test_each_zone_lists_the_n1_gpus_googles_table_gives_it(compute):
    def gpus(zone: str) -> set[str]:
        items = compute.acceleratorTypes().list(project=PROJECT, zone=zone).execute().get("items", [])
        return {a["name"] for a in items if a["name"].startswith("nvidia-tesla-") and a["name"] != "nvidia-tesla-a100"}

    assert gpus("us-central1-a") == {"nvidia-tesla-t4", "nvidia-tesla-v100", "nvidia-tesla-p4"}
    assert gpus("us-central1-c") == {"nvidia-tesla-t4", "nvidia-tesla-v100", "nvidia-tesla-p4", "nvidia-tesla-p100"}
    assert gpus("us-east5-a") == set()
    t4 = compute.acceleratorTypes().get(project=PROJECT, zone="us-central1-a", acceleratorType="nvidia-tesla-t4").execute()
    assert t4["maximumCardsPerInstance"] == 4


def test_an_n1_vm_takes_a_gpu_its_zone_offers_and_counts_its_quota(compute):
    zone = "us-central1-a"
    compute.instances().insert(project=PROJECT, zone=zone,
                               body=_body("t4", zone, "n1-highmem-8", ("nvidia-tesla-t4", 1))).execute()
    got = compute.instances().get(project=PROJECT, zone=zone, instance="t4").execute()
    assert got["status"] == "RUNNING"
    assert got["guestAccelerators"][0]["acceleratorType"].endswith("/zones/us-central1-a/acceleratorTypes/nvidia-tesla-t4")
    quotas = {q["metric"]: q["usage"] for q in compute.regions().get(project=PROJECT, region="us-central1").execute()["quotas"]}
    assert quotas["NVIDIA_T4_GPUS"] == 1
    compute.instances().insert(project=PROJECT, zone=zone,
                               body=_body("v100x8", zone, "n1-highmem-96", ("nvidia-tesla-v100", 8))).execute()


def test_a_gpu_the_zone_lacks_or_the_machine_cannot_take_is_refused_as_compute_refuses_it(compute):
    zone = "us-central1-a"
    err = _refused(compute, _body("p100", zone, "n1-standard-8", ("nvidia-tesla-p100", 1)), zone)
    assert err["message"] == f"The resource 'projects/{PROJECT}/zones/{zone}/acceleratorTypes/nvidia-tesla-p100' was not found"
    err = _refused(compute, _body("n2", zone, "n2-standard-8", ("nvidia-tesla-t4", 1)), zone)
    assert err["message"] == "[nvidia-tesla-t4, n2-standard-8] features are not compatible for creating instance."
    # One V100 allows at most 12 vCPUs on its N1 host.
    err = _refused(compute, _body("big", zone, "n1-standard-16", ("nvidia-tesla-v100", 1)), zone)
    assert err["message"] == "[nvidia-tesla-v100, n1-standard-16] features are not compatible for creating instance."
    err = _refused(compute, _body("three", zone, "n1-standard-8", ("nvidia-tesla-t4", 3)), zone)
    assert "guestAccelerators[0].acceleratorCount" in err["message"]
    assert "items" not in compute.instances().list(project=PROJECT, zone=zone).execute()


def test_nic_type_takes_skypilots_spelling_and_stores_googles(compute):
    zone = "us-central1-a"
    compute.instances().insert(project=PROJECT, zone=zone, body=_body("gv", zone, "n1-standard-4", nicType="gVNIC")).execute()
    got = compute.instances().get(project=PROJECT, zone=zone, instance="gv").execute()
    assert got["networkInterfaces"][0]["nicType"] == "GVNIC"
    err = _refused(compute, _body("bad", zone, "n1-standard-4", nicType="gvnics"), zone)
    assert "TYPE_ENUM" in err["message"]


@pytest.mark.parametrize("image", [
    "projects/sky-dev-465/global/images/skypilot-gcp-gpu-ubuntu-241030",   # SkyPilot's GPU image
    "projects/dstack/global/images/dstack-cuda-0-14",                      # dstack's
    "projects/cos-cloud/global/images/cos-109-17800-519-1",                # SkyPilot's GPU Direct image
    "projects/ubuntu-os-cloud/global/images/ubuntu-2204-jammy-v20230714",  # dstack's gateway image
])
def test_third_party_public_images_boot(compute, image):
    zone = "us-central1-a"
    compute.instances().insert(project=PROJECT, zone=zone, body=_body("img", zone, "n1-standard-4", image=image)).execute()
    project, name = image.split("/")[1], image.rsplit("/", 1)[1]
    assert compute.images().get(project=project, image=name).execute()["name"] == name


@pytest.mark.parametrize("project,name", [
    (PROJECT, "skypilot-gcp-gpu-ubuntu-241030"),  # the user's own project holds no such image
    ("sky-dev-465", "skypilot-gcp-gpu-ubunt-241030"),  # a typo in a public project
    ("dstack", "dstack-cuda-latest"),
])
def test_names_outside_the_public_rules_are_not_found(compute, project, name):
    with pytest.raises(HttpError) as e:
        compute.images().get(project=project, image=name).execute()
    assert e.value.resp.status == 404
