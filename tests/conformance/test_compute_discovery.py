"""Compute Engine through googleapiclient's discovery client, the way Ray's and SkyPilot's GCP code drives it.

Bodies here are plain dicts, so a misspelled field reaches the server: the emulator must refuse it
as Google's front end does (400 INVALID_ARGUMENT, "Invalid JSON payload received. Unknown name ...",
a google.rpc.BadRequest field violation), not drop it.
"""

from __future__ import annotations

import json

import pytest
from google.auth.credentials import AnonymousCredentials
from googleapiclient.discovery import build
from googleapiclient.errors import HttpError

PROJECT = "discovery-project"
ZONE = "us-central1-a"
DISK = {"boot": True, "autoDelete": True,
        "initializeParams": {"sourceImage": "projects/ubuntu-os-cloud/global/images/family/ubuntu-2204-lts"}}


@pytest.fixture
def compute(gcp):
    return build("compute", "v1", credentials=AnonymousCredentials(), static_discovery=True,
                 client_options={"api_endpoint": f"http://{gcp.address}/compute/v1/"})


def _vm(name: str, **extra) -> dict:
    return {"name": name, "machineType": f"zones/{ZONE}/machineTypes/n1-standard-2", "disks": [DISK],
            "networkInterfaces": [{"network": "global/networks/default"}], **extra}


def _error(call) -> dict:
    with pytest.raises(HttpError) as e:
        call.execute()
    assert e.value.resp.status == 400
    return json.loads(e.value.content)["error"]


def test_insert_wait_list_by_label_and_delete(compute):
    # SkyPilot's pattern: insert, then zoneOperations.wait on the returned operation.
    op = compute.instances().insert(project=PROJECT, zone=ZONE, body=_vm("head", labels={"ray-cluster-name": "c1"})).execute()
    done = compute.zoneOperations().wait(project=PROJECT, zone=ZONE, operation=op["name"]).execute()
    assert done["status"] == "DONE" and "error" not in done
    # Ray's pattern: list by a label filter.
    got = compute.instances().list(project=PROJECT, zone=ZONE, filter="(labels.ray-cluster-name = c1)").execute()
    assert [i["name"] for i in got["items"]] == ["head"] and got["items"][0]["status"] == "RUNNING"
    compute.instances().delete(project=PROJECT, zone=ZONE, instance="head").execute()
    assert "items" not in compute.instances().list(project=PROJECT, zone=ZONE).execute()


def test_unknown_top_level_field_is_refused_not_dropped(compute, gcp):
    err = _error(compute.instances().insert(project=PROJECT, zone=ZONE, body=_vm("typo", machinetype="x")))
    want = 'Invalid JSON payload received. Unknown name "machinetype" at \'instance_resource\': Cannot find field.'
    assert (err["message"], err["status"]) == (want, "INVALID_ARGUMENT")
    (detail,) = err["details"]
    assert detail["@type"] == "type.googleapis.com/google.rpc.BadRequest"
    assert detail["fieldViolations"] == [{"field": "instance_resource", "description": want}]
    assert gcp.compute.list(PROJECT, f"zones/{ZONE}/instances") == []


def test_nested_and_repeated_paths_name_every_unknown_field(compute):
    body = _vm("typo", scheduling={"provisioningModle": "SPOT"},
               networkInterfaces=[{"network": "global/networks/default", "acessConfigs": []}])
    err = _error(compute.instances().insert(project=PROJECT, zone=ZONE, body=body))
    assert err["message"].splitlines() == [  # one line per unknown field, in the body's order
        'Invalid JSON payload received. Unknown name "acessConfigs" at \'instance_resource.network_interfaces[0]\': '
        "Cannot find field.",
        'Invalid JSON payload received. Unknown name "provisioningModle" at \'instance_resource.scheduling\': Cannot find field.',
    ]


def test_wrong_shapes_are_refused(compute):
    err = _error(compute.instances().insert(project=PROJECT, zone=ZONE, body=_vm("bad", scheduling=[{}])))
    assert err["message"] == ('Invalid JSON payload received. Unknown name "scheduling" at \'instance_resource\': '
                              "Proto field is not repeating, cannot start list.")
    err = _error(compute.instances().insert(project=PROJECT, zone=ZONE, body=_vm("bad", canIpForward="yes")))
    assert err["message"] == "Invalid value at 'instance_resource.can_ip_forward' (TYPE_BOOL), \"yes\""
    bulk = {"count": "two", "namePattern": "b-#", "instanceProperties": {"machineType": "e2-standard-4"}}
    err = _error(compute.instances().bulkInsert(project=PROJECT, zone=ZONE, body=bulk))
    assert err["message"] == "Invalid value at 'bulk_insert_instance_resource_resource.count' (TYPE_INT64), \"two\""


def test_templates_cannot_carry_deletion_protection(compute):
    # "Deletion prevention cannot be specified in instance templates" (Compute docs): InstanceProperties has no such field.
    body = {"name": "tpl", "properties": {"machineType": "e2-standard-4", "deletionProtection": True}}
    err = _error(compute.instanceTemplates().insert(project=PROJECT, body=body))
    assert err["message"] == ('Invalid JSON payload received. Unknown name "deletionProtection" at '
                              "'instance_template_resource.properties': Cannot find field.")


