"""A node's shared file systems (`gcpgpu-storage` metadata): the instance's folder bound at its path in every
user command the node runs, so what node 0 writes at /shared node 1 reads there; an entry the emulator cannot
mount refuses the node's job in one line."""

from __future__ import annotations

import json
import shutil

import pytest
from google.cloud import compute_v1
from helpers import wait_for

from .builders import PROJECT, ZONE, insert, vm

PARENT = f"projects/{PROJECT}/locations/{ZONE}"
NAME = f"{PARENT}/instances/nfs"
DONE = ("SUCCEEDED", "FAILED", "CANCELLED")

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")


@pytest.fixture
def nfs(gcp):
    """A READY Filestore instance, made through Google's client; its export."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import filestore_v1

    client = filestore_v1.CloudFilestoreManagerClient(
        credentials=AnonymousCredentials(), transport="rest",
        client_options={"api_endpoint": f"http://{gcp.address}/filestore"})
    made = client.create_instance(parent=PARENT, instance_id="nfs", instance=filestore_v1.Instance(
        tier=filestore_v1.Instance.Tier.ZONAL, file_shares=[filestore_v1.FileShareConfig(name="vol", capacity_gb=1024)],
        networks=[filestore_v1.NetworkConfig(network="default")])).result(timeout=30)
    return f"{made.networks[0].ip_addresses[0]}:/vol"


def _nodes(instances, storage: list[dict], names=("n-0", "n-1")) -> None:
    for name in names:
        body = vm(name)
        body.metadata = compute_v1.Metadata(items=[compute_v1.Items(key="gcpgpu-storage", value=json.dumps(storage))])
        insert(instances, body)


def _run(gcp, instances, node: str, job_id: str, script: str) -> dict[str, str]:
    """Run `script` as a user's command on `node` (the agent's setMetadata hook); its final guest attributes."""
    inst = instances.get(project=PROJECT, zone=ZONE, instance=node)
    items = [compute_v1.Items(key=i.key, value=i.value) for i in inst.metadata.items]
    job = {"id": job_id, "image": "us-docker.pkg.dev/p/r/user:1", "command": ["bash", "-c", script], "env": {}}
    items += [compute_v1.Items(key="gcpgpu-job", value=json.dumps(job)),
              compute_v1.Items(key="gcpgpu-node-rank", value="0"), compute_v1.Items(key="gcpgpu-nnodes", value="1")]
    instances.set_metadata(project=PROJECT, zone=ZONE, instance=node, metadata_resource=compute_v1.Metadata(
        fingerprint=inst.metadata.fingerprint, items=items)).result()
    iid = str(inst.id)
    wait_for(lambda: gcp.jobs.agent.attributes(iid).get("gcpgpu/state") in DONE, what=f"{node}'s job to end")
    return gcp.jobs.agent.attributes(iid)


def test_a_file_written_at_the_mount_on_node_0_is_read_there_on_node_1(gcp, instances, nfs):
    _nodes(instances, [{"kind": "filestore", "name": NAME, "path": "/shared", "export": nfs, "device": None,
                        "ro": False}])
    wrote = _run(gcp, instances, "n-0", "w", "echo from-node-0 > /shared/hello && mkdir -p /shared/ckpt")
    assert wrote["gcpgpu/state"] == "SUCCEEDED", wrote
    read = _run(gcp, instances, "n-1", "r", 'test "$(cat /shared/hello)" = from-node-0 && test -d /shared/ckpt')
    assert read["gcpgpu/state"] == "SUCCEEDED", read
    assert (gcp.filestore.folder_path(NAME) / "hello").read_text() == "from-node-0\n"


def test_a_read_only_entry_is_bound_read_only(gcp, instances, nfs):
    (gcp.filestore.folder_path(NAME) / "data.txt").write_text("weights\n")
    _nodes(instances, [{"kind": "filestore", "name": NAME, "path": "/data", "export": nfs, "ro": True}], ["n-0"])
    got = _run(gcp, instances, "n-0", "ro", 'test "$(cat /data/data.txt)" = weights && ! touch /data/x 2>/dev/null')
    assert got["gcpgpu/state"] == "SUCCEEDED", got
    assert not (gcp.filestore.folder_path(NAME) / "x").exists()


@pytest.mark.parametrize("entry,said", [
    ({"kind": "filestore", "name": f"{PARENT}/instances/gone", "path": "/shared"}, "no such instance"),
    ({"kind": "filestore", "name": NAME, "path": "/gcs/x"}, "is reserved"),
    ({"kind": "filestore", "name": NAME, "path": "shared"}, "not an absolute path"),
    ({"kind": "filestore", "name": NAME, "path": "/shared", "export": "10.0.0.1:/other"}, "is not the instance's"),
    ({"kind": "nfs", "name": NAME, "path": "/shared"}, "is not one of"),
])
def test_an_entry_the_node_cannot_mount_fails_its_job_in_one_line(gcp, instances, nfs, entry, said):
    _nodes(instances, [entry], ["n-0"])
    got = _run(gcp, instances, "n-0", "x", "true")
    assert got["gcpgpu/state"] == "FAILED" and said in got["gcpgpu/message"], got
    assert "\n" not in got["gcpgpu/message"]


def test_an_instance_still_creating_is_not_mounted(gcp, instances, nfs):
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import filestore_v1

    gcp.clock.freeze()
    gcp.faults.operation_seconds = 600.0
    client = filestore_v1.CloudFilestoreManagerClient(
        credentials=AnonymousCredentials(), transport="rest",
        client_options={"api_endpoint": f"http://{gcp.address}/filestore"})
    client.create_instance(parent=PARENT, instance_id="slow", instance=filestore_v1.Instance(
        tier=filestore_v1.Instance.Tier.ZONAL, file_shares=[filestore_v1.FileShareConfig(name="vol", capacity_gb=1024)],
        networks=[filestore_v1.NetworkConfig(network="default")]))
    gcp.faults.operation_seconds = 0.0
    _nodes(instances, [{"kind": "filestore", "name": f"{PARENT}/instances/slow", "path": "/shared"}], ["n-0"])
    got = _run(gcp, instances, "n-0", "c", "true")
    assert got["gcpgpu/state"] == "FAILED" and "is CREATING, not READY" in got["gcpgpu/message"], got


def test_the_bundled_trainers_node_paths_under_a_mount_land_in_the_instances_folder(tmp_path):
    from gcpgpu.fakes.host.storage import Storage

    storage = Storage(tmp_path)
    storage.share("7", [("/shared", ("filestore", "p", "z", "n"))])
    assert storage.local("/shared/ckpt/../run1", "7") == str(tmp_path / "filestore/p/z/n/run1")
    assert storage.local("/shared", "7") == str(tmp_path / "filestore/p/z/n")
    assert storage.local("/sharedx/a", "7") == str(tmp_path / "nodes/7/sharedx/a")  # not under the mount
    assert storage.local("/shared/a", "8") == str(tmp_path / "nodes/8/shared/a")  # another node mounts nothing


def test_a_lustre_instance_is_shared_between_nodes_at_its_path(gcp, instances):
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import lustre_v1

    # Its private service access, as Service Networking records it (tests/conformance/test_lustre.py drives the API).
    gcp.servicenetworking._conns[(PROJECT, "default")] = {"network": f"projects/{PROJECT}/global/networks/default"}
    client = lustre_v1.LustreClient(credentials=AnonymousCredentials(), transport="rest",
                                    client_options={"api_endpoint": f"http://{gcp.address}/lustre"})
    made = client.create_instance(parent=PARENT, instance_id="scratch", instance=lustre_v1.Instance(
        filesystem="lfs", capacity_gib=18000, per_unit_storage_throughput=1000,
        network=f"projects/{PROJECT}/global/networks/default")).result(timeout=30)
    _nodes(instances, [{"kind": "lustre", "name": made.name, "path": "/scratch", "export": made.mount_point,
                        "device": None, "ro": False}])
    assert _run(gcp, instances, "n-0", "w", "echo lustre > /scratch/f")["gcpgpu/state"] == "SUCCEEDED"
    assert _run(gcp, instances, "n-1", "r", 'test "$(cat /scratch/f)" = lustre')["gcpgpu/state"] == "SUCCEEDED"


def test_a_hyperdisk_ml_volume_filled_on_one_node_is_read_only_on_every_node(gcp, instances, compute):
    disks = compute("DisksClient")
    disks.insert(project=PROJECT, zone=ZONE, disk_resource=compute_v1.Disk(
        name="weights", type_=f"zones/{ZONE}/diskTypes/hyperdisk-ml", size_gb=100)).result()
    name = f"projects/{PROJECT}/zones/{ZONE}/disks/weights"
    _nodes(instances, [{"kind": "hyperdisk-ml", "name": name, "path": "/weights", "export": None,
                        "device": "weights", "ro": False}])

    def attach(node: str, mode: str) -> None:
        instances.attach_disk(project=PROJECT, zone=ZONE, instance=node, attached_disk_resource=compute_v1.AttachedDisk(
            source=f"zones/{ZONE}/disks/weights", mode=mode)).result()

    attach("n-0", "READ_WRITE")  # the VM that fills it, in READ_WRITE_SINGLE
    assert _run(gcp, instances, "n-0", "fill", "echo w > /weights/model.bin")["gcpgpu/state"] == "SUCCEEDED"
    got = _run(gcp, instances, "n-1", "early", "true")
    assert got["gcpgpu/state"] == "FAILED" and "not attached to n-1" in got["gcpgpu/message"], got
    instances.detach_disk(project=PROJECT, zone=ZONE, instance="n-0", device_name="weights").result()
    disks.update(request=compute_v1.UpdateDiskRequest(
        project=PROJECT, zone=ZONE, disk="weights", update_mask="accessMode",
        disk_resource=compute_v1.Disk(access_mode="READ_ONLY_MANY"))).result()
    for node in ("n-0", "n-1"):
        attach(node, "READ_ONLY")
    for node in ("n-0", "n-1"):
        got = _run(gcp, instances, node, f"read-{node}", 'test "$(cat /weights/model.bin)" = w && ! touch /weights/x')
        assert got["gcpgpu/state"] == "SUCCEEDED", got


def _vertex_job(gcp, script: str, server: str, path: str):
    from google.cloud import aiplatform_v1 as aip

    from gcpgpu.gcp.clients import Clients

    jobs = Clients(emulator=gcp.address, project="test-proj").job_service("us-central1")
    spec = aip.WorkerPoolSpec(
        replica_count=1, machine_spec=aip.MachineSpec(machine_type="n1-standard-4"),
        container_spec=aip.ContainerSpec(image_uri="us-docker.pkg.dev/p/r/user:1", command=["bash", "-c", script]),
        nfs_mounts=[aip.NfsMount(server=server, path=path, mount_point="data")])
    job = jobs.create_custom_job(parent="projects/test-proj/locations/us-central1", custom_job=aip.CustomJob(
        display_name="nfs", job_spec=aip.CustomJobSpec(worker_pool_specs=[spec])))
    done = (aip.JobState.JOB_STATE_SUCCEEDED, aip.JobState.JOB_STATE_FAILED, aip.JobState.JOB_STATE_CANCELLED)
    return wait_for(lambda: (got := jobs.get_custom_job(name=job.name)).state in done and got, what="the job to end")


def test_a_vertex_jobs_nfs_mount_of_a_filestore_share_is_its_folder(gcp, nfs):
    from google.cloud import aiplatform_v1 as aip

    (gcp.filestore.folder_path(NAME) / "hello").write_text("hi\n")
    server, _, path = nfs.partition(":")
    got = _vertex_job(gcp, 'test "$(cat /mnt/nfs/data/hello)" = hi && echo back > /mnt/nfs/data/from-vertex',
                      server, path)
    assert got.state == aip.JobState.JOB_STATE_SUCCEEDED, got.error
    assert (gcp.filestore.folder_path(NAME) / "from-vertex").read_text() == "back\n"
    got = _vertex_job(gcp, "true", "10.9.9.9", path)
    assert got.state == aip.JobState.JOB_STATE_FAILED and "no READY Filestore instance" in got.error.message
