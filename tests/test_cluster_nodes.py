"""Real nodes: per-family boot setup, RDMA networks for A3 Ultra / A4, the receive-datapath manager
in the job agent, and `cluster doctor`, through the CLI and the emulator."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from helpers import PROJECT

from gcpgpu import catalog
from gcpgpu.cli import main
from gcpgpu.cluster.plan import plan
from gcpgpu.cluster.spec import ClusterSpec

GLOBAL = ["--project", PROJECT]
ZONE = {"a2-highgpu-8g": "us-central1-a", "g2-standard-48": "us-central1-a", "a3-highgpu-8g": "us-central1-a",
        "a3-megagpu-8g": "us-central1-a", "a3-ultragpu-8g": "us-central1-b", "a4-highgpu-8g": "us-east5-a"}


def cli(*argv: str, fmt: str | None = None):
    return CliRunner().invoke(main, [*GLOBAL, *(["--format", fmt] if fmt else []), *argv])


def make(machine_type: str, **kw):
    spec = ClusterSpec(name="c", machine_type=machine_type, nodes=2, zones=[ZONE[machine_type]], **kw).validate()
    return plan(spec, PROJECT)


def meta(props: dict) -> dict[str, str]:
    return {i["key"]: i["value"] for i in props["metadata"]["items"]}


# --- plan: boot disk, image, driver per family ---------------------------------------------------

@pytest.mark.parametrize(("machine_type", "disk", "image_family", "dlvm"), [
    ("a2-highgpu-8g", "pd-balanced", "common-cu124-debian-11", True),
    ("g2-standard-48", "pd-balanced", "common-cu124-debian-11", True),
    ("a3-highgpu-8g", "pd-ssd", "common-cu124-debian-11", True),
    ("a3-megagpu-8g", "pd-ssd", "ubuntu-accelerator-2404-amd64-with-nvidia-580", False),
    ("a3-ultragpu-8g", "hyperdisk-balanced", "ubuntu-accelerator-2404-amd64-with-nvidia-580", False),
    ("a4-highgpu-8g", "hyperdisk-balanced", "ubuntu-accelerator-2404-amd64-with-nvidia-580", False),
])
def test_each_family_boots_its_image_and_disk_type(machine_type, disk, image_family, dlvm):
    p = make(machine_type)
    init = p.instance_properties["disks"][0]["initializeParams"]
    assert init["diskType"] == disk
    assert init["sourceImage"].endswith("/family/" + image_family)
    # The Deep Learning VM installs the driver only when the instance asks for it.
    assert ("install-nvidia-driver" in meta(p.instance_properties)) is dlvm
    assert meta(p.instance_properties)["enable-guest-attributes"] == "TRUE"
    rows = {r["kind"]: r for r in p.resources()}
    assert rows["boot disk"]["name"] == disk and catalog.node_setup(p.machine).source in rows["boot disk"]["details"]
    assert "docker credentials for us-" in rows["node setup"]["details"]
    assert "dcgm receiver" in rows["metrics agent"]["name"] and "third-party-nvidia" in rows["metrics agent"]["details"]
    # No external IPs: a Cloud NAT on the primary network, as Cluster Toolkit's vpc module makes one.
    assert rows["cloud NAT"]["name"] == "c-nat / c-nat" and "enable_cloud_nat" in rows["cloud NAT"]["details"]
    assert "Private Google Access" in rows["egress"]["name"]


def test_plan_cli_shows_boot_disk_networks_and_installs_for_a4():
    result = cli("cluster", "plan", "c", "--machine-type", "a4-highgpu-8g", "--nodes", "2", "--zone", "us-east5-a",
                 fmt="json")
    assert result.exit_code == 0, result.output
    body = json.loads(result.stdout)
    props = body["bulkInsert"]["instanceProperties"]
    assert props["disks"][0]["initializeParams"]["diskType"] == "hyperdisk-balanced"
    assert [n.get("nicType") for n in props["networkInterfaces"]] == ["GVNIC"] * 2 + ["MRDMA"] * 8


def test_a_disk_type_the_family_cannot_boot_from_is_refused_before_any_call(gcp):
    before = len(gcp.requests.all())
    result = cli("cluster", "up", "c", "--machine-type", "a3-ultragpu-8g", "--zone", "us-central1-b",
                 "--boot-disk-type", "pd-balanced", "--yes")
    assert result.exit_code == 2
    assert "--boot-disk-type 'pd-balanced': a3-ultragpu-8g boots from hyperdisk-balanced" in result.output
    assert len(gcp.requests.all()) == before


# --- RDMA networking ----------------------------------------------------------------------------

@pytest.mark.parametrize("machine_type", ["a3-ultragpu-8g", "a4-highgpu-8g"])
def test_rdma_plan_has_roce_vpc_with_eight_subnets_and_a_second_gvnic_vpc(machine_type):
    p = make(machine_type)
    zone = ZONE[machine_type]
    roce = [n for n in p.networks if n.get("networkProfile")]
    assert [n["networkProfile"] for n in roce] == [f"projects/{PROJECT}/global/networkProfiles/{zone}-vpc-roce"]
    assert all(n["mtu"] == 8896 for n in p.networks) and len(p.networks) == 2
    rdma_subnets = [s for s in p.subnets if s["network"].endswith("/" + roce[0]["name"])]
    assert len(rdma_subnets) == 8
    nics = p.instance_properties["networkInterfaces"]
    assert [n.get("nicType") for n in nics] == ["GVNIC", "GVNIC"] + ["MRDMA"] * 8
    assert {n["subnetwork"].rsplit("/", 1)[-1] for n in nics[2:]} == {s["name"] for s in rdma_subnets}
    assert not any("not wired" in note for note in p.notes)


def test_rdma_cluster_comes_up_on_the_emulator_and_down_leaves_nothing(gcp):
    result = cli("cluster", "up", "c", "--machine-type", "a3-ultragpu-8g", "--nodes", "2", "--zone", "us-central1-b",
                 "--yes")
    assert result.exit_code == 0, result.output
    inst = gcp.compute.get(PROJECT, "zones/us-central1-b/instances", "c-0")
    assert [n.get("nicType") for n in inst["networkInterfaces"]] == ["GVNIC", "GVNIC"] + ["MRDMA"] * 8
    net = gcp.compute.get(PROJECT, "global/networks", "c-rdma")
    assert net["networkProfile"].endswith("/global/networkProfiles/us-central1-b-vpc-roce")
    assert cli("cluster", "down", "c", "--yes").exit_code == 0


def _insert(gcp, body: dict, zone: str = "us-central1-b"):
    from google.api_core import exceptions
    from google.cloud import compute_v1

    from gcpgpu.gcp.clients import Clients

    client = Clients(emulator=gcp.address).compute("InstancesClient")
    try:
        client.insert(project=PROJECT, zone=zone, instance_resource=compute_v1.Instance.from_json(json.dumps(body)))
    except exceptions.BadRequest as e:
        return str(e)
    return None


def _instance(machine_type: str, disk: str, nics: list[dict]) -> dict:
    return {"name": "v", "machineType": f"zones/us-central1-b/machineTypes/{machine_type}",
            "disks": [{"boot": True, "initializeParams": {
                "sourceImage": "projects/debian-cloud/global/images/family/debian-12", "diskType": disk}}],
            "networkInterfaces": nics, "scheduling": {"onHostMaintenance": "TERMINATE"}}


def test_emulator_refuses_persistent_disk_on_a3_ultra(gcp):
    error = _insert(gcp, _instance("a3-ultragpu-8g", "pd-balanced", [{"network": "global/networks/default"}]))
    assert error and "[pd-balanced, a3-ultragpu-8g] features are not compatible for creating instance." in error
    assert _insert(gcp, _instance("a3-highgpu-8g", "pd-ssd", [{"network": "global/networks/default"}])) is None


def test_emulator_checks_mrdma_nics_and_network_profiles(gcp):
    from google.api_core import exceptions
    from google.cloud import compute_v1

    from gcpgpu.gcp.clients import Clients

    nets = Clients(emulator=gcp.address).compute("NetworksClient")
    with pytest.raises(exceptions.BadRequest, match="networkProfile"):
        nets.insert(project=PROJECT, network_resource=compute_v1.Network(
            name="bad", auto_create_subnetworks=False, network_profile="projects/p/global/networkProfiles/nowhere"))
    # An MRDMA NIC on a machine without RDMA NICs, and on a network without the RoCE profile.
    mrdma_on_default = [{"network": "global/networks/default", "nicType": "MRDMA"}]
    assert "does not support MRDMA" in _insert(gcp, _instance("a3-highgpu-8g", "pd-ssd", mrdma_on_default))
    assert "network profile 'us-central1-b-vpc-roce'" in _insert(
        gcp, _instance("a3-ultragpu-8g", "hyperdisk-balanced", mrdma_on_default))


# --- cluster doctor and the receive-datapath manager on the emulator ---------------------------

def _wait_state(job_id: str, states: tuple[str, ...]) -> dict:
    import time

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        status = json.loads(cli("job", "status", job_id, fmt="json").stdout)
        if status["state"] in states:
            return status
        time.sleep(0.1)
    raise AssertionError(f"job {job_id} never reached {states}")


def test_doctor_reports_ready_nodes_and_names_what_a_node_lacks(gcp):
    assert cli("cluster", "up", "c", "--machine-type", "a3-megagpu-8g", "--nodes", "2", "--zone", "us-central1-a",
               "--yes").exit_code == 0
    ok = cli("cluster", "doctor", "c", fmt="json")
    assert ok.exit_code == 0, ok.output
    rows = json.loads(ok.stdout)
    assert [(r["node"], r["gpus"], r["gpu_nics"], r["gpudirect"], r["ready"]) for r in rows] == [
        ("c-0", "8/8", "8/8", "ready", "yes"), ("c-1", "8/8", "8/8", "ready", "yes")]
    assert rows[0]["driver"].startswith("580.")

    gcp.jobs.agent.nodes.lack("c-1", "gpudirect")
    gcp.jobs.agent.nodes.lack("c-1", "links")
    bad = cli("cluster", "doctor", "c")
    assert bad.exit_code == 1
    assert "1 of 2 node(s) not ready: c-1: links down:enp134s0, missing /dev/aperture_devices" in bad.output


def test_tcpxo_job_starts_the_datapath_manager_and_fails_in_one_line_without_it(gcp):
    assert cli("cluster", "up", "c", "--machine-type", "a3-megagpu-8g", "--nodes", "2", "--zone", "us-central1-a",
               "--yes").exit_code == 0
    gcp.jobs.agent.simulated_run_s = 30
    sub = cli("job", "submit", "--cluster", "c", "--image", "busybox", "--command", "sleep 600")
    assert sub.exit_code == 0, sub.output
    job_id = sub.stdout.splitlines()[0]
    _wait_state(job_id, ("RUNNING",))
    inst = gcp.compute.get(PROJECT, "zones/us-central1-a/instances", "c-0")
    agent = meta(inst)["gcpgpu-job-agent"]
    # The agent's script starts Google's RxDM (catalog image) before the trainer's container.
    rxdm = catalog.gpudirect_host("tcpxo")
    assert agent.index(f"RXDM_IMAGE={rxdm.rxdm_image}") < agent.index('docker run "${run_args[@]}"')
    # The trainer sees the host installer's whole plugin dir (one version) and the aperture devices.
    assert "run_args+=(--volume /var/lib/tcpxo/lib64:/var/lib/tcpxo/lib64)" in agent
    assert "run_args+=(--volume /dev/aperture_devices:/dev/aperture_devices)" in agent
    assert "/var/lib/tcpxo/lib64/libnccl-net.so:" not in agent
    doctor = json.loads(cli("cluster", "doctor", "c", fmt="json").stdout)
    assert [r["rxdm"] for r in doctor] == ["up", "up"]
    assert cli("job", "cancel", job_id, "--wait").exit_code == 0

    # A recovery re-delivers the stored record as attempt 1: its agent starts the RxDM first too.
    from gcpgpu.cluster.observe import ranked_nodes
    from gcpgpu.gcp.clients import Clients
    from gcpgpu.jobs.cluster.deliver import deliver, run_key
    from gcpgpu.jobs.cluster.record import JobRecord

    clients = Clients(emulator=gcp.address)
    nodes = ranked_nodes(clients, PROJECT, "c")
    record = JobRecord.from_json(json.loads(meta(inst)["gcpgpu-job"]))
    record = record.but(rxdm=None, attempt=1, run=run_key(record.id, 1))
    deliver(clients, PROJECT, record, nodes)
    again = meta(gcp.compute.get(PROJECT, "zones/us-central1-a/instances", "c-1"))
    assert again["gcpgpu-job-id"].endswith("-r1")
    assert again["gcpgpu-job-agent"].index(f"RXDM_IMAGE={rxdm.rxdm_image}") < again["gcpgpu-job-agent"].index(
        'docker run "${run_args[@]}"')
    assert json.loads(again["gcpgpu-job"])["rxdm"] == rxdm.rxdm_image
    _wait_state(job_id, ("RUNNING",))
    assert cli("job", "cancel", job_id, "--wait").exit_code == 0

    gcp.jobs.agent.nodes.lack("c-1", "gpudirect")
    failed = cli("job", "submit", "--cluster", "c", "--image", "busybox", "--command", "sleep 600")
    status = _wait_state(failed.stdout.splitlines()[0], ("FAILED",))
    messages = {n["node"]: n.get("message", "") for n in status["per_node"]}
    assert messages["c-1"] == (f"receive-datapath manager ({rxdm.rxdm_image}) exited: missing /dev/aperture_devices")


# --- outbound: Cloud NAT on the primary network ----------------------------------------------

def _routers(gcp, region: str = "us-central1") -> list[dict]:
    return gcp.compute.list(PROJECT, f"regions/{region}/routers")


def test_up_makes_a_cloud_nat_for_internal_nodes_and_down_removes_it(gcp):
    up = cli("cluster", "up", "c", "--machine-type", "a2-highgpu-1g", "--nodes", "1", "--zone", "us-central1-a",
             "--yes")
    assert up.exit_code == 0, up.output
    [router] = _routers(gcp)
    assert router["name"] == "c-nat" and router["network"].endswith("/global/networks/default")
    assert router["nats"] == [{"name": "c-nat", "natIpAllocateOption": "AUTO_ONLY",
                               "sourceSubnetworkIpRangesToNat": "ALL_SUBNETWORKS_ALL_IP_RANGES"}]
    assert cli("cluster", "down", "c", "--yes").exit_code == 0
    assert _routers(gcp) == []


def test_a_second_cluster_uses_the_network_nat_and_no_nat_or_external_ip_make_none(gcp):
    assert cli("cluster", "up", "a", "--machine-type", "a2-highgpu-1g", "--nodes", "1", "--zone", "us-central1-a",
               "--yes").exit_code == 0
    # The API refuses a second NAT for all subnetworks on the same network and region, so `up` uses the first.
    second = cli("cluster", "up", "b", "--machine-type", "a2-highgpu-1g", "--nodes", "1", "--zone", "us-central1-a",
                 "--yes")
    assert second.exit_code == 0, second.output
    assert "already has Cloud NAT a-nat/a-nat in us-central1: using it" in second.output
    assert [r["name"] for r in _routers(gcp)] == ["a-nat"]
    for flag in ("--no-nat", "--external-ip"):
        p = json.loads(cli("cluster", "plan", "x", "--machine-type", "a2-highgpu-1g", "--zone", "us-central1-a", flag,
                           fmt="json").stdout)
        assert p["routers"] == []


def test_a_nat_another_cluster_still_uses_outlives_its_maker_and_goes_with_the_last_user(gcp):
    """a's NAT carries b's traffic too: down a keeps it (b's nodes would lose their way out), down b removes it."""
    for name in ("a", "b"):
        assert cli("cluster", "up", name, "--machine-type", "a2-highgpu-1g", "--nodes", "1", "--zone",
                   "us-central1-a", "--yes").exit_code == 0
    down_a = cli("cluster", "down", "a", "--yes")
    assert down_a.exit_code == 0, down_a.output
    assert "keeping Cloud NAT a-nat (us-central1): 1 other VM(s) on network default" in down_a.output
    assert "Cloud NAT" not in down_a.output.split("is gone")[-1]  # not reported as deleted
    assert [r["name"] for r in _routers(gcp)] == ["a-nat"]
    down_b = cli("cluster", "down", "b", "--yes")
    assert down_b.exit_code == 0, down_b.output
    assert "removing Cloud NAT a-nat (us-central1) that cluster a left" in down_b.output
    assert _routers(gcp) == []


def test_a_nat_gcpgpu_did_not_make_is_used_and_never_deleted(gcp):
    from google.cloud import compute_v1

    from gcpgpu.gcp.clients import Clients

    Clients(emulator=gcp.address).compute("RoutersClient").insert(
        project=PROJECT, region="us-central1", router_resource=compute_v1.Router(
            name="corp-nat", description="the platform team's", network="global/networks/default",
            nats=[compute_v1.RouterNat(name="corp-nat", nat_ip_allocate_option="AUTO_ONLY",
                                       source_subnetwork_ip_ranges_to_nat="ALL_SUBNETWORKS_ALL_IP_RANGES")])).result()
    up = cli("cluster", "up", "c", "--machine-type", "a2-highgpu-1g", "--nodes", "1", "--zone", "us-central1-a", "--yes")
    assert "already has Cloud NAT corp-nat/corp-nat" in up.output
    assert cli("cluster", "down", "c", "--yes").exit_code == 0
    assert [r["name"] for r in _routers(gcp)] == ["corp-nat"]


def test_emulator_refuses_a_second_nat_for_all_subnetworks(gcp):
    from google.api_core import exceptions
    from google.cloud import compute_v1

    from gcpgpu.gcp.clients import Clients

    routers = Clients(emulator=gcp.address).compute("RoutersClient")

    def router(name: str) -> compute_v1.Router:
        return compute_v1.Router(name=name, network="global/networks/default", nats=[compute_v1.RouterNat(
            name=name, nat_ip_allocate_option="AUTO_ONLY",
            source_subnetwork_ip_ranges_to_nat="ALL_SUBNETWORKS_ALL_IP_RANGES")])

    routers.insert(project=PROJECT, region="us-central1", router_resource=router("one")).result()
    with pytest.raises(exceptions.BadRequest, match="only NAT of the network"):
        routers.insert(project=PROJECT, region="us-central1", router_resource=router("two"))
    # Another region is another matter.
    routers.insert(project=PROJECT, region="us-east5", router_resource=router("two")).result()
    with pytest.raises(exceptions.BadRequest, match="resourceInUseByAnotherResource|already being used"):
        Clients(emulator=gcp.address).compute("NetworksClient").delete(project=PROJECT, network="default")


def test_a3_high_plan_names_the_tcpx_kernel_it_cannot_install_unless_an_image_is_given():
    assert any("linux-gcp-tcpx" in n for n in make("a3-highgpu-8g").notes)
    custom = "projects/my-proj/global/images/family/a3-tcpx"
    assert not any("linux-gcp-tcpx" in n for n in make("a3-highgpu-8g", image=custom).notes)
    assert not any("linux-gcp-tcpx" in n for n in make("a3-megagpu-8g").notes)


def test_gpu_nic_families_on_the_default_network_are_told_its_mtu_is_not_cluster_toolkits():
    assert any("MTU-8244 VPC" in n for n in make("a3-megagpu-8g").notes)
    assert not any("MTU-8244 VPC" in n for n in make("a3-megagpu-8g", network="sysnet").notes)
    assert not any("MTU" in n for n in make("a2-highgpu-8g").notes)


@pytest.mark.parametrize(("machine_type", "image", "args"), [
    ("a3-highgpu-8g", "gpudirect-tcpx/nccl-plugin-gpudirecttcpx-dev:v3.1.9", "install"),
    ("a3-megagpu-8g", "gpudirect-tcpxo/nccl-plugin-gpudirecttcpx-dev:v1.0.15", "install --install-nccl"),
])
def test_startup_script_runs_the_flavours_plugin_installer_as_slurm_gcp_does(machine_type, image, args):
    script = meta(make(machine_type).instance_properties)["startup-script"]
    assert f"INSTALLER_IMAGE=us-docker.pkg.dev/gce-ai-infra/{image}\n" in script
    assert f'docker run --rm --network=host --volume /var/lib:/var/lib "$INSTALLER_IMAGE" {args} \\\n' in script


@pytest.mark.parametrize(("machine_type", "refused"), [
    ("a2-highgpu-8g", "hyperdisk-balanced"), ("g2-standard-48", "pd-extreme"), ("a3-highgpu-8g", "hyperdisk-extreme"),
    ("a3-megagpu-8g", "pd-extreme"), ("a3-ultragpu-8g", "pd-ssd"), ("a4-highgpu-8g", "hyperdisk-extreme"),
])
def test_every_family_refuses_a_boot_disk_type_outside_its_list_in_the_tool_and_the_emulator(gcp, machine_type,
                                                                                              refused):
    from gcpgpu.errors import UsageProblem

    with pytest.raises(UsageProblem, match=f"--boot-disk-type '{refused}': {machine_type} boots from"):
        make(machine_type, boot_disk_type=refused)
    body = _instance(machine_type, refused, [{"network": "global/networks/default"}])
    body["machineType"] = f"zones/{ZONE[machine_type]}/machineTypes/{machine_type}"
    error = _insert(gcp, body, zone=ZONE[machine_type])
    assert error and f"[{refused}, {machine_type}] features are not compatible for creating instance." in error
