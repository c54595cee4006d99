"""Cloud Storage's upload and download protocol at the wire, as clients other than Python's send it:
resumable sessions (308 and Range, status queries, retries that repeat bytes), apitools' multipart
bodies, gzip bodies and transcoding, and Google's HTTP batch."""

from __future__ import annotations

import base64
import gzip
import hashlib
import json

import pytest
import requests

from gcpgpu.fakes.server import Emulator
from gcpgpu.gcp.clients import Clients

DATA = bytes(range(200))


@pytest.fixture
def base(gcp: Emulator) -> str:
    Clients(emulator=gcp.address, project="wire-project").storage().create_bucket("wire-bucket")
    return gcp.url


def start(base: str, name: str = "r.bin", bucket: str = "wire-bucket", **meta) -> requests.Response:
    return requests.post(f"{base}/upload/storage/v1/b/{bucket}/o", params={"uploadType": "resumable"},
                         json={"name": name, **meta}, timeout=10)


def put(url: str, body: bytes, content_range: str, **headers: str) -> requests.Response:
    return requests.put(url, data=body, headers={"Content-Range": content_range, **headers}, timeout=10)


def test_a_resumable_session_step_by_step(gcp, base):
    opened = start(base)
    assert opened.status_code == 200
    url = opened.headers["Location"]
    assert url.startswith(f"{base}/upload/storage/v1/b/wire-bucket/o?") and "upload_id=" in url
    asked = put(url, b"", "bytes */*")
    assert asked.status_code == 308 and "Range" not in asked.headers  # nothing held yet
    first = put(url, DATA[:100], "bytes 0-99/*")
    assert first.status_code == 308 and first.headers["Range"] == "bytes=0-99"
    assert put(url, b"", "bytes */*").headers["Range"] == "bytes=0-99"
    # A retry that repeats bytes already held (its answer was lost): only the new ones count.
    again = put(url, DATA[50:150], "bytes 50-149/*")
    assert again.status_code == 308 and again.headers["Range"] == "bytes=0-149"
    gap = put(url, DATA[160:170], "bytes 160-169/*")
    assert gap.status_code == 400 and "send from byte 150" in gap.json()["error"]["message"]
    done = put(url, DATA[150:], "bytes 150-199/200")
    assert done.status_code == 200 and done.json()["size"] == "200" and done.json()["name"] == "r.bin"
    assert put(url, DATA[150:], "bytes 150-199/200").json()["generation"] == done.json()["generation"]
    assert requests.get(done.json()["mediaLink"], timeout=10).content == DATA
    assert not any(gcp.storage.disk.root.joinpath(".gcs-uploads").iterdir())  # moved into place, not copied


def test_a_whole_object_in_one_put_and_the_final_hash_check(gcp, base):
    url = start(base, "one.bin").headers["Location"]
    wrong = base64.b64encode(hashlib.md5(b"other").digest()).decode()
    refused = put(url, DATA, "bytes 0-199/200", **{"X-Goog-Hash": f"md5={wrong}"})
    assert refused.status_code == 400 and "doesn't match calculated MD5" in refused.json()["error"]["message"]
    assert requests.get(f"{base}/storage/v1/b/wire-bucket/o/one.bin", timeout=10).status_code == 404
    url = start(base, "one.bin").headers["Location"]
    right = base64.b64encode(hashlib.md5(DATA).digest()).decode()
    assert put(url, DATA, "bytes 0-199/200", **{"X-Goog-Hash": f"md5={right}"}).status_code == 200


def test_cancelled_sessions_and_sessions_for_no_bucket(gcp, base):
    url = start(base).headers["Location"]
    assert requests.delete(url, timeout=10).status_code == 499
    assert put(url, DATA, "bytes 0-199/200").status_code == 404
    missing = start(base, bucket="no-such-bucket")
    assert missing.status_code == 404 and missing.json()["error"]["message"] == "The specified bucket does not exist."


