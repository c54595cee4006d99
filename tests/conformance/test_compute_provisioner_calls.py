"""Compute methods that SkyPilot's and dstack's provisioners call around creating VMs, through
googleapiclient (as both tools drive Compute) and gcloud: networks.getEffectiveFirewalls,
subnetworks.listUsable, instances.setTags, firewalls.update and firewalls.patch."""

from __future__ import annotations

import json
import shutil

import pytest
from google.auth.credentials import AnonymousCredentials
from googleapiclient.discovery import build
from googleapiclient.errors import HttpError

PROJECT = "emulator-project"  # the project gcloud-env sets, so both clients see one world
ZONE = "us-central1-a"
needs_gcloud = pytest.mark.skipif(shutil.which("gcloud") is None, reason="gcloud is not installed")


@pytest.fixture
def compute(gcp):
    return build("compute", "v1", credentials=AnonymousCredentials(), static_discovery=True,
                 client_options={"api_endpoint": f"http://{gcp.address}/compute/v1/"})


def _wait_global(compute, op: dict) -> dict:
    return compute.globalOperations().wait(project=PROJECT, operation=op["name"]).execute()


def _error(call, status: int) -> dict:
    with pytest.raises(HttpError) as e:
        call.execute()
    assert e.value.resp.status == status, e.value.content
    return json.loads(e.value.content)["error"]


def _vm(compute, name: str, tags: list[str] | None = None) -> dict:
    body = {"name": name, "machineType": f"zones/{ZONE}/machineTypes/n1-standard-2",
            "disks": [{"boot": True, "initializeParams": {"sourceImage": "projects/debian-cloud/global/images/family/debian-12"}}],
            "networkInterfaces": [{"network": "global/networks/default"}]}
    if tags:
        body["tags"] = {"items": tags}
    compute.instances().insert(project=PROJECT, zone=ZONE, body=body).execute()
    return compute.instances().get(project=PROJECT, zone=ZONE, instance=name).execute()


def test_effective_firewalls_are_the_rules_of_that_network_only(compute):
    _wait_global(compute, compute.networks().insert(project=PROJECT, body={"name": "other", "autoCreateSubnetworks": True}).execute())
    compute.firewalls().insert(project=PROJECT, body={
        "name": "other-ssh", "network": "global/networks/other", "allowed": [{"IPProtocol": "tcp", "ports": ["22"]}],
        "sourceRanges": ["0.0.0.0/0"]}).execute()
    got = compute.networks().getEffectiveFirewalls(project=PROJECT, network="default").execute()
    # SkyPilot's check: is tcp:22 open from 0.0.0.0/0 on the network it launches into.
    assert {f["name"] for f in got["firewalls"]} == {"default-allow-internal", "default-allow-ssh",
                                                      "default-allow-rdp", "default-allow-icmp"}
    assert {"IPProtocol": "tcp", "ports": ["22"]} in next(f for f in got["firewalls"] if f["name"] == "default-allow-ssh")["allowed"]
    other = compute.networks().getEffectiveFirewalls(project=PROJECT, network="other").execute()
    assert [f["name"] for f in other["firewalls"]] == ["other-ssh"]
    err = _error(compute.networks().getEffectiveFirewalls(project=PROJECT, network="nope"), 404)
    assert err["errors"][0]["reason"] == "notFound"


def test_list_usable_subnetworks_spans_regions_and_shows_custom_ones(compute):
    _wait_global(compute, compute.networks().insert(project=PROJECT, body={"name": "gpu-net", "autoCreateSubnetworks": False}).execute())
    compute.subnetworks().insert(project=PROJECT, region="us-east4", body={
        "name": "gpu-sub", "network": "global/networks/gpu-net", "ipCidrRange": "10.10.0.0/16"}).execute()
    req = compute.subnetworks().listUsable(project=PROJECT)
    items = []
    while req is not None:  # pages as listUsable_next pages them (dstack walks every page)
        page = req.execute()
        assert page["kind"] == "compute#usableSubnetworksAggregatedList"
        items += page.get("items", [])
        req = compute.subnetworks().listUsable_next(req, page)
    mine = [i for i in items if i["subnetwork"].endswith("/regions/us-east4/subnetworks/gpu-sub")]
    assert len(mine) == 1 and mine[0]["network"].endswith("/global/networks/gpu-net")
    assert mine[0]["ipCidrRange"] == "10.10.0.0/16"
    # The default network's auto subnets: one per region.
    regions = {i["subnetwork"].split("/regions/")[1].split("/")[0] for i in items if i["network"].endswith("/default")}
    assert {"us-central1", "us-east4"} <= regions
    filtered = compute.subnetworks().listUsable(project=PROJECT, filter='network eq ".*/gpu-net$"').execute()
    assert [i["subnetwork"].rsplit("/", 1)[1] for i in filtered["items"]] == ["gpu-sub"]


