"""Hostile requests against the emulator's front door (gcpgpu/fakes/gate.py, http_server.py).

One table of what a web page, a DNS-rebound name or an oversized client can send, on every surface
(each service's REST API, the /_emulator/ control endpoints, uploads): each is refused with its
status and one line of Google's error JSON, and changes nothing. A second table keeps what Google's
clients send working. Then the servers themselves: bound to 127.0.0.1 only (REST and gRPC), a gRPC
port a page cannot speak to, slow and idle clients that take no thread and are closed.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from gcpgpu.fakes import http_server, server
from gcpgpu.fakes.server import Emulator

from .builders import PROJECT

NET = f"/compute/v1/projects/{PROJECT}/global/networks"
JOB = f"/v1/projects/{PROJECT}/locations/us-central1/customJobs"
SECRET = f"/v1/projects/{PROJECT}/secrets?secretId=s1"
SERIES = f"/monitoring/v3/projects/{PROJECT}/timeSeries"
BUCKETS = f"/storage/v1/b?project={PROJECT}"
UPLOAD = "/upload/storage/v1/b/gate-bucket/o?uploadType=media&name=x.txt"
EVIL = "https://evil.example"
JSON = {"Content-Type": "application/json"}
NETWORK = json.dumps({"name": "n1", "autoCreateSubnetworks": False}).encode()
# The job a page would post to run `id` on the owner's machine (issue 36, item 2).
CUSTOM_JOB = json.dumps({"displayName": "x", "jobSpec": {"workerPoolSpecs": [{
    "machineSpec": {"machineType": "n1-standard-4"}, "replicaCount": 1,
    "containerSpec": {"imageUri": "busybox", "command": ["sh", "-c", "id > /gcs/b/ran_as"]}}]}}).encode()
SEED = 4242  # a fault setting each case starts with: a refused reset or faults write leaves it

# (id, method, path, headers, body, status, text the one-line message holds); {port} is the emulator's.
REFUSED: list[tuple[str, str, str, dict[str, str], bytes, int, str]] = [
    # -- a page on another site: browsers send its Origin with every write, and with cross-site reads
    ("origin-foreign-compute", "POST", NET, {**JSON, "Origin": EVIL}, NETWORK, 403, "Origin 'https://evil.example'"),
    ("origin-foreign-vertex-job", "POST", JOB, {**JSON, "Origin": EVIL}, CUSTOM_JOB, 403, "no web page"),
    ("origin-foreign-reset", "POST", "/_emulator/reset", {**JSON, "Origin": EVIL}, b"{}", 403, "Origin"),
    ("origin-foreign-faults", "PUT", "/_emulator/faults", {**JSON, "Origin": EVIL}, b'{"error_rate": 1}', 403,
     "Origin"),
    ("origin-foreign-info-read", "GET", "/_emulator/info", {"Origin": EVIL}, b"", 403, "Origin"),
    ("origin-foreign-upload", "POST", UPLOAD, {"Content-Type": "text/plain", "Origin": EVIL}, b"hi", 403, "Origin"),
    ("origin-foreign-bucket", "POST", BUCKETS, {**JSON, "Origin": EVIL}, b'{"name": "b-evil"}', 403, "Origin"),
    ("origin-null-sandboxed-page", "POST", NET, {**JSON, "Origin": "null"}, NETWORK, 403, "Origin 'null'"),
    ("origin-other-local-port", "POST", NET, {**JSON, "Origin": "http://127.0.0.1:1"}, NETWORK, 403, "Origin"),
    ("origin-https-own-host", "POST", NET, {**JSON, "Origin": "https://localhost:{port}"}, NETWORK, 403, "Origin"),
    # -- DNS rebinding: the page's own name, re-pointed at 127.0.0.1, is still its Host
    ("host-rebound-read", "GET", NET, {"Host": "evil.example:{port}"}, b"", 403, "Host 'evil.example:"),
    ("host-rebound-reset", "POST", "/_emulator/reset", {**JSON, "Host": "evil.example"}, b"{}", 403, "Host"),
    ("host-rebound-vertex-job", "POST", JOB, {**JSON, "Host": "evil.example:{port}"}, CUSTOM_JOB, 403, "Host"),
    ("host-rebound-upload", "POST", UPLOAD, {"Content-Type": "text/plain", "Host": "evil.example"}, b"hi", 403,
     "Host"),
    ("host-lookalike-ip", "GET", NET, {"Host": "127.0.0.1.evil.example:{port}"}, b"", 403, "Host"),
    ("host-lookalike-name", "GET", "/_emulator/faults", {"Host": "localhost.evil.example"}, b"", 403, "Host"),
    ("host-empty", "GET", NET, {"Host": ""}, b"", 403, "Host"),
    # -- bodies a page may send without asking first: text/plain and the form types
    ("text-plain-network", "POST", NET, {"Content-Type": "text/plain;charset=UTF-8"}, NETWORK, 415, "text/plain"),
    ("text-plain-vertex-job", "POST", JOB, {"Content-Type": "text/plain"}, CUSTOM_JOB, 415, "application/json"),
    ("form-secret", "POST", SECRET, {"Content-Type": "application/x-www-form-urlencoded"},
     b'{"replication": {"automatic": {}}}', 415, "x-www-form-urlencoded"),
    ("multipart-form-series", "POST", SERIES, {"Content-Type": "multipart/form-data; boundary=x"},
     b'--x\r\n\r\n{}\r\n--x--', 415, "multipart/form-data"),
    ("text-plain-bucket", "POST", BUCKETS, {"Content-Type": "text/plain"}, b'{"name": "b-evil"}', 415, "text/plain"),
    ("text-plain-faults", "PUT", "/_emulator/faults", {"Content-Type": "text/plain"}, b'{"error_rate": 1}', 415,
     "text/plain"),
    ("text-plain-empty-reset", "POST", "/_emulator/reset", {"Content-Type": "text/plain"}, b"", 415, "text/plain"),
    ("form-empty-reset", "POST", "/_emulator/reset", {"Content-Type": "application/x-www-form-urlencoded"}, b"", 415,
     "form"),
    ("no-content-type-network", "POST", NET, {}, NETWORK, 415, "(none)"),
    ("batch-not-multipart", "POST", "/batch/compute/v1", {"Content-Type": "text/plain"}, b"x", 415, "multipart/mixed"),
    # -- sizes: a body past the cap is refused before it is read; Compute's own field limit
    ("body-over-cap", "POST", NET, JSON, b'{"name": "n1", "description": "' + b"d" * (5 * 2**20) + b'"}', 413,
     "Request payload size exceeds the limit: 4194304 bytes."),
    ("body-over-cap-faults", "PUT", "/_emulator/faults", JSON, b" " * (5 * 2**20) + b"{}", 413, "exceeds the limit"),
    ("network-description-2049", "POST", NET, JSON,
     json.dumps({"name": "n1", "description": "d" * 2049}).encode(), 400, "'resource.description'"),
]

# What Google's clients and gcpgpu send stays served (the id says what it keeps working).
SERVED: list[tuple[str, str, str, dict[str, str], bytes, int]] = [
    ("own-origin-127", "POST", NET, {**JSON, "Origin": "http://127.0.0.1:{port}"}, NETWORK, 200),
    ("own-origin-localhost", "POST", NET, {**JSON, "Origin": "http://localhost:{port}"}, NETWORK, 200),
    ("host-localhost", "GET", NET, {"Host": "localhost:{port}"}, b"", 200),
    ("host-without-port", "GET", NET, {"Host": "127.0.0.1"}, b"", 200),
    ("json-with-charset", "POST", NET, {"Content-Type": "application/json; charset=UTF-8"}, NETWORK, 200),
    ("bodyless-post", "POST", "/_emulator/reset", {}, b"", 200),
    ("network-description-2048", "POST", NET, JSON, json.dumps({"name": "n1", "description": "d" * 2048}).encode(), 200),
    ("media-upload-any-type", "POST", UPLOAD, {"Content-Type": "text/plain"}, b"hello", 200),
    ("media-upload-over-cap", "POST", UPLOAD, {"Content-Type": "application/octet-stream"}, b"z" * (5 * 2**20), 200),
    ("multipart-related-upload", "POST", "/upload/storage/v1/b/gate-bucket/o?uploadType=multipart",
     {"Content-Type": "multipart/related; boundary=b1"},
     b'--b1\r\nContent-Type: application/json\r\n\r\n{"name": "m.txt"}\r\n--b1\r\nContent-Type: text/plain\r\n\r\n'
     b"hi\r\n--b1--\r\n", 200),
]


def _send(port: int, method: str, path: str, headers: dict[str, str], body: bytes) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request(method, path, body=body or None,
                     headers={k: v.replace("{port}", str(port)) for k, v in headers.items()})
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


@pytest.fixture
def door(gcp: Emulator) -> Iterator[Emulator]:
    gcp.storage.insert_bucket(PROJECT, {"name": "gate-bucket"})
    gcp.faults.update({"seed": SEED})
    gcp.requests.clear()
    yield gcp


@pytest.mark.parametrize(("method", "path", "headers", "body", "status", "text"), [c[1:] for c in REFUSED],
                         ids=[c[0] for c in REFUSED])
def test_a_hostile_request_is_refused_in_one_line_and_changes_nothing(door, method, path, headers, body, status, text):
    code, raw = _send(door.port, method, path, headers, body)
    assert code == status, raw[:300]
    assert b"\n" not in raw.strip() and len(raw) < 1000, raw[:300]  # one line, the refused value quoted short
    error = json.loads(raw)["error"]
    assert error["code"] == status and text in error["message"], error
    assert door.faults.seed == SEED  # no reset, no fault change
    assert [n["name"] for n in door.compute.list(PROJECT, "global/networks")] == ["default"]
    assert not door.vertex.jobs and not door.secretmanager.list_secrets(PROJECT).get("secrets")
    assert [b["name"] for b in door.storage.list_buckets(PROJECT)[0]] == ["gate-bucket"]
    assert door.storage.list_objects("gate-bucket")[0] == []
    reached = [r for r in door.requests.all() if r.status != 400]  # a Compute field limit is the API's own answer
    assert reached == [], reached


@pytest.mark.parametrize(("method", "path", "headers", "body", "status"), [c[1:] for c in SERVED],
                         ids=[c[0] for c in SERVED])
def test_what_googles_clients_send_is_still_served(door, method, path, headers, body, status):
    code, raw = _send(door.port, method, path, headers, body)
    assert code == status, raw[:300]


def test_the_tables_cover_every_surface():
    paths = {c[2].split("?")[0] for c in REFUSED}
    assert {NET, JOB, "/_emulator/reset", "/_emulator/faults", UPLOAD.split("?")[0], SERIES}.issubset(paths)
    assert {c[5] for c in REFUSED} == {400, 403, 413, 415}


def _other_address() -> str | None:
    """An address of this machine that is not loopback (no packet is sent to find it), or None."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # TEST-NET-1: only picks the interface a route would use
            address = probe.getsockname()[0]
        except OSError:
            return None
    return None if address.startswith("127.") or address == "0.0.0.0" else address


