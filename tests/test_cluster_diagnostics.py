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
