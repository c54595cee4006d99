"""Issue 12/14's cluster features through googleapiclient's discovery client, checked against the
static Compute v1 discovery document that library ships (not against gcpgpu's beliefs).

Every answer is walked against the document's schemas: each field the emulator returns must be a
property of its schema with the schema's JSON type (int64 as a string, as Google's JSON mapping has
it), and each enum value must be one the document lists.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import googleapiclient
import pytest
from google.auth.credentials import AnonymousCredentials
from googleapiclient.discovery import build
from googleapiclient.errors import HttpError

PROJECT = "fabric-project"
ZONE = "us-central1-b"
IMAGE = "projects/debian-cloud/global/images/family/debian-12"


@cache
def _schemas() -> dict:
    doc = Path(googleapiclient.__file__).parent / "discovery_cache" / "documents" / "compute.v1.json"
    return json.loads(doc.read_text())["schemas"]


def conform(value, schema: dict, where: str = "$") -> None:
    """Assert `value` fits the discovery `schema` (names, JSON types, enums), recursively."""
    if "$ref" in schema:
        schema = _schemas()[schema["$ref"]]
    kind = schema.get("type")
    if kind == "object":
        assert isinstance(value, dict), f"{where}: {value!r} is not an object"
        props, extra = schema.get("properties", {}), schema.get("additionalProperties")
        for key, sub in value.items():
            assert key in props or extra, f"{where}.{key}: no such field in the discovery schema"
            conform(sub, props.get(key) or extra, f"{where}.{key}")
    elif kind == "array":
        assert isinstance(value, list), f"{where}: {value!r} is not an array"
        for i, item in enumerate(value):
            conform(item, schema["items"], f"{where}[{i}]")
    elif kind == "string":
        assert isinstance(value, str), f"{where}: {value!r} is not a string ({schema.get('format')})"
        if "enum" in schema:
            assert value in schema["enum"], f"{where}: {value!r} not in {schema['enum']}"
    elif kind == "integer":
        assert isinstance(value, int) and not isinstance(value, bool), f"{where}: {value!r} is not an integer"
    elif kind == "boolean":
        assert isinstance(value, bool), f"{where}: {value!r} is not a boolean"
    elif kind == "number":
        assert isinstance(value, (int, float)), f"{where}: {value!r} is not a number"


def _conform(value: dict, name: str) -> dict:
    conform(value, {"$ref": name})
    return value


@pytest.fixture
def compute(gcp):
    return build("compute", "v1", credentials=AnonymousCredentials(), static_discovery=True,
                 client_options={"api_endpoint": f"http://{gcp.address}/compute/v1/"})


def _wait(compute, op: dict) -> dict:
    scope = {"zone": op["zone"].rsplit("/", 1)[1]} if "zone" in op else (
        {"region": op["region"].rsplit("/", 1)[1]} if "region" in op else {})
    api = compute.zoneOperations() if "zone" in scope else (
        compute.regionOperations() if "region" in scope else compute.globalOperations())
    done = api.wait(project=PROJECT, operation=op["name"], **scope).execute()
    return _conform(done, "Operation")


def _vm(name: str, machine_type: str, disk_type: str, nics: list[dict], **extra) -> dict:
    return {"name": name, "machineType": f"zones/{ZONE}/machineTypes/{machine_type}",
            "disks": [{"boot": True, "autoDelete": True,
                       "initializeParams": {"sourceImage": IMAGE, "diskType": f"zones/{ZONE}/diskTypes/{disk_type}"}}],
            "networkInterfaces": nics, "scheduling": {"onHostMaintenance": "TERMINATE"}, **extra}


def test_router_with_cloud_nat_round_trips_in_the_documents_shape(compute):
    region = ZONE[:-2]
    _wait(compute, compute.networks().insert(project=PROJECT, body={
        "name": "vpc", "autoCreateSubnetworks": False}).execute())
    _wait(compute, compute.subnetworks().insert(project=PROJECT, region=region, body={
        "name": "sub", "network": "global/networks/vpc", "ipCidrRange": "10.8.0.0/20",
        "privateIpGoogleAccess": True}).execute())
    sub = _conform(compute.subnetworks().get(project=PROJECT, region=region, subnetwork="sub").execute(), "Subnetwork")
    assert sub["privateIpGoogleAccess"] is True
    nat = {"name": "nat", "natIpAllocateOption": "AUTO_ONLY",
           "sourceSubnetworkIpRangesToNat": "ALL_SUBNETWORKS_ALL_IP_RANGES"}
    _wait(compute, compute.routers().insert(project=PROJECT, region=region, body={
        "name": "rtr", "network": "global/networks/vpc", "nats": [nat]}).execute())
    got = _conform(compute.routers().get(project=PROJECT, region=region, router="rtr").execute(), "Router")
    assert got["network"].endswith("/global/networks/vpc") and got["region"].endswith(f"/regions/{region}")
    assert [n["name"] for n in got["nats"]] == ["nat"]
    assert {k: got["nats"][0][k] for k in nat} == nat
    listed = _conform(compute.routers().list(project=PROJECT, region=region).execute(), "RouterList")
    assert [r["name"] for r in listed["items"]] == ["rtr"]
    agg = _conform(compute.routers().aggregatedList(project=PROJECT).execute(), "RouterAggregatedList")
    assert [r["name"] for r in agg["items"][f"regions/{region}"]["routers"]] == ["rtr"]
    # routers.patch, as `gcloud compute routers nats create` sends it: the whole nats list replaced.
    second = {**nat, "name": "nat2", "sourceSubnetworkIpRangesToNat": "LIST_OF_SUBNETWORKS"}
    with pytest.raises(HttpError) as e:  # a NAT over all subnetworks must stay the network's only one
        compute.routers().patch(project=PROJECT, region=region, router="rtr",
                                body={"nats": [nat, second]}).execute()
    assert e.value.resp.status == 400
    _wait(compute, compute.routers().patch(project=PROJECT, region=region, router="rtr",
                                           body={"nats": [second]}).execute())
    got = _conform(compute.routers().get(project=PROJECT, region=region, router="rtr").execute(), "Router")
    assert [n["name"] for n in got["nats"]] == ["nat2"] and got["network"].endswith("/global/networks/vpc")
    _wait(compute, compute.routers().delete(project=PROJECT, region=region, router="rtr").execute())
    with pytest.raises(HttpError) as e:
        compute.routers().get(project=PROJECT, region=region, router="rtr").execute()
    assert e.value.resp.status == 404


def test_mrdma_nics_on_a_roce_network_for_a3_ultra(compute):
    profile = f"projects/{PROJECT}/global/networkProfiles/{ZONE}-vpc-roce"
    _wait(compute, compute.networks().insert(project=PROJECT, body={
        "name": "rdma", "autoCreateSubnetworks": False, "networkProfile": profile, "mtu": 8896}).execute())
    net = _conform(compute.networks().get(project=PROJECT, network="rdma").execute(), "Network")
    assert net["networkProfile"].endswith(f"/global/networkProfiles/{ZONE}-vpc-roce")
    region = ZONE[:-2]
    for i in range(8):
        _wait(compute, compute.subnetworks().insert(project=PROJECT, region=region, body={
            "name": f"rdma-{i}", "network": "global/networks/rdma", "ipCidrRange": f"10.{100 + i}.0.0/20"}).execute())
    gvnic = [{"network": "global/networks/default", "nicType": "GVNIC"}] * 2
    mrdma = [{"network": "global/networks/rdma", "subnetwork": f"regions/{region}/subnetworks/rdma-{i}",
              "nicType": "MRDMA"} for i in range(8)]
    _wait(compute, compute.instances().insert(project=PROJECT, zone=ZONE, body=_vm(
        "ultra", "a3-ultragpu-8g", "hyperdisk-balanced", gvnic + mrdma)).execute())
    inst = _conform(compute.instances().get(project=PROJECT, zone=ZONE, instance="ultra").execute(), "Instance")
    assert [n["nicType"] for n in inst["networkInterfaces"]] == ["GVNIC"] * 2 + ["MRDMA"] * 8


def test_persistent_disk_boot_on_a3_ultra_is_refused(compute, gcp):
    with pytest.raises(HttpError) as e:
        compute.instances().insert(project=PROJECT, zone=ZONE, body=_vm(
            "pd", "a3-ultragpu-8g", "pd-balanced", [{"network": "global/networks/default"}])).execute()
    assert e.value.resp.status == 400
    assert "[pd-balanced, a3-ultragpu-8g] features are not compatible for creating instance." in str(e.value)
    assert gcp.compute.list(PROJECT, f"zones/{ZONE}/instances") == []


def test_flex_start_insert_waits_pending_then_runs_in_the_documents_shape(compute, gcp):
    gcp.faults.set_capacity(ZONE, "a3-highgpu-8g", 0)
    body = _vm("flex", "a3-highgpu-8g", "pd-ssd", [{"network": "global/networks/default"}],
               params={"requestValidForDuration": {"seconds": "7200"}},
               reservationAffinity={"consumeReservationType": "NO_RESERVATION"})
    body["scheduling"] = {"onHostMaintenance": "TERMINATE", "provisioningModel": "FLEX_START",
                          "instanceTerminationAction": "DELETE", "maxRunDuration": {"seconds": "14400"}}
    compute.instances().insert(project=PROJECT, zone=ZONE, body=body).execute()
    pending = _conform(compute.instances().get(project=PROJECT, zone=ZONE, instance="flex").execute(), "Instance")
    assert pending["status"] == "PENDING"
    assert pending["scheduling"]["provisioningModel"] == "FLEX_START"
    assert pending["scheduling"]["maxRunDuration"] == {"seconds": "14400"}
    assert "params" not in pending  # input-only: InstanceParams is not echoed on get
    gcp.faults.set_capacity(ZONE, "a3-highgpu-8g", 1)
    import time

    deadline = time.monotonic() + 30
    while (got := compute.instances().get(project=PROJECT, zone=ZONE, instance="flex").execute())["status"] != "RUNNING":
        assert time.monotonic() < deadline, got["status"]
        time.sleep(0.1)
    _conform(got, "Instance")
    assert got["scheduling"]["instanceTerminationAction"] == "DELETE"


def test_compact_placement_without_vm_count_and_a3_mega_topology(compute):
    region = ZONE[:-2]
    _wait(compute, compute.resourcePolicies().insert(project=PROJECT, region=region, body={
        "name": "compact", "groupPlacementPolicy": {"collocation": "COLLOCATED"}}).execute())
    policy = _conform(compute.resourcePolicies().get(project=PROJECT, region=region, resourcePolicy="compact")
                      .execute(), "ResourcePolicy")
    assert "vmCount" not in policy["groupPlacementPolicy"]
    for name in ("m-1", "m-2"):
        _wait(compute, compute.instances().insert(project=PROJECT, zone=ZONE, body=_vm(
            name, "a3-megagpu-8g", "pd-ssd", [{"network": "global/networks/default"}],
            resourcePolicies=[f"regions/{region}/resourcePolicies/compact"])).execute())
    got = _conform(compute.instances().list(project=PROJECT, zone=ZONE).execute(), "InstanceList")
    tops = [i["resourceStatus"]["physicalHostTopology"] for i in got["items"]]
    assert len(tops) == 2 and tops[0]["block"] == tops[1]["block"] and tops[0]["host"] != tops[1]["host"]


def test_the_schema_walk_refuses_what_the_document_does_not_have():
    with pytest.raises(AssertionError, match="nicKind: no such field"):
        conform({"networkInterfaces": [{"nicKind": "MRDMA"}]}, {"$ref": "Instance"})
    with pytest.raises(AssertionError, match="not in"):
        conform({"scheduling": {"provisioningModel": "FLEX"}}, {"$ref": "Instance"})
    with pytest.raises(AssertionError, match="is not a string"):
        conform({"maxRunDuration": {"seconds": 60}}, {"$ref": "Scheduling"})  # int64 travels as a string


def test_an_enum_value_the_document_lacks_is_refused_at_the_front_end(compute, gcp):
    body = _vm("typo", "a3-highgpu-8g", "pd-ssd", [{"network": "global/networks/default", "nicType": "RDMA"}])
    with pytest.raises(HttpError) as e:
        compute.instances().insert(project=PROJECT, zone=ZONE, body=body).execute()
    assert e.value.resp.status == 400
    assert "Invalid value at 'instance_resource.network_interfaces[0].nic_type' (TYPE_ENUM), \"RDMA\"" in str(e.value)
    assert gcp.compute.list(PROJECT, f"zones/{ZONE}/instances") == []