def test_rest_and_grpc_listen_on_loopback_only(gcp):
    other = _other_address()
    if other is None:
        pytest.skip("this machine has no address besides loopback")
    for port in (gcp.port, gcp.grpc_port):
        with socket.socket() as s:
            s.settimeout(5)
            assert s.connect_ex((other, port)) != 0, f"port {port} answers on {other}"


def test_the_grpc_port_does_not_serve_a_pages_http1_post(gcp):
    # A page can only speak HTTP/1 (h2 needs TLS in a browser): the gRPC server must not act on it.
    with socket.create_connection(("127.0.0.1", gcp.grpc_port), timeout=10) as s:
        s.sendall(b"POST /google.cloud.aiplatform.v1.JobService/CreateCustomJob HTTP/1.1\r\n"
                  b"Host: 127.0.0.1\r\nOrigin: https://evil.example\r\nContent-Type: text/plain\r\n"
                  b"Content-Length: 2\r\n\r\nhi")
        answer = b""
        try:
            while chunk := s.recv(4096):
                answer += chunk
        except (TimeoutError, ConnectionResetError):
            pass
    assert not answer.startswith(b"HTTP/1.1 2"), answer[:200]
    assert not gcp.vertex.jobs


@pytest.fixture
def rest_only(monkeypatch) -> Iterator[None]:
    """An emulator of its own, REST only (no gRPC server to wait for)."""
    monkeypatch.setattr(server, "GRPC_SERVICES", [])
    monkeypatch.setattr(server, "GRPC_SERVICE_FACTORIES", [])
    yield


