"""gcpgpu.node.workspace's Secret Manager call and input checks, against a stand-in server that records what it gets."""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import google_crc32c
import pytest

from gcpgpu.node import workspace as replica
from gcpgpu.node.launch import Metadata
from gcpgpu.node.workspace import ReplicaError


class Stub:
    """Answers every GET with the next (status, body) in `answers`, recording path and headers."""

    def __init__(self) -> None:
        self.answers: list[tuple[int, dict]] = []
        self.seen: list[tuple[str, dict]] = []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                stub.seen.append((self.path, dict(self.headers)))
                status, body = stub.answers.pop(0) if stub.answers else (500, {})
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_port}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()


@pytest.fixture(scope="module")
def _stub() -> Iterator[Stub]:
    server = Stub()
    yield server
    server.httpd.shutdown()


@pytest.fixture
def stub(_stub: Stub) -> Stub:
    _stub.answers.clear()
    _stub.seen.clear()
    return _stub


class FakeMetadata(Metadata):
    def __init__(self, values: dict[str, str]) -> None:
        super().__init__("http://127.0.0.1:9")
        self.values = values

    def get(self, path: str) -> str | None:
        return self.values.get(path)


TOKEN = {replica.TOKEN_PATH: json.dumps({"access_token": "ya29.abc", "expires_in": 3000, "token_type": "Bearer"})}


def _payload(data: bytes, crc: int | None = None) -> dict:
    crc = google_crc32c.value(data) if crc is None else crc
    return {"name": "projects/1/secrets/hf/versions/3",
            "payload": {"data": base64.b64encode(data).decode(), "dataCrc32c": str(crc)}}


def test_access_asks_secret_manager_with_the_service_accounts_token(stub):
    stub.answers = [(200, _payload(b"tok-1")), (200, _payload(b"tok-2"))]
    env = {"GCPGPU_SECRETMANAGER_URL": stub.url,
           "GCPGPU_SECRETS": json.dumps({"HF_TOKEN": "projects/p/secrets/hf", "B": "projects/p/secrets/b/versions/2"})}
    assert replica.secret_env(env, FakeMetadata(TOKEN)) == {"HF_TOKEN": "tok-1", "B": "tok-2"}
    assert [path for path, _ in stub.seen] == ["/v1/projects/p/secrets/hf/versions/latest:access",
                                               "/v1/projects/p/secrets/b/versions/2:access"]
    assert all(headers["Authorization"] == "Bearer ya29.abc" for _, headers in stub.seen)


def test_a_busy_service_is_asked_again(stub, monkeypatch):
    monkeypatch.setattr(replica.time, "sleep", lambda seconds: None)
    stub.answers = [(503, {"error": {"code": 503, "message": "busy"}}), (200, _payload(b"v"))]
    assert replica.access_secret("X", "projects/p/secrets/x/versions/1", stub.url, "t") == b"v"
    assert len(stub.seen) == 2


@pytest.mark.parametrize(
    ("answer", "words"),
    [
        ((403, {"error": {"code": 403, "message": "Permission 'secretmanager.versions.access' denied for resource "
                                                   "'projects/p/secrets/x/versions/1' (or it may not exist)."}}),
         "403 Permission 'secretmanager.versions.access' denied for resource 'projects/p/secrets/x/versions/1' (or it "
         "may not exist). (the job's service account needs roles/secretmanager.secretAccessor on it)"),
        ((200, _payload(b"s3cr3t", crc=1)), "the payload arrived damaged (its CRC32C does not match)"),
        ((200, {"name": "n"}), "Secret Manager's answer has no payload"),
    ],
    ids=["denied", "crc", "no-payload"],
)
def test_a_failed_access_names_the_variable_and_the_secret_and_never_a_value(stub, answer, words):
    stub.answers = [answer]
    with pytest.raises(ReplicaError) as e:
        replica.access_secret("X", "projects/p/secrets/x/versions/1", stub.url, "t")
    assert str(e.value) == f"secret X (projects/p/secrets/x/versions/1): {words}"
    assert "s3cr3t" not in str(e.value) and base64.b64encode(b"s3cr3t").decode() not in str(e.value)


def test_without_a_token_googles_endpoint_is_not_asked():
    env = {"GCPGPU_SECRETS": json.dumps({"HF_TOKEN": "projects/p/secrets/hf"})}
    with pytest.raises(ReplicaError, match=r"^secret HF_TOKEN \(projects/p/secrets/hf/versions/latest\): no access "
                                          r"token: the metadata server gave none"):
        replica.secret_env(env, FakeMetadata({}))


@pytest.mark.parametrize(
    ("secrets", "words"),
    [
        ('{"HF_TOKEN": "hf"}', "GCPGPU_SECRETS: HF_TOKEN: 'hf' is not projects/P/secrets/NAME[/versions/V]"),
        ('{"1BAD": "projects/p/secrets/s"}', "GCPGPU_SECRETS: '1BAD' is not an environment variable name"),
        ('["projects/p/secrets/s"]', "GCPGPU_SECRETS must be a JSON object"),
        ("{nope", "GCPGPU_SECRETS is not JSON"),
    ],
)
def test_bad_secret_names_are_refused_before_any_request(secrets, words):
    with pytest.raises(ReplicaError) as e:
        replica.secret_names({"GCPGPU_SECRETS": secrets})
    assert e.value.exit_code == 2 and str(e.value).startswith(words)


@pytest.mark.parametrize("source", ["gs://out-bkt/evil/runs/7", "gs://evil-bkt/runs/7"])
def test_mount_folders_are_never_made_through_a_link_planted_in_gcs(tmp_path, source):
    """A job wrote a link into a bucket (or in /gcs itself, as a bucket's name): making a --mount's output
    folder must not create (nor, as root, hand to the job's user) a folder where it points."""
    gcs = tmp_path / "gcs"
    outside = tmp_path / "outside"
    outside.mkdir()
    (gcs / "out-bkt").mkdir(parents=True)
    (gcs / "out-bkt" / "evil").symlink_to(outside)
    (gcs / "evil-bkt").symlink_to(outside)
    mounts = json.dumps([{"source": source, "target": str(tmp_path / "top" / "out")}])
    with pytest.raises(ReplicaError, match=r"is a link \(or a file\), not a folder: mount folders are made without "
                                           "following links; refused") as refused:
        replica.make_mounts({"GCPGPU_MOUNTS": mounts, "GCPGPU_GCS_ROOT": str(gcs)}, owner=(4242, 4242))
    assert len(str(refused.value).splitlines()) == 1
    assert list(outside.iterdir()) == []
    assert not (tmp_path / "top").exists()


def test_a_mount_targets_folders_are_made_without_following_links_either(tmp_path):
    (tmp_path / "gcs" / "b").mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    (tmp_path / "top").symlink_to(outside)
    mounts = json.dumps([{"source": "gs://b/out", "target": str(tmp_path / "top" / "sub" / "out")}])
    with pytest.raises(ReplicaError, match=f"{tmp_path / 'top'} is a link"):
        replica.make_mounts({"GCPGPU_MOUNTS": mounts, "GCPGPU_GCS_ROOT": str(tmp_path / "gcs")})
    assert list(outside.iterdir()) == []
