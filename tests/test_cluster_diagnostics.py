"""Issue 28: `cluster doctor --active` names a node with a bad GPU and a node with a slow GPU NIC,
injected as emulator faults (gpu_fault=NODE, slow_nic=NODE)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from helpers import PROJECT

from gcpgpu.cli import main

MT = "a3-megagpu-8g"


@pytest.fixture
def cli(gcp, monkeypatch):
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", PROJECT)
    runner = CliRunner()

    def run(*args: str, code: int = 0):
        result = runner.invoke(main, list(args))
        assert result.exit_code == code, result.output
        return result

    return run


@pytest.fixture
def cluster(cli):
    cli("cluster", "up", "h", "--machine-type", MT, "--nodes", "3", "--zone", "us-central1-a", "--yes")
    return "h"


def test_a_healthy_cluster_passes_active_diagnostics(gcp, cli, cluster):
    out = cli("--format", "json", "cluster", "doctor", cluster, "--active").stdout
    assert "healthy" in out


def test_active_doctor_names_the_node_and_gpu_that_fail_diagnostics(gcp, cli, cluster):
    cli("emulator", "faults", "--set", "gpu_fault=h-1")  # as a user arms it on a running emulator
    out = cli("cluster", "doctor", cluster, "--active", code=1).output
    error = [line for line in out.splitlines() if line.startswith("Error:")]
    assert len(error) == 1 and "h-1 (rank 1): GPU 3: dcgmi diag" in error[0], out
    assert "h-0" not in error[0] and "h-2" not in error[0]


def test_active_doctor_names_the_slow_nic_and_the_slow_cross_node_all_reduce(gcp, cli, cluster):
    cli("emulator", "faults", "--set", "slow_nic=h-2")
    out = cli("cluster", "doctor", cluster, "--active", code=1).output
    error = [line for line in out.splitlines() if line.startswith("Error:")]
    assert len(error) == 1 and "h-2 (rank 2): GPU NIC eth3" in error[0], out
    assert "cross-node all_reduce" in out and "slowed by h-2" in out


def test_up_check_replaces_the_node_that_fails_diagnostics_and_keeps_its_rank(gcp, cli):
    gcp.faults.update({"gpu_fault": ["c-1"]})
    out = cli("cluster", "up", "c", "--machine-type", MT, "--nodes", "3", "--zone", "us-central1-a",
              "--check", "--yes").output
    assert "replacing 1 node(s) that failed diagnostics: c-1 (rank 1): GPU 3" in out
    assert "diagnostics: all 3 node(s) healthy" in out
    labels = {n: gcp.compute.get(PROJECT, "zones/us-central1-a/instances", n)["labels"]["gcpgpu-rank"]
              for n in ("c-0", "c-1", "c-2")}
    assert labels == {"c-0": "0", "c-1": "1", "c-2": "2"}
    assert "healthy" in cli("cluster", "doctor", "c", "--active").output  # exit 0: the replacement is sound
    # The diagnostics request adds its key to each node's metadata and keeps the rest (the startup script):
    # `up` hands --check nodes read without metadata, and setMetadata replaces the whole document.
    for name in ("c-0", "c-1", "c-2"):
        keys = {i["key"] for i in gcp.compute.get(PROJECT, "zones/us-central1-a/instances", name)["metadata"]["items"]}
        assert {"startup-script", "gcpgpu-diag", "gcpgpu-cluster"} <= keys, (name, keys)


def test_up_check_keeps_ranks_that_differ_from_the_fabric_order(gcp, cli):
    """Ranks a running cluster carries (here swapped by hand, as a re-rank on real GCP can leave them)
    survive the replacement, although `up` re-ranks by fabric whenever it adds a node."""
    zone = "us-central1-a"
    cli("cluster", "up", "c", "--machine-type", MT, "--nodes", "3", "--zone", zone, "--yes")
    for name, rank in (("c-0", "2"), ("c-2", "0")):
        inst = gcp.compute.get(PROJECT, f"zones/{zone}/instances", name)
        gcp.compute.set_labels(PROJECT, zone, name, {"labels": {**inst["labels"], "gcpgpu-rank": rank},
                                                     "labelFingerprint": inst["labelFingerprint"]})
    gcp.clock.advance(60)
    gcp.faults.update({"gpu_fault": ["c-1"]})
    cli("cluster", "up", "c", "--machine-type", MT, "--nodes", "3", "--zone", zone, "--check", "--yes")
    ranks = {n: gcp.compute.get(PROJECT, f"zones/{zone}/instances", n)["labels"]["gcpgpu-rank"]
             for n in ("c-0", "c-1", "c-2")}
    assert ranks == {"c-0": "2", "c-1": "1", "c-2": "0"}


def test_up_check_gives_up_when_a_replacement_fails_too(gcp, cli, monkeypatch):
    from gcpgpu.cluster import check

    monkeypatch.setattr(check, "ROUNDS", 0)
    gcp.faults.update({"gpu_fault": ["c-0"]})
    out = cli("cluster", "up", "c", "--machine-type", MT, "--nodes", "2", "--zone", "us-central1-a",
              "--check", "--yes", code=1).output
    assert "still failing diagnostics after 0 replacement(s): c-0 (rank 0): GPU 3" in out


def test_repair_of_a_reservation_bound_node_reports_its_host_and_keeps_name_and_rank(gcp, cli):
    from test_cluster_reservations import dense_reservation

    dense_reservation(gcp, "sold", 2, machine_type="a3-ultragpu-8g", zone="us-central1-b")
    cli("cluster", "up", "r", "--machine-type", "a3-ultragpu-8g", "--nodes", "2", "--zone", "us-central1-b",
        "--reservation", "sold", "--yes")
    before = gcp.compute.get(PROJECT, "zones/us-central1-b/instances", "r-1")
    out = cli("cluster", "repair", "r", "--node", "1", "--yes").output
    assert "Reporting the host of r-1 (rank 1) as faulty" in out
    after = gcp.compute.get(PROJECT, "zones/us-central1-b/instances", "r-1")
    assert after["id"] == before["id"] and after["labels"]["gcpgpu-rank"] == "1"
    assert after["resourceStatus"]["physicalHost"] != before["resourceStatus"]["physicalHost"]


def test_repair_of_another_node_recreates_it_under_its_name_and_rank(gcp, cli, cluster):
    before = gcp.compute.get(PROJECT, "zones/us-central1-a/instances", "h-2")
    out = cli("cluster", "repair", "h", "--node", "2", "--yes").output
    assert "Re-creating h-2 (rank 2)" in out
    after = gcp.compute.get(PROJECT, "zones/us-central1-a/instances", "h-2")
    assert after["id"] != before["id"] and after["labels"]["gcpgpu-rank"] == "2"
    cli("cluster", "repair", "h", "--node", "7", "--yes", code=2)
