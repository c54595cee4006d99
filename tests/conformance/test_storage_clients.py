"""Cloud Storage as third-party clients use it, unchanged, against the emulator.

google-cloud-storage is pointed the way its own docs say to point it at an emulator
(STORAGE_EMULATOR_HOST); gcloud storage through `eval "$(gcpgpu emulator gcloud-env)"`, which sets
api_endpoint_overrides/storage. Both see the same buckets as each other and as gcpgpu.
"""

from __future__ import annotations

import os
import shutil

import pytest
from google.cloud import storage

from gcpgpu.gcp.clients import Clients

PROJECT = "emulator-project"  # the project gcloud-env gives gcloud when none is set


@pytest.fixture
def library(gcp, monkeypatch):
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcp.url)
    return storage.Client(project=PROJECT)


def test_google_cloud_storage_through_storage_emulator_host(gcp, library):
    bucket = library.create_bucket("lib-bucket")
    bucket.blob("a/b.txt").upload_from_string("text")
    assert library.bucket("lib-bucket").blob("a/b.txt").download_as_text() == "text"
    # gcpgpu's own client (Clients.storage) sees what the library made.
    mine = Clients(emulator=gcp.address, project=PROJECT).storage()
    assert [b.name for b in mine.list_blobs("lib-bucket")] == ["a/b.txt"]


@pytest.mark.skipif(shutil.which("gcloud") is None, reason="gcloud is not installed")
def test_gcloud_storage_create_cp_ls_and_rm(gcloud, gcp, library, tmp_path):
    rc, _out, err = gcloud("gcloud storage buckets create gs://gc-bucket")
    assert rc == 0, err
    src = tmp_path / "hello.txt"
    src.write_text("hello from gcloud\n")
    rc, _out, err = gcloud(f"gcloud storage cp {src} gs://gc-bucket/dir/hello.txt")
    assert rc == 0, err
    rc, out, err = gcloud("gcloud storage ls gs://gc-bucket")
    assert rc == 0 and out.split() == ["gs://gc-bucket/dir/"], err
    rc, out, err = gcloud("gcloud storage ls gs://gc-bucket/dir/")
    assert rc == 0 and out.split() == ["gs://gc-bucket/dir/hello.txt"], err
    rc, out, err = gcloud("gcloud storage ls")
    assert rc == 0 and out.split() == ["gs://gc-bucket/"], err
    # What gcloud uploaded, the library reads, and what the library uploads, gcloud downloads.
    assert library.bucket("gc-bucket").blob("dir/hello.txt").download_as_text() == "hello from gcloud\n"
    library.bucket("gc-bucket").blob("from-lib.txt").upload_from_string("from the library")
    down = tmp_path / "down.txt"
    rc, _out, err = gcloud(f"gcloud storage cp gs://gc-bucket/from-lib.txt {down}")
    assert rc == 0 and down.read_text() == "from the library", err
    rc, out, err = gcloud("gcloud storage ls gs://gc-bucket/nothing-here")
    assert rc == 1 and "matched no objects" in err
    rc, _out, err = gcloud("gcloud storage rm -r gs://gc-bucket")
    assert rc == 0, err
    assert library.lookup_bucket("gc-bucket") is None


@pytest.mark.skipif(shutil.which("gcloud") is None, reason="gcloud is not installed")
def test_gcloud_resumable_uploads_whole_and_in_chunks(gcloud, gcp, library, tmp_path):
    library.create_bucket("gc-big-bucket")
    src = tmp_path / "big.bin"
    src.write_bytes(os.urandom(3 * 256 * 1024 + 1000))
    # A file over gcloud's resumable threshold: a resumable session (apitools starts it at /resumable/upload/).
    rc, _out, err = gcloud(f"CLOUDSDK_STORAGE_RESUMABLE_THRESHOLD=1024 gcloud storage cp {src} gs://gc-big-bucket/file.bin")
    assert rc == 0, err
    assert gcp.requests.all(method="POST", contains="/resumable/upload/") and gcp.requests.all(method="PUT")
    # A stream of unknown size goes in chunks of upload_chunk_size, each but the last answered 308.
    gcp.requests.clear()
    rc, _out, err = gcloud(f"cat {src} | CLOUDSDK_STORAGE_UPLOAD_CHUNK_SIZE=262144 gcloud storage cp - "
                           "gs://gc-big-bucket/stream.bin")
    assert rc == 0, err
    assert [r.status for r in gcp.requests.all(method="PUT")] == [308, 308, 308, 200]
    for name in ("file.bin", "stream.bin"):
        assert library.bucket("gc-big-bucket").blob(name).download_as_bytes() == src.read_bytes()
    down = tmp_path / "down.bin"
    rc, _out, err = gcloud(f"gcloud storage cp gs://gc-big-bucket/stream.bin {down}")
    assert rc == 0 and down.read_bytes() == src.read_bytes(), err
