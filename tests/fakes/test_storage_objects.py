"""The emulator's Cloud Storage objects through google-cloud-storage: uploads of every kind, downloads,
listing, deletes and the errors Google answers with; and the same objects as files jobs read and write."""

from __future__ import annotations

import base64
import hashlib
import io
import os

import google_crc32c
import pytest
from google.api_core import exceptions

from gcpgpu.fakes.server import Emulator
from gcpgpu.gcp.clients import Clients

PROJECT = "storage-test-project"
MULTIPART_LIMIT = 8 * 1024 * 1024  # google-cloud-storage sends anything larger (or of unknown size) resumable


@pytest.fixture
def storage(gcp: Emulator):
    return Clients(emulator=gcp.address, project=PROJECT).storage()


@pytest.fixture
def bucket(storage):
    return storage.create_bucket("obj-bucket")


def b64(digest: bytes) -> str:
    return base64.b64encode(digest).decode()


def test_small_upload_download_and_metadata(gcp, bucket):
    blob = bucket.blob("dir/hello.txt")
    blob.metadata = {"run": "7"}
    blob.upload_from_string(b"hello", content_type="text/plain")
    got = bucket.get_blob("dir/hello.txt")
    assert (got.size, got.content_type, got.metadata) == (5, "text/plain", {"run": "7"})
    assert got.md5_hash == b64(hashlib.md5(b"hello").digest())
    assert got.crc32c == b64(google_crc32c.Checksum(b"hello").digest())
    assert got.generation == blob.generation and got.metageneration == 1
    assert bucket.blob("dir/hello.txt").download_as_bytes() == b"hello"
    assert [r.query.split("&")[0] for r in gcp.requests.all(method="POST") if "/upload/" in r.path] == [
        "uploadType=multipart"]