def test_apitools_multipart_with_a_single_quoted_boundary(gcp, base):
    # apitools (gcloud) writes its email-package boundary with %r: single quotes, '=' inside, '\n' lines.
    boundary = "===============4242424242424242=="
    body = (f"--{boundary}\nContent-Type: application/json\nMIME-Version: 1.0\n\n"
            + json.dumps({"name": "from-apitools.txt", "bucket": "wire-bucket"})
            + f"\n--{boundary}\nContent-Type: text/plain\nMIME-Version: 1.0\nContent-Transfer-Encoding: binary\n\n"
            + "line one\nline two\n" + f"\n--{boundary}--").encode()
    made = requests.post(f"{base}/upload/storage/v1/b/wire-bucket/o", params={"uploadType": "multipart"},
                         data=body, headers={"Content-Type": f"multipart/related; boundary='{boundary}'"}, timeout=10)
    assert made.status_code == 200, made.text
    assert made.json()["contentType"] == "text/plain"
    assert requests.get(made.json()["mediaLink"], timeout=10).content == b"line one\nline two\n"


def test_gzip_request_bodies_and_transcoded_downloads(gcp, base):
    made = requests.post(f"{base}/upload/storage/v1/b/wire-bucket/o",
                         params={"uploadType": "media", "name": "plain.txt"}, data=gzip.compress(b"unpacked"),
                         headers={"Content-Encoding": "gzip", "Content-Type": "text/plain"}, timeout=10)
    assert made.json()["size"] == "8"
    packed = gzip.compress(b"stored gzipped")
    made = requests.post(f"{base}/upload/storage/v1/b/wire-bucket/o", data=packed, timeout=10,
                         params={"uploadType": "media", "name": "z.txt", "contentEncoding": "gzip"})
    assert made.json()["contentEncoding"] == "gzip"
    link = made.json()["mediaLink"]
    # A client that does not take gzip gets the bytes unpacked; one that does gets them as stored.
    plain = requests.get(link, headers={"Accept-Encoding": "identity"}, stream=True, timeout=10)
    assert plain.raw.read() == b"stored gzipped" and "Content-Encoding" not in plain.headers
    raw = requests.get(link, headers={"Accept-Encoding": "gzip"}, stream=True, timeout=10)
    assert raw.headers["Content-Encoding"] == "gzip" and raw.raw.read() == packed


def test_download_headers_clients_check(gcp, base):
    made = requests.post(f"{base}/upload/storage/v1/b/wire-bucket/o", data=DATA, timeout=10,
                         params={"uploadType": "media", "name": "h.bin"}).json()
    got = requests.get(f"{base}/storage/v1/b/wire-bucket/o/h.bin", params={"alt": "media"}, timeout=10)
    assert got.content == DATA
    assert got.headers["X-Goog-Hash"] == f"crc32c={made['crc32c']},md5={made['md5Hash']}"
    assert got.headers["X-Goog-Generation"] == made["generation"]
    assert got.headers["X-Goog-Stored-Content-Length"] == "200"
    missing = requests.get(f"{base}/download/storage/v1/b/wire-bucket/o/nope", params={"alt": "media"}, timeout=10)
    assert missing.status_code == 404 and missing.text == "No such object: wire-bucket/nope"


def test_escaped_slashes_and_batches(gcp, base):
    storage = Clients(emulator=gcp.address, project="wire-project").storage()
    bucket = storage.bucket("wire-bucket")
    names = ["d/a%2Fb+c d.txt", "d/x.txt", "d/y.txt"]
    for name in names:
        bucket.blob(name).upload_from_string(name.encode())
    assert bucket.blob(names[0]).download_as_bytes() == names[0].encode()
    with storage.batch():  # Google's HTTP batch: one multipart/mixed request
        for name in names:
            bucket.blob(name).delete()
    assert list(storage.list_blobs(bucket)) == []
    deletes = gcp.requests.all(method="DELETE")
    assert len(deletes) == 3 and deletes[0].path.endswith("/o/d/a%2Fb+c d.txt")  # the name, unescaped once
