"""Networks, subnetworks and firewalls through the real client, and the default network every
project starts with."""

from __future__ import annotations

import pytest
from google.api_core import exceptions
from google.cloud import compute_v1

from gcpgpu.fakes.server import Emulator

from .builders import PROJECT, REGION, insert, vm


def _network(compute, name: str, mtu: int = 8244) -> None:
    compute("NetworksClient").insert(
        project=PROJECT, network_resource=compute_v1.Network(name=name, auto_create_subnetworks=False, mtu=mtu)
    ).result()


def _subnet(compute, name: str, network: str, cidr: str, region: str = REGION) -> None:
    compute("SubnetworksClient").insert(
        project=PROJECT, region=region,
        subnetwork_resource=compute_v1.Subnetwork(name=name, network=f"global/networks/{network}", ip_cidr_range=cidr),
    ).result()


def test_new_project_has_default_network_and_firewalls(gcp: Emulator, compute) -> None:
    net = compute("NetworksClient").get(project=PROJECT, network="default")
    assert net.auto_create_subnetworks is True
    subnets = {s.name: s for s in compute("SubnetworksClient").list(project=PROJECT, region=REGION)}
    assert subnets["default"].network == net.self_link
    assert len(net.subnetworks) == len(gcp.world.regions)  # one auto-mode subnet per region
    rules = {f.name: f for f in compute("FirewallsClient").list(project=PROJECT)}
    assert set(rules) == {"default-allow-internal", "default-allow-ssh", "default-allow-rdp", "default-allow-icmp"}
    assert all(f.network == net.self_link for f in rules.values())
    assert rules["default-allow-internal"].source_ranges == ["10.128.0.0/9"]
    assert rules["default-allow-ssh"].allowed[0].ports == ["22"]


def test_custom_network_subnets_and_firewall_crud(compute) -> None:
    nets, subs, fws = compute("NetworksClient"), compute("SubnetworksClient"), compute("FirewallsClient")
    _network(compute, "data-net-1")
    assert nets.get(project=PROJECT, network="data-net-1").mtu == 8244
    _subnet(compute, "data-sub-1", "data-net-1", "10.129.1.0/24")
    sub = subs.get(project=PROJECT, region=REGION, subnetwork="data-sub-1")
    assert (sub.ip_cidr_range, sub.gateway_address) == ("10.129.1.0/24", "10.129.1.1")
    assert sub.self_link in nets.get(project=PROJECT, network="data-net-1").subnetworks
    fws.insert(project=PROJECT, firewall_resource=compute_v1.Firewall(
        name="data-net-1-internal", network="global/networks/data-net-1", source_ranges=["10.129.1.0/24"],
        allowed=[compute_v1.Allowed(I_p_protocol="tcp"), compute_v1.Allowed(I_p_protocol="udp")],
    )).result()
    fw = fws.get(project=PROJECT, firewall="data-net-1-internal")
    assert (fw.direction, fw.priority, fw.source_ranges) == ("INGRESS", 1000, ["10.129.1.0/24"])

    # A network is in use while its subnets or firewall rules exist: delete them first.
    with pytest.raises(exceptions.BadRequest) as e:
        nets.delete(project=PROJECT, network="data-net-1")
    assert e.value.errors[0]["reason"] == "resourceInUseByAnotherResource"
    fws.delete(project=PROJECT, firewall="data-net-1-internal").result()
    subs.delete(project=PROJECT, region=REGION, subnetwork="data-sub-1").result()
    assert nets.get(project=PROJECT, network="data-net-1").subnetworks == []
    nets.delete(project=PROJECT, network="data-net-1").result()
    for call in (lambda: nets.get(project=PROJECT, network="data-net-1"),
                 lambda: subs.get(project=PROJECT, region=REGION, subnetwork="data-sub-1"),
                 lambda: fws.get(project=PROJECT, firewall="data-net-1-internal")):
        with pytest.raises(exceptions.NotFound):
            call()


def test_network_errors(compute) -> None:
    nets = compute("NetworksClient")
    _network(compute, "mgmt-net")
    with pytest.raises(exceptions.Conflict) as e:
        _network(compute, "mgmt-net")
    assert e.value.errors[0]["reason"] == "alreadyExists"
    for bad in ("Mgmt", "1net", "net_1", "net-", "n" * 64):
        with pytest.raises(exceptions.BadRequest) as e:
            _network(compute, bad)
        assert e.value.errors[0]["reason"] == "invalid", bad
    with pytest.raises(exceptions.BadRequest):
        _network(compute, "jumbo", mtu=9999)
    with pytest.raises(exceptions.NotFound) as e:
        nets.delete(project=PROJECT, network="never-made")
    assert e.value.errors[0]["reason"] == "notFound"