def test_set_tags_needs_the_current_fingerprint_and_valid_names(compute):
    vm = _vm(compute, "tagged", tags=["a"])
    fp = vm["tags"]["fingerprint"]
    compute.instances().setTags(project=PROJECT, zone=ZONE, instance="tagged",
                                body={"items": ["a", "sky-ports"], "fingerprint": fp}).execute()
    now = compute.instances().get(project=PROJECT, zone=ZONE, instance="tagged").execute()["tags"]
    assert now["items"] == ["a", "sky-ports"] and now["fingerprint"] != fp
    # The old fingerprint (another writer's change happened in between) is refused.
    err = _error(compute.instances().setTags(project=PROJECT, zone=ZONE, instance="tagged",
                                             body={"items": ["b"], "fingerprint": fp}), 412)
    assert err["errors"][0]["reason"] == "conditionNotMet"
    err = _error(compute.instances().setTags(project=PROJECT, zone=ZONE, instance="tagged",
                                             body={"items": ["Bad_Tag"], "fingerprint": now["fingerprint"]}), 400)
    assert "'resource.items[0]': 'Bad_Tag'" in err["message"]
    assert compute.instances().get(project=PROJECT, zone=ZONE, instance="tagged").execute()["tags"]["items"] == ["a", "sky-ports"]


def test_firewall_update_replaces_the_rule_and_patch_merges(compute):
    compute.firewalls().insert(project=PROJECT, body={
        "name": "ports", "network": "global/networks/default", "priority": 900, "targetTags": ["t1"],
        "allowed": [{"IPProtocol": "tcp", "ports": ["8080"]}], "sourceRanges": ["10.0.0.0/8"]}).execute()
    before = compute.firewalls().get(project=PROJECT, firewall="ports").execute()
    # PUT: what the body leaves out goes back to its default (priority 1000, no target tags).
    op = compute.firewalls().update(project=PROJECT, firewall="ports", body={
        "name": "ports", "allowed": [{"IPProtocol": "tcp", "ports": ["8080", "8888"]}],
        "sourceRanges": ["0.0.0.0/0"]}).execute()
    assert op["operationType"] == "update"
    after = compute.firewalls().get(project=PROJECT, firewall="ports").execute()
    assert after["allowed"] == [{"IPProtocol": "tcp", "ports": ["8080", "8888"]}]
    assert after["priority"] == 1000 and "targetTags" not in after
    assert (after["id"], after["creationTimestamp"], after["network"]) == (
        before["id"], before["creationTimestamp"], before["network"])
    # PATCH: only what the body names changes.
    compute.firewalls().patch(project=PROJECT, firewall="ports", body={"targetTags": ["sky"]}).execute()
    patched = compute.firewalls().get(project=PROJECT, firewall="ports").execute()
    assert patched["targetTags"] == ["sky"] and patched["allowed"] == after["allowed"]
    err = _error(compute.firewalls().patch(project=PROJECT, firewall="ports", body={"direction": "EGRESS"}), 400)
    assert "resource.direction" in err["message"]
    err = _error(compute.firewalls().update(project=PROJECT, firewall="missing", body={
        "name": "missing", "allowed": [{"IPProtocol": "tcp"}]}), 404)
    assert err["errors"][0]["reason"] == "notFound"


@needs_gcloud
def test_gcloud_tags_firewall_updates_and_network_reads(gcloud, gcp, compute):
    def ok(cmd: str) -> str:
        rc, out, err = gcloud(cmd)
        assert rc == 0, err
        return out

    _vm(compute, "g1")
    ok(f"gcloud compute instances add-tags g1 --zone={ZONE} --tags=web,sky")
    ok(f"gcloud compute instances remove-tags g1 --zone={ZONE} --tags=web")
    got = json.loads(ok(f"gcloud compute instances describe g1 --zone={ZONE} --format=json"))
    assert got["tags"]["items"] == ["sky"]
    ok("gcloud compute firewall-rules create fw --network=default --allow=tcp:8080 --target-tags=sky")
    ok("gcloud compute firewall-rules update fw --allow=tcp:8080,tcp:9000")
    fw = json.loads(ok("gcloud compute firewall-rules describe fw --format=json"))
    assert fw["allowed"] == [{"IPProtocol": "tcp", "ports": ["8080"]}, {"IPProtocol": "tcp", "ports": ["9000"]}]
    assert fw["targetTags"] == ["sky"]
    eff = json.loads(ok("gcloud compute networks get-effective-firewalls default --format=json"))
    assert "fw" in {f["name"] for f in eff["firewalls"]}
    usable = json.loads(ok("gcloud compute networks subnets list-usable --format=json"))
    assert any(u["subnetwork"].endswith("/regions/us-central1/subnetworks/default") for u in usable)
