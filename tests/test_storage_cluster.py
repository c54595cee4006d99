"""A cluster's shared file systems on the emulator (issue 41): made with `up` in the nodes' zone, named in
every node's gcpgpu-storage metadata, deleted by `down` (and only what `up` made)."""

from __future__ import annotations

import json

import helpers
import pytest
from click.testing import CliRunner
from helpers import PROJECT, clients, job_logs_of, leftovers, make_plan

from gcpgpu.cli import main
from gcpgpu.cluster.apply import Cluster
from gcpgpu.cluster.session import Reporter
from gcpgpu.errors import CloudError
from gcpgpu.gcp.clients import Clients

UP = ["cluster", "up", "c", "--machine-type", "a2-highgpu-1g", "--nodes", "2", "--zone", "us-central1-a", "--yes"]


def cli(*argv: str):
    return CliRunner().invoke(main, ["--project", PROJECT, *argv])


def _filestore(gcp):
    return Clients(emulator=gcp.address).filestore()


def _instances(gcp) -> dict[str, dict]:
    return {i.name: dict(i.labels) for i in _filestore(gcp).list_instances(parent=f"projects/{PROJECT}/locations/-")}


def _storage_metadata(gcp, node: str) -> list[dict]:
    inst = gcp.compute.get(PROJECT, "zones/us-central1-a/instances", node)
    meta = {i["key"]: i["value"] for i in inst["metadata"]["items"]}
    return json.loads(meta["gcpgpu-storage"])


def _existing(gcp, name: str) -> str:
    from google.cloud import filestore_v1

    op = _filestore(gcp).create_instance(
        parent=f"projects/{PROJECT}/locations/us-central1-a", instance_id=name,
        instance=filestore_v1.Instance(tier="ZONAL", networks=[filestore_v1.NetworkConfig(network="default")],
                                       file_shares=[filestore_v1.FileShareConfig(name="data", capacity_gb=1024)]))
    return op.result(timeout=60).name


def test_up_makes_a_filestore_in_the_nodes_zone_and_down_deletes_it_but_not_an_attached_one(gcp):
    kept = _existing(gcp, "datasets")
    result = cli(*UP, "--filestore", "1TiB", "--mount", "filestore:datasets:/data")
    assert result.exit_code == 0, result.output
    made = f"projects/{PROJECT}/locations/us-central1-a/instances/c-fs"
    found = _instances(gcp)
    assert set(found) == {made, kept}
    assert found[made]["gcpgpu-cluster"] == "c" and "gcpgpu-cluster" not in found[kept]
    ready = _filestore(gcp).get_instance(name=made)
    assert ready.state.name == "READY" and ready.tier.name == "ZONAL" and ready.file_shares[0].capacity_gb == 1024
    ip = ready.networks[0].ip_addresses[0]
    for node in ("c-0", "c-1"):  # every node is told the same mounts, the attached one at its own path
        assert _storage_metadata(gcp, node) == [
            {"kind": "filestore", "name": made, "path": "/shared", "export": f"{ip}:/shared", "device": None,
             "ro": False},
            {"kind": "filestore", "name": kept, "path": "/data", "export": gcp.filestore.export(kept),
             "device": None, "ro": False}]

    again = cli(*UP, "--filestore", "1TiB", "--mount", "filestore:datasets:/data")  # a re-run makes nothing new
    assert again.exit_code == 0, again.output
    assert set(_instances(gcp)) == {made, kept}

    down = cli("cluster", "down", "c", "--yes")
    assert down.exit_code == 0, down.output
    assert leftovers(gcp) == {}
    assert set(_instances(gcp)) == {kept}  # the attached instance survives


def test_an_attached_instance_that_does_not_exist_fails_up_before_anything_is_made(gcp):
    """Issue 51: it was caught only after the nodes were made (and rolled back): now before any insert."""
    result = cli(*UP, "--mount", "filestore:nope:/data")
    assert result.exit_code != 0
    assert "no filestore instance nope in us-central1-a or us-central1" in result.output, result.output
    assert leftovers(gcp) == {}
    assert _instances(gcp) == {}
    made = [r.path for r in gcp.requests.all(api="compute") if r.method == "POST"
            and not r.path.endswith("/setCommonInstanceMetadata")]  # the cluster's lease is taken first
    assert not made, made


class _AtStep(Reporter):
    def __init__(self, key: str, fn) -> None:
        self.key, self.fn = key, fn

    def step(self, key: str, text: str) -> None:
        if key == self.key:
            self.fn()


def test_a_failed_up_takes_back_the_filestore_its_attempt_made(gcp):
    def vanish() -> None:
        gcp.compute.delete(PROJECT, "zones/us-central1-a/instances", "c-1")

    plan = make_plan(machine_type="a2-highgpu-1g", zones=["us-central1-a"], filestore="1TiB")
    with pytest.raises(CloudError, match="c-1"):
        Cluster(clients(gcp), PROJECT, _AtStep("running", vanish)).up(plan)
    assert leftovers(gcp) == {}
    assert _instances(gcp) == {}