def test_subnet_errors(compute) -> None:
    _network(compute, "rdma-net")
    _subnet(compute, "rdma-sub-0", "rdma-net", "10.130.0.0/24")
    with pytest.raises(exceptions.BadRequest):  # overlaps rdma-sub-0 on the same network
        _subnet(compute, "rdma-sub-1", "rdma-net", "10.130.0.128/25", region="us-east4")
    with pytest.raises(exceptions.NotFound):
        _subnet(compute, "orphan", "no-such-net", "10.131.0.0/24")
    with pytest.raises(exceptions.Conflict):
        _subnet(compute, "rdma-sub-0", "rdma-net", "10.132.0.0/24")


def test_subnet_in_use_by_an_instance_cannot_be_deleted(compute, instances) -> None:
    _network(compute, "gpu-net")
    _subnet(compute, "gpu-sub", "gpu-net", "10.140.0.0/24")
    insert(instances, vm("vm-on-gpu-net", network="global/networks/gpu-net",
                         subnetwork=f"regions/{REGION}/subnetworks/gpu-sub"))
    got = instances.get(project=PROJECT, zone="us-central1-a", instance="vm-on-gpu-net")
    assert got.network_interfaces[0].network_i_p.startswith("10.140.0.")
    with pytest.raises(exceptions.BadRequest) as e:
        compute("SubnetworksClient").delete(project=PROJECT, region=REGION, subnetwork="gpu-sub")
    assert e.value.errors[0]["reason"] == "resourceInUseByAnotherResource"
    assert "vm-on-gpu-net" in e.value.message


def test_firewalls_list_pages_and_filters(compute) -> None:
    fws = compute("FirewallsClient")
    for i in range(7):
        fws.insert(project=PROJECT, firewall_resource=compute_v1.Firewall(
            name=f"cluster-x-{i}", network="global/networks/default", source_ranges=[f"10.128.{i}.0/24"],
            allowed=[compute_v1.Allowed(I_p_protocol="tcp", ports=["8000-9000"])], priority=900 + i,
        )).result()
    pager = fws.list(request={"project": PROJECT, "max_results": 3})
    pages = list(pager.pages)
    assert len(pages) == 4  # 7 + the 4 default rules, 3 a page
    assert len({f.name for p in pages for f in p.items}) == 11
    mine = fws.list(request={"project": PROJECT, "filter": "name = cluster-x-*"})
    assert sorted(f.name for f in mine) == [f"cluster-x-{i}" for i in range(7)]
    high = fws.list(request={"project": PROJECT, "filter": "priority < 903 AND name = cluster-*"})
    assert sorted(f.name for f in high) == ["cluster-x-0", "cluster-x-1", "cluster-x-2"]


def test_network_and_subnet_operations_are_global_and_regional(compute) -> None:
    op = compute("NetworksClient").insert(project=PROJECT, network_resource=compute_v1.Network(
        name="ops-net", auto_create_subnetworks=False))
    op.result()
    assert "/global/operations/" in op.self_link
    gop = compute("GlobalOperationsClient").get(project=PROJECT, operation=op.name)
    assert (gop.status, gop.operation_type) == (compute_v1.Operation.Status.DONE, "insert")
    op = compute("SubnetworksClient").insert(project=PROJECT, region=REGION, subnetwork_resource=compute_v1.Subnetwork(
        name="ops-sub", network="global/networks/ops-net", ip_cidr_range="10.150.0.0/24"))
    op.result()
    rop = compute("RegionOperationsClient").get(project=PROJECT, region=REGION, operation=op.name)
    assert rop.target_link.endswith("/subnetworks/ops-sub")
    names = [o.name for o in compute("RegionOperationsClient").list(project=PROJECT, region=REGION)]
    assert op.name in names


MALFORMED = ["networks/$(id)/default", "global/networks/$(id)/default", "projects/p/global/networks/default/x",
             "https://www.googleapis.com/compute/v1/global/networks/default", "global/subnetworks/default",
             "Default"]


