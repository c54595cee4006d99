"""cluster up/down against the emulator, through the real google-cloud-compute client."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from helpers import PROJECT, leftovers, make_plan

from gcpgpu.cli import main
from gcpgpu.cluster.apply import Cluster, NoCapacity, QuotaExceeded, Reporter
from gcpgpu.gcp.clients import Clients


@pytest.mark.parametrize(("machine_type", "gpu_nics"), [("a2-highgpu-8g", 0), ("a3-highgpu-8g", 4), ("a3-megagpu-8g", 8)])
def test_up_creates_each_familys_resources_and_down_removes_them(gcp, cluster, machine_type, gpu_nics):
    nodes = cluster.up(make_plan(machine_type=machine_type, nodes=3))
    assert [n.name for n in nodes] == ["c-0", "c-1", "c-2"]
    assert all(n.status == "RUNNING" and n.gpus == 8 for n in nodes)
    assert [n.rank for n in nodes] == [0, 1, 2]
    assert all(n.labels["gcpgpu-rank"] == str(n.rank) for n in nodes)

    inst = gcp.compute.get(PROJECT, "zones/us-central1-a/instances", "c-1")
    assert len(inst["networkInterfaces"]) == gpu_nics + 1
    assert inst["scheduling"]["onHostMaintenance"] == "TERMINATE"
    assert inst["resourcePolicies"][0].endswith("/regions/us-central1/resourcePolicies/c-placement")
    assert "accessConfigs" not in inst["networkInterfaces"][0]
    assert len(leftovers(gcp).get("networks", [])) == gpu_nics
    # All nodes in ONE bulkInsert, not N inserts.
    assert len(gcp.requests.all(method="POST", contains="/instances/bulkInsert")) == 1
    assert gcp.requests.all(method="POST", contains="/zones/us-central1-a/instances?") == []

    cluster.down("c")
    assert leftovers(gcp) == {}


def test_stockout_in_first_zone_succeeds_in_the_second_leaving_nothing_in_the_first(gcp, cluster):
    gcp.faults.stockout("us-central1-a", "a3-highgpu-8g")
    nodes = cluster.up(make_plan(nodes=4))
    assert {n.zone for n in nodes} == {"us-central1-b"}
    assert gcp.compute.list(PROJECT, "zones/us-central1-a/instances") == []
    assert len(gcp.requests.all(method="POST", contains="/instances/bulkInsert")) == 2


def test_stockout_with_a_created_reservation_moves_the_reservation_too(gcp, cluster):
    gcp.faults.stockout("us-central1-a", "a3-highgpu-8g")
    cluster.up(make_plan(nodes=2, create_reservation=True))
    assert gcp.compute.list(PROJECT, "zones/us-central1-a/reservations") == []
    res = gcp.compute.get(PROJECT, "zones/us-central1-b/reservations", "c-res")
    assert res["specificReservation"]["inUseCount"] == "2"
    cluster.down("c")
    assert leftovers(gcp) == {}


def test_every_zone_stocked_out_fails_clearly_and_leaves_nothing(gcp, cluster):
    for zone in ("us-central1-a", "us-central1-b", "us-central1-c"):
        gcp.faults.stockout(zone, "a3-highgpu-8g")
    with pytest.raises(NoCapacity, match="us-central1-a, us-central1-b, us-central1-c"):
        cluster.up(make_plan(nodes=2))
    assert leftovers(gcp) == {}


def test_quota_error_names_quota_limit_and_usage_and_leaves_nothing(gcp, cluster):
    gcp.faults.set_quota("us-central1", "NVIDIA_H100_GPUS", 24)
    with pytest.raises(QuotaExceeded) as err:
        cluster.up(make_plan(nodes=4))
    msg = err.value.message
    assert "NVIDIA_H100_GPUS" in msg and "limit 24" in msg and "in use 0" in msg and "needs 32" in msg
    assert "console.cloud.google.com/iam-admin/quotas" in msg
    assert leftovers(gcp) == {}


def test_transient_503s_still_succeed_without_duplicate_vms(gcp, cluster):
    gcp.faults.update({"error_rate": 0.3, "error_codes": [503], "seed": 7})
    nodes = cluster.up(make_plan(machine_type="a2-highgpu-8g", nodes=8))
    assert len(nodes) == 8
    gcp.faults.update({"error_rate": 0.0})
    assert sorted(i["name"] for i in gcp.compute.list(PROJECT, "zones/us-central1-a/instances")) == sorted(
        f"c-{r}" for r in range(8))
    assert any(r.status == 503 for r in gcp.requests.all())  # the faults really fired
    cluster.down("c")
    assert leftovers(gcp) == {}


class InterruptAt(Reporter):
    def __init__(self, key: str) -> None:
        self.key = key

    def step(self, key: str, text: str) -> None:
        if key == self.key:
            raise KeyboardInterrupt


@pytest.mark.parametrize("phase", ["observe", "policy", "networks", "subnets", "reservation", "instances", "labels",
                                   "running"])
def test_ctrl_c_at_any_phase_then_down_leaves_zero_resources(gcp, phase):
    clients = Clients(emulator=gcp.address)
    with pytest.raises(KeyboardInterrupt):
        Cluster(clients, PROJECT, InterruptAt(phase)).up(make_plan(nodes=2, create_reservation=True))
    Cluster(clients, PROJECT).down("c")
    assert leftovers(gcp) == {}


def test_rerunning_up_reconciles_instead_of_duplicating(gcp, cluster):
    p = make_plan(nodes=3)
    cluster.up(p)
    gcp.compute.delete(PROJECT, "zones/us-central1-a/instances", "c-1")
    before = len(gcp.requests.all(method="POST"))
    nodes = cluster.up(p)
    assert [n.name for n in nodes] == ["c-0", "c-1", "c-2"]
    posts = gcp.requests.all(method="POST")[before:]
    inserts = [r for r in posts if "/bulkInsert" in r.path or r.path.endswith(("/networks", "/resourcePolicies"))]
    assert [r.path.rsplit("/", 1)[-1] for r in inserts] == ["bulkInsert"]  # only the missing node, nothing shared


def test_up_after_interrupted_up_resumes(gcp):
    clients = Clients(emulator=gcp.address)
    with pytest.raises(KeyboardInterrupt):
        Cluster(clients, PROJECT, InterruptAt("instances")).up(make_plan(nodes=2))
    nodes = Cluster(clients, PROJECT).up(make_plan(nodes=2))
    assert [n.status for n in nodes] == ["RUNNING", "RUNNING"]


def test_down_after_down_and_of_unknown_cluster_is_fine(gcp, cluster):
    cluster.up(make_plan(machine_type="a2-highgpu-1g", nodes=1))
    assert not cluster.down("c").empty
    assert cluster.down("c").empty
    assert cluster.down("never-existed").empty


def test_down_keeps_user_resources_that_share_the_prefix(gcp, cluster):
    """Only resources carrying the cluster's marker are deleted, never a user's look-alike."""
    from google.cloud import compute_v1

    cluster.up(make_plan(machine_type="a2-highgpu-1g", nodes=1))
    net = compute_v1.Network(name="c-gpunet-9", auto_create_subnetworks=False)
    Clients(emulator=gcp.address).compute("NetworksClient").insert(project=PROJECT, network_resource=net).result()
    cluster.down("c")
    assert leftovers(gcp) == {"networks": ["c-gpunet-9"]}


def test_keep_reservation(gcp, cluster):
    cluster.up(make_plan(nodes=2, create_reservation=True))
    cluster.down("c", keep_reservation=True)
    # The kept reservation holds its compact placement policy, so both stay; everything else goes.
    assert leftovers(gcp) == {"reservations": ["c-res"], "resourcePolicies": ["c-placement"]}


def test_consuming_an_existing_reservation_that_is_too_small_fails_without_leftovers(gcp, cluster):
    from google.cloud import compute_v1

    res = compute_v1.Reservation(name="mine", specific_reservation=compute_v1.AllocationSpecificSKUReservation(
        count=1, instance_properties=compute_v1.AllocationSpecificSKUAllocationReservedInstanceProperties(
            machine_type="a3-highgpu-8g")))
    Clients(emulator=gcp.address).compute("ReservationsClient").insert(
        project=PROJECT, zone="us-central1-a", reservation_resource=res).result()
    with pytest.raises(Exception, match="RESERVATION_CAPACITY_EXCEEDED|reservation"):
        cluster.up(make_plan(nodes=2, reservation="mine", zones=["us-central1-a"]))
    assert leftovers(gcp) == {"reservations": ["mine"]}


def test_cli_up_status_list_down(gcp, monkeypatch):
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", PROJECT)
    runner = CliRunner()
    up = runner.invoke(main, ["cluster", "up", "demo", "--machine-type", "a2-highgpu-1g", "--nodes", "2",
                              "--region", "us-central1", "--yes"])
    assert up.exit_code == 0, up.output
    assert "demo-1" in up.stdout and "RUNNING" in up.stdout
    listing = runner.invoke(main, ["--format", "json", "cluster", "list"])
    assert '"cluster": "demo"' in listing.stdout and '"gpus": 2' in listing.stdout
    status = runner.invoke(main, ["--format", "yaml", "cluster", "status", "demo"])
    assert "placementPolicies" in status.stdout
    assert "routers:\n- name: demo-nat\n  region: us-central1\n" in status.stdout  # the nodes' Cloud NAT
    down = runner.invoke(main, ["cluster", "down", "demo", "--yes"])
    assert down.exit_code == 0, down.output
    assert leftovers(gcp) == {}
    missing = runner.invoke(main, ["cluster", "status", "demo"])
    assert missing.exit_code == 1 and "no cluster named demo" in missing.output


def test_cli_up_refuses_without_yes_when_not_interactive(gcp, monkeypatch):
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", PROJECT)
    result = CliRunner().invoke(main, ["cluster", "up", "demo", "--machine-type", "a2-highgpu-1g", "--region",
                                       "us-central1"])
    assert result.exit_code == 2 and "--yes" in result.output
    assert len(gcp.requests) == 0


def test_cli_down_deletes_the_clusters_dashboards(gcp, monkeypatch):
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", PROJECT)
    runner = CliRunner()
    assert runner.invoke(main, ["cluster", "up", "dash", "--machine-type", "a2-highgpu-1g", "--region", "us-central1",
                                "--yes"]).exit_code == 0
    made = runner.invoke(main, ["metrics", "dashboard", "create", "--cluster", "dash"])
    assert made.exit_code == 0, made.output
    from gcpgpu.metrics import dashboard

    clients = Clients(emulator=gcp.address)
    assert len(dashboard.find(clients, PROJECT, "dash")) == 1
    down = runner.invoke(main, ["cluster", "down", "dash", "--yes"])
    assert down.exit_code == 0 and "Deleted 1 dashboard" in down.output
    assert dashboard.find(clients, PROJECT, "dash") == []


def test_cli_up_fails_over_a_bulk_stockout_to_the_next_zone(gcp, monkeypatch):
    # Zone a holds one of the two VMs asked for: its bulkInsert fails with the summary code
    # VM_MIN_COUNT_NOT_REACHED alone (the cause is on the per-VM inserts), which must count as
    # capacity, not as a permanent error that ends `up`.
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", PROJECT)
    gcp.faults.set_capacity("us-central1-a", "a2-highgpu-1g", 1)
    up = CliRunner().invoke(main, ["cluster", "up", "demo", "--machine-type", "a2-highgpu-1g", "--nodes", "2",
                                   "--region", "us-central1", "--yes"])
    assert up.exit_code == 0, up.output
    assert "us-central1-b" in up.stdout
    bulk_ops = gcp.compute.list_operations(PROJECT, "zones/us-central1-a", "operationType = bulkInsert")
    assert [o["error"]["errors"][0]["code"] for o in bulk_ops] == ["VM_MIN_COUNT_NOT_REACHED"]
    assert gcp.compute.list(PROJECT, "zones/us-central1-a/instances") == []
    assert sorted(i["name"] for i in gcp.compute.list(PROJECT, "zones/us-central1-b/instances")) == ["demo-0", "demo-1"]


def test_a_global_gpu_quota_is_counted_in_gpus_and_named_global(gcp, cluster):
    """GPUS_ALL_REGIONS is a project-wide GPU count: the message said vCPUs and a region (issue 27)."""
    gcp.faults.set_quota("global", "GPUS_ALL_REGIONS", 16)
    with pytest.raises(QuotaExceeded) as err:
        cluster.up(make_plan(nodes=4))
    msg = err.value.message
    assert "quota GPUS_ALL_REGIONS (global: all regions together)" in msg, msg
    assert "us-central1" not in msg and "limit 16" in msg and "needs 32 more GPUs" in msg, msg
    assert leftovers(gcp) == {}


def test_a_cpu_quota_is_counted_in_vcpus(gcp, cluster):
    gcp.faults.set_quota("us-central1", "CPUS", 300)
    with pytest.raises(QuotaExceeded) as err:
        cluster.up(make_plan(nodes=2))
    assert "quota CPUS in us-central1" in err.value.message and "needs 416 more vCPUs" in err.value.message
