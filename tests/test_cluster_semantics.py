"""cluster up semantics real GCP has (issue 14): reservations with their own placement policy,
growing and shrinking, topology-aware ranks, flex-start queueing, IAP ssh. All through the CLI
against the emulator."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from test_cluster_apply import PROJECT, leftovers

from gcpgpu.cli import main
from gcpgpu.gcp.clients import Clients


@pytest.fixture
def cli(gcp, monkeypatch):
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", PROJECT)
    runner = CliRunner()

    def run(*args: str, code: int = 0):
        result = runner.invoke(main, list(args))
        assert result.exit_code == code, result.output
        return result

    return run


def _user_reservation(gcp, name: str, zone: str, count: int, machine_type: str, policy: str | None) -> None:
    """A reservation bought outside gcpgpu, optionally with its own compact placement policy."""
    from google.cloud import compute_v1

    clients = Clients(emulator=gcp.address)
    region = zone.rsplit("-", 1)[0]
    res = compute_v1.Reservation(name=name, specific_reservation_required=True,
                                 specific_reservation=compute_v1.AllocationSpecificSKUReservation(
        count=count, instance_properties=compute_v1.AllocationSpecificSKUAllocationReservedInstanceProperties(
            machine_type=machine_type)))
    if policy:
        clients.compute("ResourcePoliciesClient").insert(
            project=PROJECT, region=region, resource_policy_resource=compute_v1.ResourcePolicy(
                name=policy, group_placement_policy=compute_v1.ResourcePolicyGroupPlacementPolicy(
                    collocation="COLLOCATED"))).result()
        res.resource_policies = {"placement": f"projects/{PROJECT}/regions/{region}/resourcePolicies/{policy}"}
    clients.compute("ReservationsClient").insert(project=PROJECT, zone=zone, reservation_resource=res).result()


# ---------------------------------------------------------------------------------- item 2
def test_reservation_with_its_own_placement_policy_is_used_and_no_second_policy_made(gcp, cli):
    _user_reservation(gcp, "sold", "us-central1-b", 2, "a3-highgpu-8g", policy="sold-compact")
    up = cli("cluster", "up", "r", "--machine-type", "a3-highgpu-8g", "--nodes", "2", "--region", "us-central1",
             "--reservation", "sold", "--yes")
    assert "carries placement policy sold-compact" in up.output
    policies = {p["name"] for p in gcp.compute.list(PROJECT, "regions/us-central1/resourcePolicies")}
    assert policies == {"sold-compact"}  # no r-placement beside it
    for node in ("r-0", "r-1"):
        inst = gcp.compute.get(PROJECT, "zones/us-central1-b/instances", node)
        assert [p.rsplit("/", 1)[-1] for p in inst["resourcePolicies"]] == ["sold-compact"]
    res = gcp.compute.get(PROJECT, "zones/us-central1-b/reservations", "sold")
    assert res["specificReservation"]["inUseCount"] == "2"
    cli("cluster", "down", "r", "--yes")
    assert leftovers(gcp) == {"reservations": ["sold"], "resourcePolicies": ["sold-compact"]}


def test_emulator_refuses_a_second_placement_policy_on_a_reservation_that_has_one(gcp):
    from gcpgpu.cluster.apply import Cluster
    from gcpgpu.cluster.plan import plan
    from gcpgpu.cluster.spec import ClusterSpec

    _user_reservation(gcp, "sold", "us-central1-a", 2, "a3-highgpu-8g", policy="sold-compact")
    p = plan(ClusterSpec(name="r", machine_type="a3-highgpu-8g", nodes=2, reservation="sold",
                         zones=["us-central1-a"]).validate(), PROJECT)
    c = Cluster(Clients(emulator=gcp.address), PROJECT)
    c._adopt_reservation = lambda plan: None  # the old behaviour: attach our own policy too
    with pytest.raises(Exception, match="cannot name another placement policy"):
        c.up(p)
    assert leftovers(gcp) == {"reservations": ["sold"], "resourcePolicies": ["sold-compact"]}


def test_reservation_without_a_policy_still_gets_ours(gcp, cli):
    _user_reservation(gcp, "plain", "us-central1-a", 2, "a3-highgpu-8g", policy=None)
    cli("cluster", "up", "p", "--machine-type", "a3-highgpu-8g", "--nodes", "2", "--zone", "us-central1-a",
        "--reservation", "plain", "--yes")
    inst = gcp.compute.get(PROJECT, "zones/us-central1-a/instances", "p-0")
    assert [x.rsplit("/", 1)[-1] for x in inst["resourcePolicies"]] == ["p-placement"]
