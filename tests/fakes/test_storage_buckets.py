"""The emulator's Cloud Storage buckets, through google-cloud-storage as gcpgpu builds it (Clients.storage)."""

from __future__ import annotations

import pytest
from google.api_core import exceptions

from gcpgpu.fakes.server import Emulator
from gcpgpu.gcp.clients import Clients

PROJECT = "storage-test-project"


@pytest.fixture
def storage(gcp: Emulator):
    return Clients(emulator=gcp.address, project=PROJECT).storage()


def test_create_get_list_and_delete_a_bucket(gcp, storage):
    made = storage.create_bucket("runs-bucket", location="us-central1")
    assert (made.name, made.location, made.storage_class) == ("runs-bucket", "US-CENTRAL1", "STANDARD")
    got = storage.get_bucket("runs-bucket")
    assert got.project_number == made.project_number and got.time_created is not None
    assert [b.name for b in storage.list_buckets()] == ["runs-bucket"]
    got.delete()
    assert list(storage.list_buckets()) == []
    with pytest.raises(exceptions.NotFound, match="The specified bucket does not exist"):
        storage.get_bucket("runs-bucket")


def test_buckets_are_listed_per_project(gcp, storage):
    storage.create_bucket("mine-bucket")
    other = Clients(emulator=gcp.address, project="other-project-1").storage()
    other.create_bucket("theirs-bucket")
    assert [b.name for b in storage.list_buckets()] == ["mine-bucket"]
    assert [b.name for b in other.list_buckets()] == ["theirs-bucket"]


def test_bucket_pages(gcp, storage):
    for i in range(5):
        storage.create_bucket(f"page-bucket-{i}")
    pages = storage.list_buckets(page_size=2).pages
    assert [[b.name for b in page] for page in pages] == [
        ["page-bucket-0", "page-bucket-1"], ["page-bucket-2", "page-bucket-3"], ["page-bucket-4"]]


def test_a_second_create_conflicts_as_on_google(gcp, storage):
    storage.create_bucket("taken-bucket")
    with pytest.raises(exceptions.Conflict, match="you already own it"):
        storage.create_bucket("taken-bucket")
    other = Clients(emulator=gcp.address, project="other-project-1").storage()
    with pytest.raises(exceptions.Conflict, match="bucket name is not available"):
        other.create_bucket("taken-bucket")


@pytest.mark.parametrize("name", ["Upper-Case", "ab", "two..dots", "goog-bucket", "192.168.0.1",
                                  "has/slash", "a" * 64])
def test_a_bad_bucket_name_is_refused(gcp, storage, name):
    with pytest.raises(exceptions.BadRequest, match="Invalid bucket name"):
        storage.create_bucket(name)
    assert not any(gcp.storage.disk.root.joinpath("gcs").glob("*"))


def test_a_bucket_that_holds_objects_is_not_deleted(gcp, storage):
    bucket = storage.create_bucket("full-bucket")
    bucket.blob("x").upload_from_string(b"1")
    with pytest.raises(exceptions.Conflict, match="not empty"):
        bucket.delete()
    bucket.delete(force=True)
    assert storage.lookup_bucket("full-bucket") is None


def test_labels_patch_and_metageneration(gcp, storage):
    bucket = storage.create_bucket("label-bucket")
    bucket.labels = {"team": "ml"}
    bucket.patch()
    again = storage.get_bucket("label-bucket")
    assert again.labels == {"team": "ml"} and again.metageneration == 2
    with pytest.raises(exceptions.PreconditionFailed):
        again.patch(if_metageneration_match=1)


def test_a_bucket_a_job_wrote_into_is_a_bucket(gcp, storage):
    # A cluster job's --output-dir gs://job-bucket/run is this folder: the bucket exists for every client.
    out = gcp.storage.disk.root / "gcs" / "job-bucket" / "run"
    out.mkdir(parents=True)
    (out / "metrics.json").write_text("{}")
    assert "job-bucket" in [b.name for b in storage.list_buckets()]
    assert [b.name for b in storage.list_blobs("job-bucket")] == ["run/metrics.json"]


def test_reset_forgets_buckets(gcp, storage):
    storage.create_bucket("gone-bucket").blob("a").upload_from_string(b"x")
    gcp.reset()
    assert storage.lookup_bucket("gone-bucket") is None


def test_buckets_and_objects_outlive_a_restart_with_a_state_file(tmp_path):
    state = tmp_path / "state.json"
    with Emulator(state_file=state) as emu:
        storage = Clients(emulator=emu.address, project=PROJECT).storage()
        storage.create_bucket("kept-bucket").blob("k.txt").upload_from_string(b"kept")
        generation = storage.bucket("kept-bucket").get_blob("k.txt").generation
    with Emulator(state_file=state) as emu:
        storage = Clients(emulator=emu.address, project=PROJECT).storage()
        blob = storage.bucket("kept-bucket").get_blob("k.txt")
        assert blob.download_as_bytes() == b"kept" and blob.generation == generation
        assert [b.name for b in storage.list_buckets()] == ["kept-bucket"]


def test_make_bucket_from_a_shell_makes_it_once_and_keeps_it_after(gcp, storage, capsys):
    """`python -m gcpgpu.fakes.storage make-bucket B` (the README's blocks make their --output-dir bucket so)."""
    from gcpgpu.fakes.storage.__main__ import main as make

    assert make(["--emulator", gcp.address, "make-bucket", "gs://shell-made", "--location", "us-central1"]) == 0
    assert storage.get_bucket("shell-made").location == "US-CENTRAL1"
    assert make(["--emulator", gcp.address, "make-bucket", "shell-made"]) == 0  # pasted twice: kept, said
    assert make(["--emulator", gcp.address, "make-bucket", "Not_A_Bucket"]) == 1
    err = capsys.readouterr().err
    assert "made gs://shell-made" in err and "gs://shell-made exists already" in err
    assert "make-bucket gs://Not_A_Bucket: " in err
