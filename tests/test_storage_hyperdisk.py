"""cluster up --hyperdisk-ml gs://BUCKET/PREFIX on the emulator (issue 41): a hyperdisk-ml disk in the nodes'
zone, filled from the bucket by a loader VM, switched to READ_ONLY_MANY and attached read-only to every node;
jobs read the data at /data and cannot write there; `down` (and a failed up's roll-back) leave nothing."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from helpers import PROJECT, clients, job_logs_of, leftovers, make_plan

from gcpgpu.cli import main
from gcpgpu.cluster.apply import Cluster
from gcpgpu.cluster.session import Reporter
from gcpgpu.errors import CloudError
from gcpgpu.gcp.clients import Clients

UP = ["cluster", "up", "c", "--machine-type", "a2-highgpu-1g", "--nodes", "2", "--zone", "us-central1-a", "--yes"]
DISK = f"projects/{PROJECT}/zones/us-central1-a/disks/c-hdml"


def cli(*argv: str):
    return CliRunner().invoke(main, ["--project", PROJECT, *argv])


@pytest.fixture
def bucket(gcp):
    b = Clients(emulator=gcp.address, project=PROJECT).storage().create_bucket("hdml-data")
    b.blob("data/shard-0.txt").upload_from_string("tokens of shard zero")
    b.blob("data/sub/shard-1.txt").upload_from_string("tokens of shard one")
    b.blob("other/not-copied.txt").upload_from_string("outside the prefix")
    return b


def _meta(gcp, node: str) -> dict[str, str]:
    inst = gcp.compute.get(PROJECT, "zones/us-central1-a/instances", node)
    return {i["key"]: i["value"] for i in inst["metadata"]["items"]}


def test_up_fills_a_hyperdisk_ml_from_the_bucket_jobs_read_it_read_only_and_down_leaves_nothing(gcp, bucket):
    result = cli(*UP, "--hyperdisk-ml", "gs://hdml-data/data")
    assert result.exit_code == 0, result.output
    assert "loader VM c-hdml-loader" in result.output, result.output
    disk = gcp.compute.get(PROJECT, "zones/us-central1-a/disks", "c-hdml")
    assert disk["type"].endswith("/diskTypes/hyperdisk-ml") and disk["accessMode"] == "READ_ONLY_MANY"
    assert disk["sizeGb"] == "4" and disk["labels"]["gcpgpu-cluster"] == "c"
    names = [i["name"] for i in gcp.compute.list(PROJECT, "zones/us-central1-a/instances")]
    assert sorted(names) == ["c-0", "c-1"]  # the loader VM is gone
    for node in ("c-0", "c-1"):
        inst = gcp.compute.get(PROJECT, "zones/us-central1-a/instances", node)
        held = [d for d in inst["disks"] if d["source"].endswith("/" + DISK)]
        assert [(d["mode"], d["deviceName"]) for d in held] == [("READ_ONLY", "gcpgpu-hdml")]
        assert json.loads(_meta(gcp, node)["gcpgpu-storage"]) == [
            {"kind": "hyperdisk-ml", "name": DISK, "path": "/data", "export": None, "device": "gcpgpu-hdml",
             "ro": True}]

    script = ('cat /data/shard-0.txt /data/sub/shard-1.txt; ls /data/other 2>/dev/null || echo no-other; '
              'if echo x > /data/written 2>/dev/null; then echo "rank $NODE_RANK wrote"; '
              'else echo "rank $NODE_RANK read-only"; fi')
    logs = job_logs_of(script)
    for node, rank in (("c-0", 0), ("c-1", 1)):
        mine = [line for line in logs.splitlines() if line.startswith(f"[{node}]")]
        assert any("tokens of shard zero" in line for line in mine), logs
        assert any("tokens of shard one" in line for line in mine), logs
        assert any(f"rank {rank} read-only" in line for line in mine), logs
    assert "wrote" not in logs and "outside the prefix" not in logs

    again = cli(*UP, "--hyperdisk-ml", "gs://hdml-data/data")  # a re-run finds the filled disk: no second loader
    assert again.exit_code == 0, again.output
    assert "Creating hyperdisk-ml" not in again.output and "Copying" not in again.output

    down = cli("cluster", "down", "c", "--yes")
    assert down.exit_code == 0, down.output
    assert leftovers(gcp) == {}


def test_a_prefix_with_no_objects_fails_up_and_leaves_nothing(gcp, bucket):
    result = cli(*UP, "--hyperdisk-ml", "gs://hdml-data/nothing-here")
    assert result.exit_code != 0
    assert "--hyperdisk-ml gs://hdml-data/nothing-here: no objects under that prefix" in result.output, result.output
    assert leftovers(gcp) == {}


class _AtStep(Reporter):
    def __init__(self, text: str, fn) -> None:
        self.text, self.fn = text, fn

    def step(self, key: str, text: str) -> None:
        if key == "storage" and text.startswith(self.text):
            self.fn()


def test_a_failed_fill_takes_back_the_disk_and_the_loader_vm(gcp, bucket):
    import shutil

    def lose_the_data() -> None:  # gone between sizing the disk and the loader's copy: the copy reports an error
        shutil.rmtree(gcp.jobs.agent.storage.root / "gcs" / "hdml-data" / "data")

    plan = make_plan(machine_type="a2-highgpu-1g", zones=["us-central1-a"], hyperdisk_ml="gs://hdml-data/data")
    with pytest.raises(CloudError, match="the loader VM reported error: no objects under gs://hdml-data/data"):
        Cluster(clients(gcp), PROJECT, _AtStep("Copying", lose_the_data)).up(plan)
    assert leftovers(gcp) == {}


def test_down_deletes_a_loader_vm_and_disk_an_interrupted_up_left(gcp, bucket):
    def interrupt() -> None:
        raise KeyboardInterrupt

    plan = make_plan(machine_type="a2-highgpu-1g", zones=["us-central1-a"], hyperdisk_ml="gs://hdml-data/data")
    with pytest.raises(KeyboardInterrupt):
        Cluster(clients(gcp), PROJECT, _AtStep("Deleting loader VM", interrupt)).up(plan)
    assert gcp.compute.get(PROJECT, "zones/us-central1-a/instances", "c-hdml-loader")["status"] == "RUNNING"
    down = cli("cluster", "down", "c", "--yes")
    assert down.exit_code == 0, down.output
    assert "Deleting loader VM c-hdml-loader" in down.output and "Deleting hyperdisk-ml disk c-hdml" in down.output
    assert leftovers(gcp) == {}


def test_the_disk_is_sized_from_the_data_with_headroom_within_googles_range():
    from gcpgpu.storage.hyperdisk import size_gib

    assert size_gib(1, "gs://x/y") == 4  # Google's smallest Hyperdisk ML
    assert size_gib(100 * 2**30, "gs://x/y") == 120
    with pytest.raises(CloudError, match="does not fit a Hyperdisk ML volume"):
        size_gib(60 * 2**40, "gs://x/y")