def _slow(port: int, partial: bytes) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(partial)
    return s


def test_slow_clients_take_no_thread_and_a_normal_request_is_answered_while_they_hang(rest_only):
    with Emulator() as emu:
        assert _send(emu.port, "GET", "/_emulator/info", {}, b"")[0] == 200
        before = threading.active_count()
        slow = []
        try:
            for i in range(http_server.THREADS + 100):  # more than the threads that serve requests
                head = (f"POST {NET} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                        f"Content-Length: 1000\r\n").encode()
                # Half stop inside the head, half inside the body: neither is a request yet.
                slow.append(_slow(emu.port, head if i % 2 else head + b"\r\n{\"name\""))
            t0 = time.monotonic()
            code, raw = _send(emu.port, "GET", f"/compute/v1/projects/{PROJECT}/zones", {}, b"")
            took = time.monotonic() - t0
            assert code == 200, raw[:200]
            assert took < 10, took
            # Every slow socket is accepted by now (the normal one came after them): none holds a thread.
            assert threading.active_count() <= before + 5, (before, threading.active_count())
        finally:
            for s in slow:
                s.close()
        assert _send(emu.port, "GET", "/_emulator/info", {}, b"")[0] == 200


def _closed_by_server(s: socket.socket, within_s: float) -> bool:
    s.settimeout(within_s)
    try:
        return s.recv(1) == b""
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True


def test_idle_and_stalled_connections_are_closed(rest_only, monkeypatch):
    monkeypatch.setattr(http_server, "IDLE_TIMEOUT_S", 1)
    with Emulator() as emu:
        idle = socket.create_connection(("127.0.0.1", emu.port), timeout=10)
        stalled = _slow(emu.port, b"GET /_emulator/info HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        try:
            assert _closed_by_server(idle, 15), "an idle connection stayed open"
            assert _closed_by_server(stalled, 15), "a connection stalled inside its request head stayed open"
        finally:
            idle.close()
            stalled.close()
        assert _send(emu.port, "GET", "/_emulator/info", {}, b"")[0] == 200