def test_large_upload_goes_resumable_in_chunks_and_comes_back_whole(gcp, bucket):
    data = os.urandom(MULTIPART_LIMIT + 300_000)
    chunk = 1024 * 1024
    gcp.requests.clear()
    bucket.blob("big.bin", chunk_size=chunk).upload_from_string(data)
    puts = gcp.requests.all(method="PUT")
    assert [r.status for r in puts] == [308] * (len(data) // chunk) + [200]
    assert all("uploadType=resumable" in r.query for r in puts)
    assert bucket.blob("big.bin").download_as_bytes() == data
    # ...also in chunks of Range requests (206), as download_to_file with a chunk size reads it
    out = io.BytesIO()
    bucket.blob("big.bin", chunk_size=chunk).download_to_file(out)
    assert out.getvalue() == data
    assert (gcp.storage.disk.root / "gcs" / "obj-bucket" / "big.bin").read_bytes() == data


def test_a_stream_of_unknown_size_is_uploaded_resumable(gcp, bucket):
    parts = [os.urandom(100_000) for _ in range(4)]
    with bucket.blob("stream.bin", chunk_size=256 * 1024).open("wb") as f:
        for part in parts:
            f.write(part)
    assert bucket.blob("stream.bin").download_as_bytes() == b"".join(parts)


def test_a_byte_range_and_one_past_the_end(gcp, bucket):
    bucket.blob("r.bin").upload_from_string(bytes(range(100)))
    assert bucket.blob("r.bin").download_as_bytes(start=10, end=19) == bytes(range(10, 20))
    assert bucket.blob("r.bin").download_as_bytes(start=95) == bytes(range(95, 100))
    with pytest.raises(exceptions.RequestRangeNotSatisfiable):
        bucket.blob("r.bin").download_as_bytes(start=100)


def test_list_with_prefix_delimiter_and_pages(gcp, storage, bucket):
    for name in ("a.txt", "logs/1.txt", "logs/2.txt", "logs/deep/3.txt", "runs/x/ckpt", "z.txt"):
        bucket.blob(name).upload_from_string(name.encode())
    assert [b.name for b in storage.list_blobs(bucket)] == [
        "a.txt", "logs/1.txt", "logs/2.txt", "logs/deep/3.txt", "runs/x/ckpt", "z.txt"]
    top = storage.list_blobs(bucket, delimiter="/")
    assert [b.name for b in top] == ["a.txt", "z.txt"] and top.prefixes == {"logs/", "runs/"}
    logs = storage.list_blobs(bucket, prefix="logs/", delimiter="/")
    assert [b.name for b in logs] == ["logs/1.txt", "logs/2.txt"] and logs.prefixes == {"logs/deep/"}
    assert [b.name for b in storage.list_blobs(bucket, prefix="logs/d")] == ["logs/deep/3.txt"]
    assert [b.name for b in storage.list_blobs(bucket, match_glob="**/*.txt")] == [
        "a.txt", "logs/1.txt", "logs/2.txt", "logs/deep/3.txt", "z.txt"]
    assert [b.name for b in storage.list_blobs(bucket, start_offset="logs/2", end_offset="runs")] == [
        "logs/2.txt", "logs/deep/3.txt"]
    pages = storage.list_blobs(bucket, page_size=4).pages
    assert [[b.name for b in page] for page in pages] == [
        ["a.txt", "logs/1.txt", "logs/2.txt", "logs/deep/3.txt"], ["runs/x/ckpt", "z.txt"]]


def test_delete_and_the_404s_google_answers(gcp, storage, bucket):
    bucket.blob("gone.txt").upload_from_string(b"x")
    bucket.blob("gone.txt").delete()
    assert bucket.get_blob("gone.txt") is None
    with pytest.raises(exceptions.NotFound, match="No such object: obj-bucket/gone.txt"):
        bucket.blob("gone.txt").download_as_bytes()
    with pytest.raises(exceptions.NotFound, match="No such object: obj-bucket/gone.txt"):
        bucket.blob("gone.txt").delete()
    with pytest.raises(exceptions.NotFound, match="The specified bucket does not exist"):
        storage.bucket("no-such-bucket").blob("x").upload_from_string(b"x")
    with pytest.raises(exceptions.NotFound, match="The specified bucket does not exist"):
        list(storage.list_blobs("no-such-bucket"))
    assert not (gcp.storage.disk.root / "gcs" / "obj-bucket" / "gone.txt").exists()


def test_generations_and_preconditions(gcp, bucket):
    blob = bucket.blob("gen.txt")
    blob.upload_from_string(b"one", if_generation_match=0)  # create only if absent
    first = blob.generation
    with pytest.raises(exceptions.PreconditionFailed, match="pre-conditions you specified did not hold"):
        bucket.blob("gen.txt").upload_from_string(b"two", if_generation_match=0)
    blob.upload_from_string(b"two", if_generation_match=first)
    assert blob.generation > first
    with pytest.raises(exceptions.NotFound):
        bucket.blob("gen.txt", generation=first).download_as_bytes()
    assert bucket.blob("gen.txt").download_as_bytes() == b"two"


def test_a_declared_checksum_that_does_not_match_is_refused(gcp, bucket):
    blob = bucket.blob("bad.bin")
    blob.md5_hash = b64(hashlib.md5(b"something else").digest())
    with pytest.raises(exceptions.BadRequest, match="doesn't match calculated MD5"):
        blob.upload_from_string(b"payload", checksum=None)
    assert bucket.get_blob("bad.bin") is None


def test_copy_compose_and_patch(gcp, storage, bucket):
    bucket.blob("p1").upload_from_string(b"ab", content_type="text/plain")
    bucket.blob("p2").upload_from_string(b"cd")
    copied = bucket.copy_blob(bucket.blob("p1"), storage.create_bucket("other-bucket"), "copied")
    assert copied.download_as_bytes() == b"ab" and copied.content_type == "text/plain"
    whole = bucket.blob("whole")
    whole.compose([bucket.blob("p1"), bucket.blob("p2")])
    assert whole.download_as_bytes() == b"abcd" and whole.component_count == 2
    whole.metadata = {"k": "v"}
    whole.patch()
    assert bucket.get_blob("whole").metadata == {"k": "v"} and bucket.get_blob("whole").metageneration == 2


def test_names_that_cannot_be_files_are_refused_with_the_reason(gcp, bucket):
    bucket.blob("a").upload_from_string(b"file")
    with pytest.raises(exceptions.Conflict, match="cannot also be the folder"):
        bucket.blob("a/b").upload_from_string(b"x")
    with pytest.raises(exceptions.BadRequest, match="keeps objects as files"):
        bucket.blob("x//y").upload_from_string(b"x")
    with pytest.raises(exceptions.BadRequest, match="keeps objects as files"):
        bucket.blob("x/../../escape").upload_from_string(b"x")
    assert not (gcp.storage.disk.root / "escape").exists()


def test_uploaded_objects_are_files_jobs_read_and_files_jobs_write_are_objects(gcp, bucket):
    bucket.blob("data/train.txt").upload_from_string(b"tokens")
    folder = gcp.storage.disk.root / "gcs" / "obj-bucket"
    assert (folder / "data" / "train.txt").read_bytes() == b"tokens"  # what a job sees at /gcs/obj-bucket/...
    # A job writes a checkpoint and later rewrites it: each time a new generation with its own hashes.
    (folder / "ckpt").mkdir()
    (folder / "ckpt" / "step_1.pt").write_bytes(b"first")
    first = bucket.get_blob("ckpt/step_1.pt")
    assert first.md5_hash == b64(hashlib.md5(b"first").digest())
    assert first.content_type == "application/octet-stream"
    (folder / "ckpt" / "step_1.pt").write_bytes(b"second, longer")
    second = bucket.get_blob("ckpt/step_1.pt")
    assert second.generation > first.generation and second.size == len(b"second, longer")
    assert bucket.blob("ckpt/step_1.pt").download_as_bytes() == b"second, longer"
    assert bucket.get_blob("ckpt/step_1.pt").generation == second.generation  # stable until written again


def test_a_prefix_that_climbs_lists_nothing_outside_the_bucket(gcp, storage, bucket):
    storage.create_bucket("next-bucket").blob("secret.txt").upload_from_string(b"x")
    for prefix in ("../next-bucket/", "a/../../next-bucket/", "//"):
        assert list(storage.list_blobs(bucket, prefix=prefix)) == []
    # A folder a job made under /gcs/ with a name no bucket can have is not listed as one.
    (gcp.storage.disk.root / "gcs" / "Not_A_Bucket").mkdir()
    assert sorted(b.name for b in storage.list_buckets()) == ["next-bucket", "obj-bucket"]
