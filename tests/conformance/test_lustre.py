"""Managed Lustre through Google's client (lustre_v1, REST transport) and `gcloud lustre instances`, with the
private service access it needs set up and removed as a user would: a Compute global address of purpose
VPC_PEERING (compute_v1) and a Service Networking connection (googleapiclient's discovery client), all
against the emulator (Lustre under /lustre/, Service Networking under /servicenetworking/)."""

from __future__ import annotations

import json
import shutil

import pytest

PROJECT = "emulator-project"
ZONE = "us-central1-a"
PARENT = f"projects/{PROJECT}/locations/{ZONE}"
NETWORK = f"projects/{PROJECT}/global/networks/default"
CONNECTIONS = "services/servicenetworking.googleapis.com"
PEERING = f"{CONNECTIONS}/connections/servicenetworking-googleapis-com"


@pytest.fixture
def lustre(gcp):
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import lustre_v1

    return lustre_v1.LustreClient(credentials=AnonymousCredentials(), transport="rest",
                                  client_options={"api_endpoint": f"http://{gcp.address}/lustre"})


@pytest.fixture
def networking(gcp):
    from google.auth.credentials import AnonymousCredentials
    from googleapiclient.discovery import build

    return build("servicenetworking", "v1", credentials=AnonymousCredentials(), static_discovery=True,
                 client_options={"api_endpoint": f"http://{gcp.address}/servicenetworking/"})


@pytest.fixture
def addresses(gcp):
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import compute_v1

    return compute_v1.GlobalAddressesClient(credentials=AnonymousCredentials(),
                                            client_options={"api_endpoint": f"http://{gcp.address}"})


def _consumer(gcp) -> str:
    return f"projects/{gcp.compute.project(PROJECT).number}/global/networks/default"  # Service Networking's form


def _private_access(gcp, addresses, networking) -> None:
    from google.cloud import compute_v1

    addresses.insert(project=PROJECT, address_resource=compute_v1.Address(
        name="gcpgpu-psa", purpose="VPC_PEERING", address_type="INTERNAL", prefix_length=16,
        network=NETWORK)).result()
    op = networking.services().connections().create(parent=CONNECTIONS, body={
        "network": _consumer(gcp), "reservedPeeringRanges": ["gcpgpu-psa"]}).execute()
    assert networking.operations().get(name=op["name"]).execute()["done"]


def _instance(gib: int = 18000, throughput: int = 1000, fs: str = "lfs"):
    from google.cloud import lustre_v1

    return lustre_v1.Instance(filesystem=fs, capacity_gib=gib, per_unit_storage_throughput=throughput,
                              network=NETWORK)


def test_without_private_service_access_the_create_is_refused(lustre):
    from google.api_core import exceptions

    with pytest.raises(exceptions.BadRequest, match="Private service access is not configured"):
        lustre.create_instance(parent=PARENT, instance_id="l1", instance=_instance())
    assert list(lustre.list_instances(parent=PARENT)) == []


def test_create_with_private_access_is_creating_then_active_with_its_mount_point(gcp, lustre, addresses, networking):
    from google.cloud import lustre_v1

    _private_access(gcp, addresses, networking)
    listed = networking.services().connections().list(parent=CONNECTIONS, network=_consumer(gcp)).execute()
    assert [c["reservedPeeringRanges"] for c in listed["connections"]] == [["gcpgpu-psa"]]
    assert addresses.get(project=PROJECT, address="gcpgpu-psa").address  # the range Google allocated
    gcp.clock.freeze()
    gcp.faults.operation_seconds = 300.0
    op = lustre.create_instance(parent=PARENT, instance_id="l1", instance=_instance())
    got = lustre.get_instance(name=f"{PARENT}/instances/l1")
    assert got.state == lustre_v1.Instance.State.CREATING and not got.mount_point
    gcp.clock.advance(300)
    made = op.result(timeout=30)
    assert made.state == lustre_v1.Instance.State.ACTIVE
    ip, _, fs = made.mount_point.partition("@tcp:/")
    assert fs == "lfs" and ip.count(".") == 3
    assert (made.capacity_gib, made.per_unit_storage_throughput) == (18000, 1000)
    assert gcp.lustre.folder_path(made.name).is_dir()


