"""The network view on every A3/A4 family (issue 52): each node's own NIC counters, sampled by gcpgpu.node.nics
from the node's (fake) sysfs, written to Monitoring, and shown by `metrics tail` as GPU fabric apart from host.

The expected traffic is worked out here from what the job did: the parameters its trainer printed, the steps
its log reached (the emulator's step ledger), and a data-parallel ring's 2 (N - 1) / N x 4 bytes per parameter
per step; not from the code under test.
"""

from __future__ import annotations

import random

import pytest
from click.testing import CliRunner

from gcpgpu.cli import main

PROJECT = "test-proj"
GLOBAL = ["--project", PROJECT, "--region", "us-central1"]
NIC = "custom.googleapis.com/gcpgpu/nic/"


def cli(*argv: str):
    return CliRunner().invoke(main, [*GLOBAL, *argv])


@pytest.fixture(scope="module")
def text_file(tmp_path_factory: pytest.TempPathFactory) -> str:
    rng = random.Random(0)
    words = "the quick brown fox jumps over the lazy dog".split()
    path = tmp_path_factory.mktemp("data") / "small.txt"
    path.write_text("\n".join(" ".join(rng.choice(words) for _ in range(12)) for _ in range(2000)) + "\n")
    return str(path)


def up(gcp, machine_type: str, zone: str = "us-central1-a") -> None:
    extra: list[str] = []
    if machine_type.startswith(("a3-ultra", "a4-")):
        from test_cluster_reservations import dense_reservation

        dense_reservation(gcp, "sold", 2, machine_type=machine_type, zone=zone)
        extra = ["--reservation", "sold"]
    result = cli("cluster", "up", "c", "--machine-type", machine_type, "--nodes", "2", "--zone", zone, "--yes", *extra)
    assert result.exit_code == 0, result.output


def submit(text_file: str, steps: int = 100000) -> str:
    result = cli("job", "submit", "--cluster", "c", "--", "--model", "tiny", "--parallel", "ddp", "--precision",
                 "fp32", "--data", text_file, "--steps", str(steps), "--batch-size", "16", "--seq-len", "32",
                 "--log-every", "1")
    assert result.exit_code == 0, result.output
    return result.stdout.splitlines()[0]


def nic_points(gcp, key: str) -> dict[tuple[str, str, str], list[tuple[float, float]]]:
    """(node, nic, role) -> [(end time, value)] of one of the samplers' metrics, as written."""
    out = {}
    for s in gcp.monitoring.series.values():
        if s.metric_type == NIC + key:
            out[(s.metric_labels["node"], s.metric_labels["nic"], s.metric_labels["role"])] = [
                (p[1], p[2]) for p in s.points]
    return out
