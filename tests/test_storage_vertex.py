"""A Vertex AI job mounting an existing Filestore share (issue 41): nfsMounts in every worker pool, and the
network Vertex must peer with; a cluster job or a Lustre is refused in one line before any request."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from gcpgpu.cli import main
from gcpgpu.gcp.clients import Clients

PROJECT = "test-proj"
GLOBAL = ["--project", PROJECT, "--region", "us-central1"]
IMAGE = "us-docker.pkg.dev/test-proj/repo/someone-elses-trainer:1"


def submit(*extra: str):
    return CliRunner().invoke(main, [*GLOBAL, "job", "submit", "--vertex", "--machine-type", "a3-highgpu-8g",
                                     "--image", IMAGE, *extra, "--", "--epochs", "1"])


def test_a_vertex_job_gets_the_share_as_nfs_mounts_on_the_instances_network(gcp):
    from google.cloud import filestore_v1

    clients = Clients(emulator=gcp.address)
    made = clients.filestore().create_instance(
        parent=f"projects/{PROJECT}/locations/us-central1-b", instance_id="datasets",
        instance=filestore_v1.Instance(tier="ZONAL", networks=[filestore_v1.NetworkConfig(network="default")],
                                       file_shares=[filestore_v1.FileShareConfig(name="data", capacity_gb=1024)]))
    ready = made.result(timeout=60)
    result = submit("--nodes", "2", "--mount", "filestore:datasets:/mnt/nfs/datasets")
    assert result.exit_code == 0, result.output
    job_id = result.stdout.splitlines()[0]
    job = clients.job_service("us-central1").get_custom_job(
        name=f"projects/{PROJECT}/locations/us-central1/customJobs/{job_id.rsplit(':', 1)[-1]}")
    mounts = [[(m.server, m.path, m.mount_point) for m in pool.nfs_mounts] for pool in job.job_spec.worker_pool_specs]
    assert mounts == [[(ready.networks[0].ip_addresses[0], "/data", "datasets")]] * 2
    number = clients.compute("ProjectsClient").get(project=PROJECT).id
    assert job.job_spec.network == f"projects/{number}/global/networks/default"


@pytest.mark.parametrize(("mount", "needle"), [
    ("lustre:x:/mnt/nfs/x", "Vertex AI mounts NFS shares only"),
    ("filestore:x:/shared", "Vertex AI mounts an NFS share at /mnt/nfs/DIR"),
    ("filestore:x:/mnt/nfs/a/b", "at /mnt/nfs/DIR"),
])
def test_what_vertex_cannot_mount_is_refused_in_one_line_before_any_request(gcp, mount, needle):
    result = submit("--mount", mount)
    assert result.exit_code == 2 and needle in result.output, result.output
    assert len(result.output.strip().splitlines()) == 1
    assert len(gcp.requests) == 0


def test_a_cluster_job_is_told_to_attach_the_share_to_the_cluster(gcp):
    result = CliRunner().invoke(main, [*GLOBAL, "job", "submit", "--cluster", "c", "--image", "busybox",
                                       "--mount", "filestore:x:/shared", "--command", "true"])
    assert result.exit_code == 2 and "attach it to the cluster instead" in result.output, result.output
    assert len(gcp.requests) == 0


def test_a_share_that_does_not_exist_in_the_region_is_one_line(gcp):
    result = submit("--mount", "filestore:nope:/mnt/nfs/nope")
    assert result.exit_code == 1 and "no Filestore instance nope in us-central1" in result.output, result.output