def test_the_connection_cannot_go_while_an_instance_uses_it_and_goes_after(gcp, lustre, addresses, networking):
    from googleapiclient.errors import HttpError

    _private_access(gcp, addresses, networking)
    made = lustre.create_instance(parent=PARENT, instance_id="l1", instance=_instance()).result(timeout=30)
    with pytest.raises(HttpError) as e:
        networking.services().connections().deleteConnection(
            name=PEERING, body={"consumerNetwork": _consumer(gcp)}).execute()
    assert e.value.resp.status == 400 and "still using this connection" in str(e.value)
    lustre.delete_instance(name=made.name).result(timeout=30)
    assert not gcp.lustre.folder_path(made.name).exists()
    networking.services().connections().deleteConnection(name=PEERING, body={"consumerNetwork": _consumer(gcp)}).execute()
    assert networking.services().connections().list(parent=CONNECTIONS, network=_consumer(gcp)).execute() == {}
    addresses.delete(project=PROJECT, address="gcpgpu-psa").result()


@pytest.mark.parametrize("gib,throughput,fs,said", [
    (9000, 500, "lfs", "capacity_gib"),         # under the 500 tier's minimum
    (20000, 1000, "lfs", "capacity_gib"),       # not a step of the 1000 tier
    (18000, 300, "lfs", "per_unit_storage_throughput"),
    (18000, 1000, "toolongname", "filesystem"),
])
def test_sizes_tiers_and_names_are_checked_before_anything_is_made(gcp, lustre, addresses, networking,
                                                                   gib, throughput, fs, said):
    from google.api_core import exceptions

    _private_access(gcp, addresses, networking)
    with pytest.raises(exceptions.BadRequest, match=said):
        lustre.create_instance(parent=PARENT, instance_id="bad", instance=_instance(gib, throughput, fs))
    with pytest.raises(exceptions.BadRequest, match="is not a zone"):
        lustre.create_instance(parent="projects/emulator-project/locations/us-central1", instance_id="bad",
                               instance=_instance())
    assert list(lustre.list_instances(parent=PARENT)) == []


@pytest.mark.skipif(shutil.which("gcloud") is None, reason="gcloud is not installed")
def test_gcloud_lists_describes_and_deletes_what_the_client_created(gcp, lustre, addresses, networking, gcloud):
    _private_access(gcp, addresses, networking)
    lustre.create_instance(parent=PARENT, instance_id="scratch", instance=_instance()).result(timeout=30)
    rc, out, err = gcloud(f"gcloud lustre instances list --location={ZONE} --format=json")
    assert rc == 0, err
    assert [(i["name"], i["state"]) for i in json.loads(out)] == [(f"{PARENT}/instances/scratch", "ACTIVE")]
    rc, out, err = gcloud(f"gcloud lustre instances describe scratch --location={ZONE} --format=json")
    assert rc == 0, err
    described = json.loads(out)
    assert described["mountPoint"].endswith("@tcp:/lfs") and described["capacityGib"] == "18000"
    rc, _out, err = gcloud(f"gcloud lustre instances delete scratch --location={ZONE} --quiet")
    assert rc == 0, err
    rc, out, err = gcloud(f"gcloud lustre instances list --location={ZONE} --format=json")
    assert rc == 0 and json.loads(out) == [], err


def test_a_filestore_instance_on_private_service_access_needs_the_connection_too(gcp, addresses, networking):
    from google.api_core import exceptions
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import filestore_v1

    client = filestore_v1.CloudFilestoreManagerClient(
        credentials=AnonymousCredentials(), transport="rest",
        client_options={"api_endpoint": f"http://{gcp.address}/filestore"})
    body = filestore_v1.Instance(
        tier=filestore_v1.Instance.Tier.ZONAL, file_shares=[filestore_v1.FileShareConfig(name="vol", capacity_gb=1024)],
        networks=[filestore_v1.NetworkConfig(
            network="default", connect_mode=filestore_v1.NetworkConfig.ConnectMode.PRIVATE_SERVICE_ACCESS)])
    with pytest.raises(exceptions.BadRequest, match="no private service access"):
        client.create_instance(parent=PARENT, instance_id="psa", instance=body)
    _private_access(gcp, addresses, networking)
    made = client.create_instance(parent=PARENT, instance_id="psa", instance=body).result(timeout=30)
    assert made.networks[0].connect_mode == filestore_v1.NetworkConfig.ConnectMode.PRIVATE_SERVICE_ACCESS
    assert gcp.filestore.on_network(PROJECT, "default") == [made.name]
