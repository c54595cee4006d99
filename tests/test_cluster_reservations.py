"""Issue 28: `cluster up --reservation` on DENSE (reservation-bound) capacity and its blocks, against
the emulator through the CLI. The reservation is made the way Google's clients make it (compute_v1)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from helpers import PROJECT, leftovers

from gcpgpu.cli import main
from gcpgpu.gcp.clients import Clients

ZONE = "us-central1-b"
MT = "a3-ultragpu-8g"


@pytest.fixture
def cli(gcp, monkeypatch):
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", PROJECT)
    runner = CliRunner()

    def run(*args: str, code: int = 0):
        result = runner.invoke(main, list(args))
        assert result.exit_code == code, result.output
        return result

    return run


def dense_reservation(gcp, name: str, count: int, machine_type: str = MT, zone: str = ZONE) -> None:
    from google.cloud import compute_v1

    res = compute_v1.Reservation(name=name, specific_reservation_required=True, deployment_type="DENSE",
                                 specific_reservation=compute_v1.AllocationSpecificSKUReservation(
        count=count, instance_properties=compute_v1.AllocationSpecificSKUAllocationReservedInstanceProperties(
            machine_type=machine_type)))
    Clients(emulator=gcp.address).compute("ReservationsClient").insert(
        project=PROJECT, zone=zone, reservation_resource=res).result()


def _up(cli, name: str, reservation: str, nodes: int = 2, code: int = 0, machine_type: str = MT):
    return cli("cluster", "up", name, "--machine-type", machine_type, "--nodes", str(nodes), "--zone", ZONE,
               "--reservation", reservation, "--yes", code=code)


def test_up_on_a_dense_reservation_is_reservation_bound_and_lands_in_the_block_asked(gcp, cli):
    dense_reservation(gcp, "sold", 80)  # two blocks on the emulator's fabric (64 + 16)
    blocks = gcp.compute.list_reservation_blocks(PROJECT, ZONE, "sold")
    second = blocks[1]["name"]
    up = _up(cli, "d", f"sold/reservationBlocks/{second}")
    assert "RESERVATION_BOUND" in up.output
    for node in ("d-0", "d-1"):
        inst = gcp.compute.get(PROJECT, f"zones/{ZONE}/instances", node)
        assert inst["scheduling"]["provisioningModel"] == "RESERVATION_BOUND"
        assert inst["scheduling"]["instanceTerminationAction"] == "DELETE"
        assert inst["resourceStatus"]["reservationConsumptionInfo"]["consumedReservationBlock"].endswith(
            f"/reservationBlocks/{second}")
        assert inst["resourceStatus"]["physicalHostTopology"]["block"] == blocks[1]["physicalTopology"]["block"]
    assert gcp.compute.get_reservation_block(PROJECT, ZONE, "sold", second)["inUseCount"] == 2
    assert "resourcePolicies" not in leftovers(gcp)  # the blocks place the nodes; no policy of ours
    cli("cluster", "down", "d", "--yes")
    assert leftovers(gcp) == {"reservations": ["sold"]}


def test_up_with_stop_as_termination_action_on_a_dense_reservation(gcp, cli):
    dense_reservation(gcp, "sold", 2)
    cli("cluster", "up", "d", "--machine-type", MT, "--nodes", "1", "--zone", ZONE, "--reservation", "sold",
        "--termination-action", "stop", "--yes")
    assert gcp.compute.get(PROJECT, f"zones/{ZONE}/instances", "d-0")["scheduling"]["instanceTerminationAction"] == "STOP"


@pytest.mark.parametrize("reservation,nodes,machine_type,says", [
    ("sold", 2, "a3-highgpu-8g", "holds a3-ultragpu-8g, not --machine-type a3-highgpu-8g"),
    ("sold", 5, MT, "4 of 4 VMs free in reservation sold, 5 needed"),
    ("sold/reservationBlocks/nope", 2, MT, "no reservation sold block nope in us-central1-b"),
])
def test_a_reservation_that_does_not_fit_stops_before_anything_is_created(gcp, cli, reservation, nodes,
                                                                          machine_type, says):
    dense_reservation(gcp, "sold", 4)
    out = _up(cli, "d", reservation, nodes=nodes, code=2, machine_type=machine_type).output
    errors = [line for line in out.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and says in errors[0], out
    assert leftovers(gcp) == {"reservations": ["sold"]}


@pytest.mark.parametrize("bad", ["sold/blocks/b1", "sold/reservationBlocks/", "sold/reservationBlocks/b/sub",
                                 "Sold", "sold/reservationBlocks/b/reservationSubBlocks/s/x"])
def test_a_malformed_block_path_is_refused_with_no_api_call(gcp, cli, bad):
    out = _up(cli, "d", bad, code=2).output
    assert "must be NAME, NAME/reservationBlocks/BLOCK or" in out
    assert gcp.compute.project(PROJECT).collections.get(f"zones/{ZONE}/instances", {}) == {}


def test_cluster_status_shows_a_nodes_upcoming_maintenance(gcp, cli):
    import json

    dense_reservation(gcp, "sold", 2)
    _up(cli, "m", "sold")
    gcp.faults.update({"maintenance": "m-1@3h"})
    out = cli("cluster", "status", "m").output
    assert "maintenance: m-1 scheduled PENDING, window " in out and "m-0 scheduled" not in out
    rows = json.loads(cli("--format", "json", "cluster", "status", "m").stdout)["nodes"]
    assert [bool(r.get("maintenance")) for r in rows] == [False, True]


def test_plan_says_a_reservation_may_make_the_nodes_reservation_bound(cli):
    out = cli("cluster", "plan", "x", "--machine-type", MT, "--zone", ZONE, "--reservation", "myres").output
    assert "a DENSE or calendar-mode one makes the nodes RESERVATION_BOUND" in out


def test_up_on_a_sub_block_lands_every_node_in_it(gcp, cli):
    dense_reservation(gcp, "sold", 20)  # one block: sub-blocks of 16 and 4 hosts
    block = gcp.compute.list_reservation_blocks(PROJECT, ZONE, "sold")[0]["name"]
    from gcpgpu.cluster import reservations

    subs = reservations.blocks(Clients(emulator=gcp.address), PROJECT, ZONE, "sold")[0]["sub_blocks"]
    second = subs[1]["name"]
    _up(cli, "s", f"sold/reservationBlocks/{block}/reservationSubBlocks/{second}")
    for node in ("s-0", "s-1"):
        info = gcp.compute.get(PROJECT, f"zones/{ZONE}/instances", node)["resourceStatus"]["reservationConsumptionInfo"]
        assert info["consumedReservationSubBlock"].endswith(f"/reservationSubBlocks/{second}"), info
    got = reservations.blocks(Clients(emulator=gcp.address), PROJECT, ZONE, "sold")[0]["sub_blocks"]
    assert [(s["name"], s["in_use"]) for s in got] == [(subs[0]["name"], 0), (second, 2)]
    # The sub-block's own room is checked before any create: 2 of its 4 are left.
    out = _up(cli, "t", f"sold/reservationBlocks/{block}/reservationSubBlocks/{second}", nodes=3, code=2).output
    assert "2 of 4 VMs free in reservation sold block" in out and f"sub-block {second}" in out
