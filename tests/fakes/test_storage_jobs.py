"""One storage: a cluster job reads an object uploaded with google-cloud-storage at its /gcs path, and
what it writes to its --output-dir gs:// folder is read back as objects with the same client."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from gcpgpu.cli import main
from gcpgpu.gcp.clients import Clients

GLOBAL = ["--project", "test-proj", "--region", "us-central1"]
CORPUS = ("The emulator keeps objects as files; jobs read them at /gcs/BUCKET. " * 300).encode()


def cli(*argv: str, fmt: str | None = None):
    return CliRunner().invoke(main, [*GLOBAL, *(["--format", fmt] if fmt else []), *argv])


@pytest.mark.slow
def test_a_job_reads_an_uploaded_object_and_its_outputs_are_objects(gcp):
    pytest.importorskip("torch")
    storage = Clients(emulator=gcp.address, project="test-proj").storage()
    storage.create_bucket("data-bucket").blob("corpus/train.txt").upload_from_string(CORPUS)
    storage.create_bucket("out-bucket")
    assert cli("cluster", "up", "c", "--machine-type", "a2-highgpu-1g", "--nodes", "1", "--zone", "us-central1-a",
               "--yes").exit_code == 0
    train = ["--model", "tiny", "--parallel", "ddp", "--precision", "fp32", "--steps", "4", "--batch-size", "4",
             "--seq-len", "32", "--log-every", "1", "--data", "/gcs/data-bucket/corpus/train.txt"]
    job = cli("job", "submit", "--cluster", "c", "--output-dir", "gs://out-bucket/exp1", "--wait", "--", *train)
    assert job.exit_code == 0, job.output
    job_id = job.stdout.splitlines()[0]
    assert f"{len(CORPUS):,} byte tokens" in cli("job", "logs", job_id).output  # it trained on the upload

    names = [b.name for b in storage.list_blobs("out-bucket", prefix="exp1/checkpoints/")]
    assert "exp1/checkpoints/step_00000004/.metadata" in names
    top = storage.list_blobs("out-bucket", prefix="exp1/checkpoints/", delimiter="/")
    assert list(top) == [] and "exp1/checkpoints/step_00000004/" in top.prefixes
    meta = storage.bucket("out-bucket").get_blob("exp1/checkpoints/step_00000004/.metadata")
    on_disk = gcp.storage.disk.root / "gcs" / "out-bucket" / "exp1" / "checkpoints" / "step_00000004" / ".metadata"
    assert meta.download_as_bytes() == on_disk.read_bytes() and meta.size == on_disk.stat().st_size
    status = json.loads(cli("job", "status", job_id, fmt="json").stdout)
    assert status["output_dir"] == "gs://out-bucket/exp1"


@pytest.mark.slow
def test_a_vertex_jobs_output_dir_is_objects_in_the_same_storage(gcp):
    pytest.importorskip("torch")
    storage = Clients(emulator=gcp.address, project="test-proj").storage()
    storage.create_bucket("vx-bucket")
    job = cli("job", "submit", "--vertex", "--machine-type", "a2-highgpu-1g", "--nodes", "1",
              "--output-dir", "gs://vx-bucket/run1", "--wait", "--", "--model", "tiny", "--steps", "4",
              "--batch-size", "4", "--seq-len", "32", "--log-every", "1")
    assert job.exit_code == 0, job.output
    names = [b.name for b in storage.list_blobs("vx-bucket", prefix="run1/")]
    assert any(n.startswith("run1/checkpoints/") and n.endswith("/.metadata") for n in names), names
    assert "are objects in the emulator's Cloud Storage" in cli("job", "logs", job.stdout.splitlines()[0]).output
