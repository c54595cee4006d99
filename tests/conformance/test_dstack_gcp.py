"""dstack 0.22.5's GCP backend (`dstack._internal.core.backends.gcp`), unchanged, against the emulator.

Only the connection is adapted: every google-cloud-compute client dstack makes gets the emulator's
address (as gcpgpu's own clients do), and `google.auth.default()` (dstack's default credentials)
answers anonymous credentials for the emulator's project. The offers are what dstack's catalog
gives for these machines; the catalog itself (gpuhunt, fetched from the network) is not used.
"""

from __future__ import annotations

import pytest
from google.api_core.client_options import ClientOptions
from google.auth.credentials import AnonymousCredentials
from google.cloud import compute_v1

pytest.importorskip("dstack", reason="dstack is a dev dependency: `make install` puts it in .venv")

from dstack._internal.core.backends.gcp.compute import GCPCompute  # noqa: E402
from dstack._internal.core.backends.gcp.configurator import GCPConfigurator  # noqa: E402
from dstack._internal.core.backends.gcp.models import (  # noqa: E402
    GCPBackendConfigWithCreds,
    GCPConfig,
    GCPDefaultCreds,
)
from dstack._internal.core.errors import BackendError, ServerClientError  # noqa: E402
from dstack._internal.core.models.backends.base import BackendType  # noqa: E402
from dstack._internal.core.models.instances import (  # noqa: E402
    Disk,
    Gpu,
    InstanceAvailability,
    InstanceConfiguration,
    InstanceOfferWithAvailability,
    InstanceType,
    Resources,
    SSHKey,
)

PROJECT = "dstack-emulated"
REGION, ZONE = "us-central1", "us-central1-a"


@pytest.fixture
def emulated(gcp, monkeypatch):
    """Point every compute_v1 client at the emulator and make default credentials anonymous."""
    for name in dir(compute_v1):
        cls = getattr(compute_v1, name)
        if name.endswith("Client") and isinstance(cls, type) and "__init__" in vars(cls):
            def init(self, *args, _real=cls.__init__, **kwargs):
                kwargs.update(credentials=AnonymousCredentials(), transport="rest",
                              client_options=ClientOptions(api_endpoint=f"http://{gcp.address}"))
                _real(self, *args, **kwargs)
            monkeypatch.setattr(cls, "__init__", init)
    monkeypatch.setattr("google.auth.default", lambda *a, **k: (AnonymousCredentials(), PROJECT))
    return gcp


def _backend_config(**extra) -> GCPBackendConfigWithCreds:
    return GCPBackendConfigWithCreds(type="gcp", project_id=PROJECT, regions=[REGION],
                                     creds=GCPDefaultCreds(type="default"), **extra)


def _offer(name: str, cpus: int, memory_gib: int, gpus: list[Gpu]) -> InstanceOfferWithAvailability:
    return InstanceOfferWithAvailability(
        backend=BackendType.GCP, region=REGION, price=1.0, availability=InstanceAvailability.AVAILABLE,
        availability_zones=[ZONE],
        instance=InstanceType(name=name, resources=Resources(cpus=cpus, memory_mib=memory_gib * 1024, gpus=gpus,
                                                             spot=False, disk=Disk(size_mib=100 * 1024))))


def _instance_config(name: str) -> InstanceConfiguration:
    return InstanceConfiguration(project_name="main", instance_name=name, user="admin",
                                 ssh_keys=[SSHKey(public="ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAA test")])


def _compute(**extra) -> GCPCompute:
    return GCPCompute(GCPConfig(type="gcp", project_id=PROJECT, regions=[REGION],
                                creds=GCPDefaultCreds(type="default"), **extra))


def test_configurator_check_passes_and_refuses_a_vpc_the_project_lacks(emulated):
    GCPConfigurator().validate_config(_backend_config(), default_creds_enabled=True)
    with pytest.raises((BackendError, ServerClientError)) as e:
        GCPConfigurator().validate_config(_backend_config(vpc_name="no-such-vpc"), default_creds_enabled=True)
    assert "no-such-vpc" in str(e.value)


def test_creates_and_terminates_a_t4_vm(emulated):
    compute = _compute()
    data = compute.create_instance(_offer("n1-standard-4", 4, 15, [Gpu(name="T4", memory_mib=16384)]),
                                   _instance_config("t4-job"), None)
    assert data.availability_zone == ZONE
    vm = emulated.compute.get(PROJECT, f"zones/{ZONE}/instances", data.instance_id)
    assert vm["guestAccelerators"][0]["acceleratorType"].endswith("/acceleratorTypes/nvidia-tesla-t4")
    assert vm["disks"][0]["source"] and vm["labels"]["owner"] == "dstack"
    assert "dstack-runner-instance" in vm["tags"]["items"]
    fw = {f["name"] for f in emulated.compute.list(PROJECT, "global/firewalls")}
    assert any(n.startswith("dstack-ssh-in") for n in fw)  # its runner firewall rule
    compute.update_provisioning_data(data, "ssh-ed25519 AAAA project-key", "")
    assert data.hostname  # the external address dstack connects to
    compute.terminate_instance(data.instance_id, REGION, data.backend_data)
    emulated.clock.advance(1)
    assert emulated.compute.list(PROJECT, f"zones/{ZONE}/instances") == []


def test_a3_high_with_its_extra_vpcs(emulated):
    import googleapiclient.discovery

    api = googleapiclient.discovery.build(
        "compute", "v1", credentials=AnonymousCredentials(), static_discovery=True,
        client_options={"api_endpoint": f"http://{emulated.address}/compute/v1/"})
    extra = [f"gpu-net-{i}" for i in range(4)]
    for i, net in enumerate(extra):  # what a dstack user makes before naming them in extra_vpcs
        api.networks().insert(project=PROJECT, body={"name": net, "autoCreateSubnetworks": False, "mtu": 8244}).execute()
        api.subnetworks().insert(project=PROJECT, region=REGION, body={
            "name": f"{net}-sub", "network": f"global/networks/{net}", "ipCidrRange": f"192.168.{i}.0/24"}).execute()
    GCPConfigurator().validate_config(_backend_config(extra_vpcs=extra), default_creds_enabled=True)
    compute = _compute(extra_vpcs=extra)
    data = compute.create_instance(_offer("a3-highgpu-8g", 208, 1872, [Gpu(name="H100", memory_mib=81920)] * 8),
                                   _instance_config("a3-job"), None)
    vm = emulated.compute.get(PROJECT, f"zones/{data.availability_zone}/instances", data.instance_id)
    nets = [n["network"].rsplit("/", 1)[1] for n in vm["networkInterfaces"]]
    assert nets == ["default", *extra]
    assert {n.get("nicType") for n in vm["networkInterfaces"]} == {"GVNIC"}
    assert vm["guestAccelerators"][0]["acceleratorCount"] == 8
    compute.terminate_instance(data.instance_id, REGION, data.backend_data)