@pytest.mark.parametrize("link", MALFORMED)
def test_a_malformed_network_reference_is_refused_as_compute_refuses_it(compute, instances, link) -> None:
    # Read by its last segment, networks/$(id)/default used to be taken as the network 'default'.
    with pytest.raises(exceptions.BadRequest) as e:
        instances.insert(project=PROJECT, zone="us-central1-a", instance_resource=vm("web-1", network=link))
    assert e.value.message.endswith(f": Invalid value for field 'resource.networkInterfaces[0].network': '{link}'. "
                                    "The URL is malformed.")
    with pytest.raises(exceptions.BadRequest, match="The URL is malformed"):
        compute("FirewallsClient").insert(project=PROJECT, firewall_resource=compute_v1.Firewall(
            name="fw", network=link, allowed=[compute_v1.Allowed(I_p_protocol="tcp")]))
    with pytest.raises(exceptions.BadRequest, match="The URL is malformed"):
        compute("SubnetworksClient").insert(project=PROJECT, region=REGION, subnetwork_resource=compute_v1.Subnetwork(
            name="sub", network=link, ip_cidr_range="10.200.0.0/24"))
    with pytest.raises(exceptions.BadRequest, match="The URL is malformed"):
        compute("RoutersClient").insert(project=PROJECT, region=REGION, router_resource=compute_v1.Router(
            name="r", network=link))
    assert [i.name for i in instances.list(project=PROJECT, zone="us-central1-a")] == []


@pytest.mark.parametrize("subnet", ["regions/us-central1/subnetworks/$(id)", "subnetworks/default/x"])
def test_a_malformed_subnetwork_reference_is_refused(instances, subnet) -> None:
    with pytest.raises(exceptions.BadRequest) as e:
        instances.insert(project=PROJECT, zone="us-central1-a", instance_resource=vm("web-1", subnetwork=subnet))
    assert e.value.message.endswith(f"'resource.networkInterfaces[0].subnetwork': '{subnet}'. The URL is malformed.")


@pytest.mark.parametrize("link", [
    f"https://www.googleapis.com/compute/v1/projects/{PROJECT}/global/networks/default",
    f"https://compute.googleapis.com/compute/v1/projects/{PROJECT}/global/networks/default",
    f"projects/{PROJECT}/global/networks/default", "global/networks/default", "default"])
def test_full_urls_partial_paths_and_names_reach_the_network(instances, link) -> None:
    insert(instances, vm("web-1", network=link,
                         subnetwork=f"projects/{PROJECT}/regions/{REGION}/subnetworks/default"))
    nic = instances.get(project=PROJECT, zone="us-central1-a", instance="web-1").network_interfaces[0]
    assert nic.network.endswith(f"/projects/{PROJECT}/global/networks/default")


def test_global_addresses_for_private_service_access(compute) -> None:
    addresses = compute("GlobalAddressesClient")
    for n in (1, 2):
        addresses.insert(project=PROJECT, address_resource=compute_v1.Address(
            name=f"psa-{n}", purpose="VPC_PEERING", address_type="INTERNAL", prefix_length=16,
            network="global/networks/default")).result()
    got = {a.name: a for a in addresses.list(project=PROJECT)}
    assert got["psa-1"].address != got["psa-2"].address and got["psa-1"].status == "RESERVED"
    assert got["psa-1"].network.endswith("/global/networks/default") and got["psa-1"].prefix_length == 16
    with pytest.raises(exceptions.Conflict):
        addresses.insert(project=PROJECT, address_resource=compute_v1.Address(
            name="psa-1", purpose="VPC_PEERING", prefix_length=16, network="global/networks/default"))
    for bad, field in ((compute_v1.Address(name="x", purpose="VPC_PEERING", prefix_length=16), "network"),
                       (compute_v1.Address(name="x", purpose="VPC_PEERING", network="global/networks/default"),
                        "prefixLength"),
                       (compute_v1.Address(name="x", purpose="VPC_PEERING", prefix_length=16,
                                           network="global/networks/nowhere"), "nowhere")):
        with pytest.raises((exceptions.BadRequest, exceptions.NotFound), match=field):
            addresses.insert(project=PROJECT, address_resource=bad)
    addresses.delete(project=PROJECT, address="psa-1").result()
    assert [a.name for a in addresses.list(project=PROJECT)] == ["psa-2"]
