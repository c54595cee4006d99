"""Managed instance groups and resize requests through googleapiclient, the calls (and in the
shape) SkyPilot's DWS flex-start path makes them, and gcloud's `instance-groups managed`."""

from __future__ import annotations

import json
import re
import shutil

import pytest
from google.auth.credentials import AnonymousCredentials
from googleapiclient.discovery import build
from googleapiclient.errors import HttpError

PROJECT = "emulator-project"  # gcloud-env's project, so gcloud sees the same groups
ZONE, REGION = "us-central1-a", "us-central1"
MT = "n1-standard-4"
# The words SkyPilot 0.14.1 matches (sky/provision/gcp/mig_utils.py) to tell a missing group.
MIG_NOT_FOUND = re.compile(r"The resource 'projects/.*/zones/.*/instanceGroupManagers/.*' was not found")


def _client(gcp, version: str = "v1"):
    return build("compute", version, credentials=AnonymousCredentials(), static_discovery=True,
                 client_options={"api_endpoint": f"http://{gcp.address}/compute/{version}/"})


@pytest.fixture
def compute(gcp):
    return _client(gcp)


@pytest.fixture
def template(compute):
    """A regional template as SkyPilot makes one for DWS."""
    compute.regionInstanceTemplates().insert(project=PROJECT, region=REGION, body={
        "name": "sky-it-c1", "properties": {
            "machineType": MT, "labels": {"skypilot-cluster-name": "c1"},
            "reservationAffinity": {"consumeReservationType": "NO_RESERVATION"},
            "disks": [{"boot": True, "initializeParams": {"sourceImage": "projects/debian-cloud/global/images/family/debian-12"}}],
            "networkInterfaces": [{"network": "global/networks/default"}]}}).execute()
    return f"projects/{PROJECT}/regions/{REGION}/instanceTemplates/sky-it-c1"


def _mig(compute, name: str, template: str, **extra) -> None:
    # SkyPilot writes the proto name `target_size`; the front end takes it as targetSize.
    compute.instanceGroupManagers().insert(project=PROJECT, zone=ZONE, body={
        "name": name, "instanceTemplate": template, "target_size": 0,
        "instanceLifecyclePolicy": {"defaultActionOnFailure": "DO_NOTHING"},
        "updatePolicy": {"type": "OPPORTUNISTIC"}, **extra}).execute()


def _vms(compute) -> list[dict]:
    return compute.instances().list(project=PROJECT, zone=ZONE).execute().get("items", [])


def test_a_missing_group_is_a_404_in_the_words_skypilot_matches(compute, gcp):
    igm = compute.instanceGroupManagers()
    for call in (igm.get(project=PROJECT, zone=ZONE, instanceGroupManager="sky-mig-gone"),
                 igm.delete(project=PROJECT, zone=ZONE, instanceGroupManager="sky-mig-gone"),
                 _client(gcp, "beta").instanceGroupManagerResizeRequests().list(
                     project=PROJECT, zone=ZONE, instanceGroupManager="sky-mig-gone", filter="state eq ACCEPTED")):
        with pytest.raises(HttpError) as e:
            call.execute()
        assert e.value.resp.status == 404 and MIG_NOT_FOUND.search(str(e.value)), str(e.value)


def test_resize_makes_ordinary_vms_from_the_template_and_shrinks_them_away(compute, template):
    _mig(compute, "sky-mig-c1", template)
    got = compute.instanceGroupManagers().get(project=PROJECT, zone=ZONE, instanceGroupManager="sky-mig-c1").execute()
    assert got["targetSize"] == 0 and got["status"]["isStable"] and got["instanceTemplate"].endswith(template)
    compute.instanceGroupManagers().resize(project=PROJECT, zone=ZONE, instanceGroupManager="sky-mig-c1", size=2).execute()
    vms = _vms(compute)
    assert len(vms) == 2 and all(re.fullmatch(r"sky-mig-c1-[a-z0-9]{4}", v["name"]) for v in vms)
    assert all(v["status"] == "RUNNING" and v["labels"] == {"skypilot-cluster-name": "c1"} for v in vms)
    meta = {i["key"]: i["value"] for i in vms[0]["metadata"]["items"]}
    assert meta["created-by"] == f"projects/{PROJECT}/zones/{ZONE}/instanceGroupManagers/sky-mig-c1"
    managed = compute.instanceGroupManagers().listManagedInstances(
        project=PROJECT, zone=ZONE, instanceGroupManager="sky-mig-c1").execute()["managedInstances"]
    assert sorted(m["name"] for m in managed) == sorted(v["name"] for v in vms)
    assert {m["currentAction"] for m in managed} == {"NONE"}
    compute.instanceGroupManagers().resize(project=PROJECT, zone=ZONE, instanceGroupManager="sky-mig-c1", size=1).execute()
    assert len(_vms(compute)) == 1
    compute.instanceGroupManagers().delete(project=PROJECT, zone=ZONE, instanceGroupManager="sky-mig-c1").execute()
    assert _vms(compute) == []
    listed = compute.instanceGroupManagers().list(project=PROJECT, zone=ZONE).execute()
    assert "items" not in listed