def test_a_job_writes_a_file_on_node_0_and_node_1_reads_it_through_the_filestore_mount(gcp):
    """The issue's done-when: a 2-node cluster with --filestore; node 0 writes, node 1 reads, through /shared;
    `down` leaves nothing, and an attached existing instance survives it."""
    kept = _existing(gcp, "datasets")
    assert cli(*UP, "--filestore", "1TiB", "--mount", "filestore:datasets:/data").exit_code == 0
    script = ('if [ "$NODE_RANK" = 0 ]; then echo "written on $(hostname) rank 0" > /shared/hello.txt; '
              'else for i in $(seq 600); do [ -s /shared/hello.txt ] && break; sleep 0.1; done; '
              'echo "node 1 read: $(cat /shared/hello.txt)"; fi')
    logs = job_logs_of(script)
    assert "node 1 read: written on" in logs and "rank 0" in logs, logs
    assert [line for line in logs.splitlines() if "node 1 read" in line][0].startswith("[c-1]")
    # The file is in the instance's own folder: the share, not a node's disk.
    made = f"projects/{PROJECT}/locations/us-central1-a/instances/c-fs"
    assert (gcp.filestore.folder_path(made) / "hello.txt").read_text().startswith("written on")

    down = cli("cluster", "down", "c", "--yes")
    assert down.exit_code == 0, down.output
    assert leftovers(gcp) == {}
    assert set(_instances(gcp)) == {kept}


def _lustre(gcp):
    return Clients(emulator=gcp.address).lustre()


def test_lustre_gets_private_service_access_made_and_removed_with_it_and_a_job_sees_it_on_both_nodes(gcp):
    result = cli(*UP, "--lustre", "9000GiB")
    assert result.exit_code == 0, result.output
    made = f"projects/{PROJECT}/locations/us-central1-a/instances/c-lustre"
    inst = _lustre(gcp).get_instance(name=made)
    assert inst.state.name == "ACTIVE" and inst.per_unit_storage_throughput == 1000 and inst.capacity_gib == 9000
    assert inst.network == f"projects/{PROJECT}/global/networks/default" and inst.labels["gcpgpu-cluster"] == "c"
    psa = gcp.compute.get(PROJECT, "global/addresses", "c-psa")
    assert psa["purpose"] == "VPC_PEERING" and psa["labels"]["gcpgpu-psa"] == "connection"
    entry = _storage_metadata(gcp, "c-1")[0]
    assert (entry["kind"], entry["path"], entry["export"]) == ("lustre", "/scratch", inst.mount_point)
    assert "@tcp:/" in entry["export"]

    script = ('if [ "$NODE_RANK" = 0 ]; then echo from-0 > /scratch/x; else for i in $(seq 600); do '
              '[ -s /scratch/x ] && break; sleep 0.1; done; echo "node 1 read $(cat /scratch/x)"; fi')
    assert "node 1 read from-0" in job_logs_of(script)

    down = cli("cluster", "down", "c", "--yes")
    assert down.exit_code == 0, down.output
    assert leftovers(gcp) == {}  # the range (a global address) went with the connection
    assert list(_lustre(gcp).list_instances(parent=f"projects/{PROJECT}/locations/-")) == []
    conns = Clients(emulator=gcp.address).servicenetworking().services().connections().list(
        parent="services/servicenetworking.googleapis.com",
        network=f"projects/{Clients(emulator=gcp.address).compute('ProjectsClient').get(project=PROJECT).id}"
                "/global/networks/default").execute()
    assert not conns.get("connections")


def test_a_network_with_private_service_access_already_keeps_it_after_down(gcp):
    from google.cloud import compute_v1

    c = Clients(emulator=gcp.address)
    c.compute("GlobalAddressesClient").insert(project=PROJECT, address_resource=compute_v1.Address(
        name="mine", purpose="VPC_PEERING", address_type="INTERNAL", prefix_length=16,
        network=f"projects/{PROJECT}/global/networks/default")).result(timeout=60)
    number = c.compute("ProjectsClient").get(project=PROJECT).id
    network = f"projects/{number}/global/networks/default"
    sn = c.servicenetworking().services().connections()
    op = sn.create(parent="services/servicenetworking.googleapis.com",
                   body={"network": network, "reservedPeeringRanges": ["mine"]}).execute()
    ops = c.servicenetworking().operations()
    helpers.wait_for(lambda: op.get("done") or ops.get(name=op["name"]).execute().get("done"), what="connection")

    assert cli(*UP, "--lustre", "9000GiB").exit_code == 0
    assert "c-psa" not in leftovers(gcp).get("addresses", [])  # the network's own access is used
    assert cli("cluster", "down", "c", "--yes").exit_code == 0
    assert leftovers(gcp) == {"addresses": ["mine"]}
    assert sn.list(parent="services/servicenetworking.googleapis.com", network=network).execute()["connections"]


