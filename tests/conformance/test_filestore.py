"""Google's Filestore client (filestore_v1, REST transport) and `gcloud filestore instances`, unchanged, against
the emulator's file.googleapis.com v1 (served under /filestore/: the endpoint a client or gcloud is given).

What each assertion shows is what Google's API reference documents: a create is a long-running operation,
the instance is CREATING until it is done and READY after, with its address in networks[0].ipAddresses;
delete is an operation too, and the instance is gone after it. Tier ranges are checked before anything is made.
"""

from __future__ import annotations

import json
import shutil

import pytest

PROJECT = "emulator-project"
ZONE = "us-central1-a"
PARENT = f"projects/{PROJECT}/locations/{ZONE}"


@pytest.fixture
def filestore(gcp):
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import filestore_v1

    return filestore_v1.CloudFilestoreManagerClient(
        credentials=AnonymousCredentials(), transport="rest",
        client_options={"api_endpoint": f"http://{gcp.address}/filestore"})


def _instance(tier: str = "ZONAL", gb: int = 1024, share: str = "shared", network: str = "default"):
    from google.cloud import filestore_v1

    return filestore_v1.Instance(
        tier=filestore_v1.Instance.Tier[tier],
        file_shares=[filestore_v1.FileShareConfig(name=share, capacity_gb=gb)],
        networks=[filestore_v1.NetworkConfig(network=network)])


def test_create_is_an_operation_creating_then_ready_with_its_address(filestore, gcp):
    from google.cloud import filestore_v1

    gcp.clock.freeze()
    gcp.faults.operation_seconds = 120.0
    op = filestore.create_instance(parent=PARENT, instance_id="fs1", instance=_instance())
    assert not op.done()
    got = filestore.get_instance(name=f"{PARENT}/instances/fs1")
    assert got.state == filestore_v1.Instance.State.CREATING and not got.networks[0].ip_addresses
    assert gcp.filestore.folder_path(got.name).is_dir()  # the share's folder exists from the create on
    gcp.clock.advance(120)
    ready = op.result(timeout=30)
    assert ready.state == filestore_v1.Instance.State.READY
    assert ready.networks[0].ip_addresses and ready.networks[0].network == "default"
    assert (ready.file_shares[0].name, ready.file_shares[0].capacity_gb) == ("shared", 1024)
    assert gcp.filestore.export(ready.name) == f"{ready.networks[0].ip_addresses[0]}:/shared"
    # Listed in its zone and across every location ("-", what gcloud asks by default).
    assert [i.name for i in filestore.list_instances(parent=PARENT)] == [ready.name]
    assert [i.name for i in filestore.list_instances(parent=f"projects/{PROJECT}/locations/-")] == [ready.name]


def test_delete_is_an_operation_then_the_instance_and_its_folder_are_gone(filestore, gcp):
    from google.api_core import exceptions
    from google.cloud import filestore_v1

    filestore.create_instance(parent=PARENT, instance_id="fs1", instance=_instance()).result(timeout=30)
    name = f"{PARENT}/instances/fs1"
    folder = gcp.filestore.folder_path(name)
    gcp.clock.freeze()
    gcp.faults.operation_seconds = 60.0
    op = filestore.delete_instance(name=name)
    assert filestore.get_instance(name=name).state == filestore_v1.Instance.State.DELETING
    assert not folder.exists() and gcp.filestore.export(name) is None
    gcp.clock.advance(60)
    op.result(timeout=30)
    with pytest.raises(exceptions.NotFound):
        filestore.get_instance(name=name)
    assert list(filestore.list_instances(parent=PARENT)) == []


@pytest.mark.parametrize("tier,gb,location,said", [
    ("ZONAL", 500, ZONE, "capacity_gb"),          # under ZONAL's 1 TiB
    ("ZONAL", 1100, ZONE, "capacity_gb"),         # not a 256 GiB step of the lower band
    ("ZONAL", 9999, ZONE, "capacity_gb"),         # between the bands
    ("BASIC_HDD", 70000, ZONE, "capacity_gb"),    # over the basic tiers' 63.9 TB
    ("REGIONAL", 1024, ZONE, "is not a region"),  # a regional tier in a zone
    ("ZONAL", 1024, "us-central1", "is not a zone"),  # a zonal tier in a region
    ("ZONAL", 1024, "mars-north1-a", "Location 'mars-north1-a'"),  # no such location
])
def test_tiers_sizes_and_locations_are_checked_before_anything_is_made(filestore, gcp, tier, gb, location, said):
    from google.api_core import exceptions

    with pytest.raises(exceptions.BadRequest) as e:
        filestore.create_instance(parent=f"projects/{PROJECT}/locations/{location}", instance_id="bad",
                                  instance=_instance(tier, gb))
    assert said in e.value.message
    assert list(filestore.list_instances(parent=f"projects/{PROJECT}/locations/-")) == []
    assert not (gcp.filestore.folder_path(f"projects/{PROJECT}/locations/{location}/instances/bad")).exists()


def test_duplicate_unknown_network_and_missing_instance_answer_as_google_does(filestore, gcp):
    from google.api_core import exceptions

    filestore.create_instance(parent=PARENT, instance_id="fs1", instance=_instance()).result(timeout=30)
    with pytest.raises(exceptions.Conflict):
        filestore.create_instance(parent=PARENT, instance_id="fs1", instance=_instance())
    with pytest.raises(exceptions.BadRequest, match="does not exist"):
        filestore.create_instance(parent=PARENT, instance_id="fs2", instance=_instance(network="nowhere"))
    with pytest.raises(exceptions.NotFound):
        filestore.delete_instance(name=f"{PARENT}/instances/nope")
    # REGIONAL takes 100 GiB in a region (its lower band).
    small = filestore.create_instance(parent=f"projects/{PROJECT}/locations/us-central1", instance_id="small",
                                      instance=_instance("REGIONAL", 100)).result(timeout=30)
    assert small.file_shares[0].capacity_gb == 100


@pytest.mark.skipif(shutil.which("gcloud") is None, reason="gcloud is not installed")
def test_gcloud_lists_describes_and_deletes_what_the_client_created(filestore, gcloud):
    filestore.create_instance(parent=PARENT, instance_id="nfs", instance=_instance()).result(timeout=30)
    rc, out, err = gcloud("gcloud filestore instances list --format=json")
    assert rc == 0, err
    listed = json.loads(out)
    assert [(i["name"], i["state"], i["tier"]) for i in listed] == [(f"{PARENT}/instances/nfs", "READY", "ZONAL")]
    rc, out, err = gcloud(f"gcloud filestore instances describe nfs --zone={ZONE} --format=json")
    assert rc == 0, err
    described = json.loads(out)
    assert described["fileShares"] == [{"name": "shared", "capacityGb": "1024"}]
    assert described["networks"][0]["ipAddresses"]
    rc, _out, err = gcloud(f"gcloud filestore instances create bad --zone={ZONE} --tier=ZONAL "
                           "--file-share=name=vol1,capacity=100GB --network=name=default")
    assert rc != 0 and "INVALID_ARGUMENT" in err and "capacity_gb" in err
    rc, _out, err = gcloud(f"gcloud filestore instances delete nfs --zone={ZONE} --quiet")
    assert rc == 0, err
    rc, out, err = gcloud("gcloud filestore instances list --format=json")
    assert rc == 0 and json.loads(out) == [], err