def test_a_group_short_of_capacity_is_unstable_until_it_comes(compute, template, gcp):
    gcp.faults.set_capacity(ZONE, MT, 1)
    _mig(compute, "short", template)
    compute.instanceGroupManagers().resize(project=PROJECT, zone=ZONE, instanceGroupManager="short", size=3).execute()
    got = compute.instanceGroupManagers().get(project=PROJECT, zone=ZONE, instanceGroupManager="short").execute()
    assert len(_vms(compute)) == 1 and not got["status"]["isStable"] and got["currentActions"]["creating"] == 2
    gcp.faults.set_capacity(ZONE, MT, 10)
    got = compute.instanceGroupManagers().get(project=PROJECT, zone=ZONE, instanceGroupManager="short").execute()
    assert len(_vms(compute)) == 3 and got["status"]["isStable"]


def test_resize_requests_take_all_vms_or_none_and_end_with_their_run_duration(compute, template, gcp):
    beta = _client(gcp, "beta").instanceGroupManagerResizeRequests()  # SkyPilot sends them through beta
    _mig(compute, "dws", template)
    gcp.faults.set_capacity(ZONE, MT, 1)
    beta.insert(project=PROJECT, zone=ZONE, instanceGroupManager="dws",
                body={"name": "dws", "resizeBy": 2, "requestedRunDuration": {"seconds": 600}}).execute()
    accepted = beta.list(project=PROJECT, zone=ZONE, instanceGroupManager="dws", filter="state eq ACCEPTED").execute()
    assert [r["name"] for r in accepted["items"]] == ["dws"] and _vms(compute) == []
    gcp.faults.set_capacity(ZONE, MT, 2)
    done = beta.get(project=PROJECT, zone=ZONE, instanceGroupManager="dws", resizeRequest="dws").execute()
    assert done["state"] == "SUCCEEDED"
    vms = _vms(compute)
    assert len(vms) == 2 and all(v["scheduling"]["maxRunDuration"]["seconds"] == "600" for v in vms)
    assert compute.instanceGroupManagers().get(project=PROJECT, zone=ZONE, instanceGroupManager="dws").execute()["targetSize"] == 2
    with pytest.raises(HttpError) as e:  # only an ACCEPTED request can be cancelled
        beta.cancel(project=PROJECT, zone=ZONE, instanceGroupManager="dws", resizeRequest="dws").execute()
    assert e.value.resp.status == 400
    # The run ends: the VMs go and the group's target falls back.
    gcp.clock.advance(601)
    gcp.fault_clock.tick()
    gcp.clock.advance(120)
    got = compute.instanceGroupManagers().get(project=PROJECT, zone=ZONE, instanceGroupManager="dws").execute()
    assert _vms(compute) == [] and got["targetSize"] == 0
    # A request that waits can be cancelled, then deleted.
    gcp.faults.set_capacity(ZONE, MT, 0)
    beta.insert(project=PROJECT, zone=ZONE, instanceGroupManager="dws", body={"name": "wait", "resizeBy": 1}).execute()
    beta.cancel(project=PROJECT, zone=ZONE, instanceGroupManager="dws", resizeRequest="wait").execute()
    assert beta.get(project=PROJECT, zone=ZONE, instanceGroupManager="dws", resizeRequest="wait").execute()["state"] == "CANCELLED"
    beta.delete(project=PROJECT, zone=ZONE, instanceGroupManager="dws", resizeRequest="wait").execute()


def test_regional_group_places_vms_in_its_distribution_zones(compute, template, gcp):
    gcp.faults.set_capacity("us-central1-b", MT, 0)
    compute.regionInstanceGroupManagers().insert(project=PROJECT, region=REGION, body={
        "name": "rmig", "instanceTemplate": template, "targetSize": 2,
        "distributionPolicy": {"zones": [{"zone": "zones/us-central1-b"}, {"zone": "zones/us-central1-c"}]}}).execute()
    got = compute.regionInstanceGroupManagers().get(project=PROJECT, region=REGION, instanceGroupManager="rmig").execute()
    assert got["status"]["isStable"] and got["region"].endswith(f"/regions/{REGION}")
    managed = compute.regionInstanceGroupManagers().listManagedInstances(
        project=PROJECT, region=REGION, instanceGroupManager="rmig").execute()["managedInstances"]
    assert [m["instance"].split("/zones/")[1].split("/")[0] for m in managed] == ["us-central1-c"] * 2
    compute.regionInstanceGroupManagers().delete(project=PROJECT, region=REGION, instanceGroupManager="rmig").execute()


@pytest.mark.skipif(shutil.which("gcloud") is None, reason="gcloud is not installed")
def test_gcloud_waits_until_stable_and_lists_the_groups_vms(gcloud, compute, template):
    _mig(compute, "gmig", template)
    compute.instanceGroupManagers().resize(project=PROJECT, zone=ZONE, instanceGroupManager="gmig", size=2).execute()
    # SkyPilot's own wait: `gcloud compute instance-groups managed wait-until NAME --stable`.
    rc, out, err = gcloud(f"gcloud compute instance-groups managed wait-until gmig --stable --zone={ZONE} --timeout=60")
    assert rc == 0, err
    rc, out, err = gcloud(f"gcloud compute instance-groups managed list-instances gmig --zone={ZONE} --format=json")
    assert rc == 0, err
    assert len(json.loads(out)) == 2
    rc, out, err = gcloud(f"gcloud compute instance-groups managed describe gmig --zone={ZONE} --format=json")
    assert rc == 0, err
    assert json.loads(out)["targetSize"] == 2