def test_nodes_placed_again_go_back_to_the_zone_of_their_file_system(gcp):
    first = cli("cluster", "up", "c", "--machine-type", "a2-highgpu-1g", "--nodes", "2", "--zones",
                "us-central1-a,us-central1-b", "--filestore", "1TiB", "--yes")
    assert first.exit_code == 0, first.output
    for node in ("c-0", "c-1"):  # every node lost (a stockout's preemption, a hand): the share stays
        gcp.compute.delete(PROJECT, "zones/us-central1-a/instances", node)
    helpers.wait_for(lambda: not gcp.compute.list(PROJECT, "zones/us-central1-a/instances"), what="nodes gone")
    again = cli("cluster", "up", "c", "--machine-type", "a2-highgpu-1g", "--nodes", "2", "--zones",
                "us-central1-b,us-central1-a", "--filestore", "1TiB", "--yes")
    assert again.exit_code == 0, again.output
    assert "the cluster's file systems are in us-central1-a: the nodes go there too" in again.output
    assert sorted(i["name"] for i in gcp.compute.list(PROJECT, "zones/us-central1-a/instances")) == ["c-0", "c-1"]
    assert set(_instances(gcp)) == {f"projects/{PROJECT}/locations/us-central1-a/instances/c-fs"}
    for node in ("c-0", "c-1"):
        gcp.compute.delete(PROJECT, "zones/us-central1-a/instances", node)
    helpers.wait_for(lambda: not gcp.compute.list(PROJECT, "zones/us-central1-a/instances"), what="nodes gone")
    away = cli("cluster", "up", "c", "--machine-type", "a2-highgpu-1g", "--nodes", "2", "--zone", "us-central1-b",
               "--filestore", "1TiB", "--yes")
    assert away.exit_code == 1, away.output
    assert "file systems are in us-central1-a, outside the zones asked for (us-central1-b)" in away.output
    assert not gcp.compute.list(PROJECT, "zones/us-central1-b/instances")  # refused before any node was made
    assert cli("cluster", "down", "c", "--yes").exit_code == 0
    assert leftovers(gcp) == {} and _instances(gcp) == {}


def test_an_attached_regional_share_is_found_in_the_nodes_region(gcp):
    from google.cloud import filestore_v1

    kept = _filestore(gcp).create_instance(
        parent=f"projects/{PROJECT}/locations/us-central1", instance_id="regional-share",
        instance=filestore_v1.Instance(tier="REGIONAL", networks=[filestore_v1.NetworkConfig(network="default")],
                                       file_shares=[filestore_v1.FileShareConfig(name="data", capacity_gb=1024)])
    ).result(timeout=60).name
    assert cli(*UP, "--mount", "filestore:regional-share:/data").exit_code == 0
    assert [e["name"] for e in _storage_metadata(gcp, "c-0")] == [kept]
    assert cli("cluster", "down", "c", "--yes").exit_code == 0
    assert set(_instances(gcp)) == {kept}


def test_an_emulator_restarted_on_its_state_file_keeps_filestore_lustre_and_private_access(tmp_path):
    """`gcpgpu emulator start --state-file` saved Compute only: after a restart a cluster's shared file
    systems and its private service connection were gone while its nodes still named them."""
    from gcpgpu.cluster.spec import ClusterSpec
    from gcpgpu.fakes.server import Emulator
    from gcpgpu.storage.access import connected
    from gcpgpu.storage.apply import ensure
    from gcpgpu.storage.spec import wanted

    state = tmp_path / "emulator.json"
    spec = ClusterSpec(name="c", machine_type="a3-highgpu-8g", nodes=1, filestore="1TiB",
                       lustre=18000).validate(default_region="us-central1")
    with Emulator(state_file=state) as first:
        first.faults.update({"operation_seconds": 0})
        entries = ensure(Clients(emulator=first.address), PROJECT, "c", wanted(spec), "us-central1-a", "default",
                         {"gcpgpu-cluster": "c"}, say=lambda line: None)
        names = [e["name"] for e in entries]  # full instance names, Filestore's first
        (first.filestore.folder_path(names[0]) / "kept.txt").write_text("data")
    with Emulator(state_file=state) as second:
        c = Clients(emulator=second.address)
        assert c.filestore().get_instance(name=names[0]).state.name == "READY"
        assert c.lustre().get_instance(name=names[1]).state.name == "ACTIVE"
        assert connected(c, PROJECT, "default")
        assert (second.filestore.folder_path(names[0]) / "kept.txt").read_text() == "data"
