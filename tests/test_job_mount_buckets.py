"""A job's --mount of a bucket that was never made fails on the emulator as it fails on Google (issue 36), and so
does a cluster job's --output-dir in one (issue 51: both are the node's Cloud Storage FUSE mounts).

On a cluster node the job agent's Cloud Storage FUSE mount fails (gcsfuse cannot list a bucket that does
not exist) and the node reports FAILED with the agent's line; on Vertex AI the bucket is simply not under
/gcs, and the image's entrypoint stops with its GCPGPU_MOUNTS line. A bucket that exists (made through
the API, or by a job writing under /gcs/BUCKET) mounts as before.
"""

from __future__ import annotations

import json
import shutil

import pytest
from click.testing import CliRunner

from gcpgpu.cli import main
from gcpgpu.fakes.host import mounts
from gcpgpu.fakes.host.storage import Storage

GLOBAL = ["--project", "test-proj", "--region", "us-central1"]
IMAGE = "us-docker.pkg.dev/p/r/mine:1"
needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap (bwrap) is not installed")


def cli(*argv: str, fmt: str | None = None):
    return CliRunner().invoke(main, [*GLOBAL, *(["--format", fmt] if fmt else []), *argv])


def test_which_buckets_count_as_made(tmp_path):
    disk = Storage(tmp_path)
    (tmp_path / "gcs" / "made").mkdir(parents=True)  # through the API, or by a job writing under /gcs/made
    job = {"user_mounts": [{"bucket": "made", "path": "in", "target": "/data", "ro": True},
                           {"bucket": "never-made", "path": "", "target": "/out", "ro": False}]}
    assert mounts.cluster_failure(job, disk) == (
        "mounting gs://never-made with Cloud Storage FUSE failed: " + mounts.GCSFUSE_NO_BUCKET)
    assert mounts.cluster_failure({"user_mounts": job["user_mounts"][:1]}, disk) is None
    # The --output-dir's bucket (and a --workdir's staging bucket) are the agent's FUSE mounts too, first.
    out = {"gcs_buckets": ["gone-out"], "user_mounts": job["user_mounts"]}
    assert mounts.cluster_failure(out, disk) == (
        "mounting gs://gone-out with Cloud Storage FUSE failed: " + mounts.GCSFUSE_NO_BUCKET)
    assert mounts.cluster_failure({"gcs_buckets": ["made"]}, disk) is None
    ro = {"user_mounts": [{"bucket": "gone", "path": "", "target": "/d", "ro": True}]}
    assert "gs://gone read-only with Cloud Storage FUSE failed" in mounts.cluster_failure(ro, disk)
    env = {"GCPGPU_MOUNTS": json.dumps([{"source": "gs://made/in", "target": "/data", "ro": True},
                                        {"source": "gs://never-made/x", "target": "/out"}])}
    assert mounts.vertex_failure(env, disk) == ("GCPGPU_MOUNTS: gs://never-made/x on /out: the bucket is not mounted "
                                                "at /gcs/never-made (Vertex AI mounts the buckets that exist; "
                                                "gs://never-made does not)")
    assert mounts.vertex_failure({"GCPGPU_MOUNTS": "not json"}, disk) is None  # the entrypoint says what is wrong
    # A name no bucket may have is never taken for the storage folder itself.
    assert not mounts.bucket_exists(disk, "..") and not mounts.bucket_exists(disk, "")


def test_a_cluster_job_mounting_a_missing_bucket_fails_with_the_agents_fuse_line(gcp):
    assert cli("cluster", "up", "m", "--machine-type", "a2-highgpu-1g", "--nodes", "1", "--zone", "us-central1-a",
               "--yes").exit_code == 0
    result = cli("job", "submit", "--cluster", "m", "--wait", "--image", IMAGE, "--command", "python train.py",
                 "--mount", "gs://never-made/in:/data:ro")
    assert result.exit_code != 0, result.output
    status = json.loads(cli("job", "status", result.stdout.splitlines()[0], fmt="json").stdout)
    assert status["state"] == "FAILED"
    said = json.dumps(status)
    assert "mounting gs://never-made read-only with Cloud Storage FUSE failed" in said
    assert "storage: bucket doesn't exist" in said
    assert not (gcp.storage.disk.root / "gcs" / "never-made").exists()  # the job made no bucket on its way


def test_a_cluster_jobs_output_dir_in_a_missing_bucket_fails_as_its_mount_would(gcp):
    """Both are Cloud Storage FUSE mounts of the agent's: an --output-dir bucket that was never made once ran
    (the job's writes made it) while a --mount of the same bucket failed."""
    assert cli("cluster", "up", "m", "--machine-type", "a2-highgpu-1g", "--nodes", "1", "--zone", "us-central1-a",
               "--yes").exit_code == 0
    result = cli("job", "submit", "--cluster", "m", "--wait", "--output-dir", "gs://never-made/run", "--",
                 "--model", "tiny", "--steps", "2", "--seq-len", "16")
    assert result.exit_code != 0, result.output
    status = json.loads(cli("job", "status", result.stdout.splitlines()[0], fmt="json").stdout)
    assert status["state"] == "FAILED"
    assert ("mounting gs://never-made with Cloud Storage FUSE failed: " + mounts.GCSFUSE_NO_BUCKET) in json.dumps(status)
    assert not (gcp.storage.disk.root / "gcs" / "never-made").exists()  # nothing was written, no bucket made
    # Once the bucket is made, the same job runs and writes there.
    gcp.storage.insert_bucket("test-proj", {"name": "never-made"})
    done = cli("job", "submit", "--cluster", "m", "--wait", "--output-dir", "gs://never-made/run", "--",
               "--model", "tiny", "--steps", "2", "--seq-len", "16")
    assert done.exit_code == 0, done.output


@needs_bwrap
def test_a_vertex_job_mounting_a_missing_bucket_fails_with_the_entrypoints_line(gcp):
    result = cli("job", "submit", "--vertex", "--machine-type", "a2-highgpu-1g", "--wait", "--image", IMAGE,
                 "--command", "python train.py", "--mount", "gs://never-made/out:/out")
    assert result.exit_code != 0, result.output
    assert "the bucket is not mounted at /gcs/never-made" in result.output
    assert "gs://never-made does not" in result.output
    assert not (gcp.storage.disk.root / "gcs" / "never-made").exists()