def test_bulk_insert_from_a_template_groups_one_insert_per_vm(compute):
    tpl = {"name": "tpl", "properties": {"machineType": "e2-standard-4", "disks": [DISK],
                                         "networkInterfaces": [{"network": "global/networks/default"}]}}
    compute.instanceTemplates().insert(project=PROJECT, body=tpl).execute()
    body = {"count": "3", "namePattern": "w-##", "instanceProperties": {},
            "sourceInstanceTemplate": f"projects/{PROJECT}/global/instanceTemplates/tpl"}
    op = compute.instances().bulkInsert(project=PROJECT, zone=ZONE, body=body).execute()
    assert op["operationType"] == "bulkInsert" and op["operationGroupId"]
    meta = op["instancesBulkInsertOperationMetadata"]["perLocationStatus"][f"zones/{ZONE}"]
    assert (meta["createdVmCount"], meta["targetVmCount"]) == (3, 3)
    group = compute.zoneOperations().list(project=PROJECT, zone=ZONE,
                                          filter=f"operationGroupId={op['operationGroupId']}").execute()["items"]
    assert sorted(o["operationType"] for o in group) == ["bulkInsert", "insert", "insert", "insert"]
    assert sorted(o["targetLink"].rsplit("/", 1)[1] for o in group if o["operationType"] == "insert") == [
        "w-01", "w-02", "w-03"]


def test_deletion_protection_through_set_deletion_protection(compute):
    compute.instances().insert(project=PROJECT, zone=ZONE, body=_vm("keep", deletionProtection=True)).execute()
    with pytest.raises(HttpError) as e:
        compute.instances().delete(project=PROJECT, zone=ZONE, instance="keep").execute()
    assert e.value.resp.status == 400 and e.value.reason.startswith("Invalid resource usage")
    assert json.loads(e.value.content)["error"]["errors"][0]["reason"] == "invalidResourceUsage"
    compute.instances().setDeletionProtection(project=PROJECT, zone=ZONE, resource="keep",
                                              deletionProtection=False).execute()
    assert compute.instances().get(project=PROJECT, zone=ZONE, instance="keep").execute()["deletionProtection"] is False
    compute.instances().delete(project=PROJECT, zone=ZONE, instance="keep").execute()


def test_catalog_answers_ordinary_types_and_image_families(compute):
    mt = compute.machineTypes().get(project=PROJECT, zone=ZONE, machineType="n2-highmem-16").execute()
    assert (mt["guestCpus"], mt["memoryMb"]) == (16, 131072)
    img = compute.images().getFromFamily(project="rocky-linux-cloud", family="rocky-linux-9").execute()
    assert img["family"] == "rocky-linux-9"
    with pytest.raises(HttpError) as e:
        compute.images().getFromFamily(project="rocky-linux-cloud", family="rocky-linux-nine").execute()
    assert e.value.resp.status == 404
    names, request = [], compute.machineTypes().list(project=PROJECT, zone=ZONE, maxResults=50)
    while request is not None:  # googleapiclient's own paging
        page = request.execute()
        names += [m["name"] for m in page.get("items", [])]
        request = compute.machineTypes().list_next(request, page)
    assert {"n1-standard-2", "e2-standard-4", "c2-standard-60", "a2-highgpu-1g"} <= set(names)
    assert len(names) == len(set(names)) > 100


def test_a_real_method_the_emulator_lacks_says_so_and_a_made_up_path_is_404(compute, gcp):
    compute.instances().insert(project=PROJECT, zone=ZONE, body=_vm("vm")).execute()
    with pytest.raises(HttpError) as e:
        compute.instances().setMachineType(project=PROJECT, zone=ZONE, instance="vm",
                                           body={"machineType": f"zones/{ZONE}/machineTypes/e2-standard-8"}).execute()
    assert e.value.resp.status == 501
    assert json.loads(e.value.content)["error"]["message"] == (
        "Method compute.instances.setMachineType is not implemented by the gcpgpu emulator.")
    import urllib.error
    import urllib.request

    with pytest.raises(urllib.error.HTTPError) as missing:
        urllib.request.urlopen(f"http://{gcp.address}/compute/v1/projects/{PROJECT}/zones/{ZONE}/gadgets")
    assert missing.value.code == 404


def test_set_labels_needs_the_current_fingerprint_as_ray_sends_it(compute):
    compute.instances().insert(project=PROJECT, zone=ZONE, body=_vm("node", labels={"ray-node-type": "head"})).execute()
    node = compute.instances().get(project=PROJECT, zone=ZONE, instance="node").execute()
    body = {"labels": {**node["labels"], "ray-node-status": "up-to-date"}, "labelFingerprint": node["labelFingerprint"]}
    compute.instances().setLabels(project=PROJECT, zone=ZONE, instance="node", body=body).execute()
    with pytest.raises(HttpError) as stale:  # the same fingerprint again: the labels changed since
        compute.instances().setLabels(project=PROJECT, zone=ZONE, instance="node", body=body).execute()
    assert stale.value.resp.status == 412
    err = _error(compute.instances().setLabels(project=PROJECT, zone=ZONE, instance="node",
                                               body={"labels": {}, "fingerprint": "x"}))
    assert err["message"] == ('Invalid JSON payload received. Unknown name "fingerprint" at '
                              "'instances_set_labels_request_resource': Cannot find field.")
