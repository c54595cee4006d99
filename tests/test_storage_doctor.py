"""`cluster doctor --active` on shared file systems: each node's rates against the tier's promise."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from helpers import PROJECT, clients

from gcpgpu.cli import main
from gcpgpu.cluster.diagnose import Diagnosis, judge_storage
from gcpgpu.cluster.observe import ranked_nodes
from gcpgpu.storage import rates


def test_a_rate_below_half_a_nodes_share_of_the_promise_is_named_and_a_missing_mount_too():
    promise = {"/shared": rates.Promise(read_mib_s=260.0, write_mib_s=88.0, what="filestore ZONAL 1,024 GiB")}
    measured = rates.parse("/shared=w:10.5,r:200")
    assert measured == {"/shared": {"w": 10.5, "r": 200.0}}
    assert rates.judge(measured, promise, nodes=2) == [
        "/shared write 10.5 MiB/s, expected about 44 (filestore ZONAL 1,024 GiB over 2 node(s))"]
    assert rates.judge(rates.parse("/shared=w:30,r:100"), promise, nodes=2) == []  # above half of 44 and 130
    assert rates.judge({}, promise, nodes=2) == ["/shared: not measured (not mounted?)"]
    assert rates.cell(rates.parse("/shared=w:-,r:88.4")) == "/shared w - r 88"


def test_the_doctor_reads_the_promise_from_the_instance_the_nodes_mount(gcp, monkeypatch):
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", PROJECT)
    up = CliRunner().invoke(main, ["cluster", "up", "c", "--machine-type", "a2-highgpu-1g", "--nodes", "2",
                                   "--zone", "us-central1-a", "--filestore", "2TiB", "--yes"])
    assert up.exit_code == 0, up.output
    nodes = ranked_nodes(clients(gcp), PROJECT, "c")
    slow = Diagnosis("c-0", 0, {"storage": "/shared=w:20,r:500"})
    fine = Diagnosis("c-1", 1, {"storage": "/shared=w:90,r:500"})
    judge_storage(clients(gcp), nodes, [slow, fine])
    # ZONAL 2 TiB promises 176 MiB/s of writes: 88 per node when both measure at once.
    assert slow.storage == ["/shared write 20 MiB/s, expected about 88 (filestore ZONAL 2,048 GiB over 2 node(s))"]
    assert fine.storage == [] and slow.problems == []  # never a reason for `up --check` to replace the node
    assert slow.row()["verdict"].startswith("/shared write 20") and fine.row()["verdict"] == "healthy"
    assert CliRunner().invoke(main, ["cluster", "down", "c", "--yes"]).exit_code == 0


@pytest.mark.parametrize("value", ["", None, "garbage", "/x=w:fast"])
def test_a_report_that_is_not_rates_reads_as_nothing_measured(value):
    parsed = rates.parse(value)
    assert all(v is None for r in parsed.values() for v in r.values())
