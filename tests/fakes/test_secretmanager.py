"""The emulator's Secret Manager, driven through Google's discovery-based client and plain HTTP as the
REST reference shapes the calls, and (when installed) google-cloud-secret-manager's REST transport."""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request
from typing import Any

import google_crc32c
import httplib2
import pytest
from googleapiclient import discovery
from googleapiclient.errors import HttpError

from gcpgpu.fakes.secretmanager.backend import project_number
from gcpgpu.fakes.server import Emulator

from .builders import PROJECT

NUMBER = project_number(PROJECT)


def _svc(emu: Emulator) -> Any:
    """secretmanager v1 from the discovery document googleapiclient ships, with no credentials."""
    return discovery.build("secretmanager", "v1", http=httplib2.Http(timeout=30), static_discovery=True,
                           client_options={"api_endpoint": f"{emu.url}/"})


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _error(e: HttpError) -> dict:
    return json.loads(e.content)["error"]


def _http(emu: Emulator, method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
    request = urllib.request.Request(f"{emu.url}{path}", method=method,
                                     data=json.dumps(body).encode() if body is not None else None,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_create_add_and_access_through_the_discovery_client(gcp: Emulator) -> None:
    secrets = _svc(gcp).projects().secrets()
    created = secrets.create(parent=f"projects/{PROJECT}", secretId="wandb",
                             body={"replication": {"automatic": {}}, "labels": {"team": "ml"}}).execute()
    # Names carry the project's number, as the service writes them.
    assert created["name"] == f"projects/{NUMBER}/secrets/wandb"
    assert created["replication"] == {"automatic": {}} and created["labels"] == {"team": "ml"}
    assert created["createTime"].endswith("Z") and created["etag"].startswith('"')

    v1 = secrets.addVersion(parent=f"projects/{PROJECT}/secrets/wandb", body={"payload": {"data": _b64(b"one")}}).execute()
    v2 = secrets.addVersion(parent=f"projects/{PROJECT}/secrets/wandb",
                            body={"payload": {"data": _b64(b"two"),
                                              "dataCrc32c": str(google_crc32c.value(b"two"))}}).execute()
    assert v1["name"] == f"projects/{NUMBER}/secrets/wandb/versions/1" and v1["state"] == "ENABLED"
    assert v1["replicationStatus"] == {"automatic": {}} and "clientSpecifiedPayloadChecksum" not in v1
    assert v2["name"].endswith("/versions/2") and v2["clientSpecifiedPayloadChecksum"] is True

    versions = secrets.versions()
    latest = versions.access(name=f"projects/{PROJECT}/secrets/wandb/versions/latest").execute()
    assert latest["name"] == f"projects/{NUMBER}/secrets/wandb/versions/2"  # latest comes back resolved
    assert base64.b64decode(latest["payload"]["data"]) == b"two"
    # int64 as a string, the CRC32C (Castagnoli) of the data, whether or not the client sent one.
    assert latest["payload"]["dataCrc32c"] == str(google_crc32c.value(b"two"))
    first = versions.access(name=f"projects/{NUMBER}/secrets/wandb/versions/1").execute()  # by number too
    assert base64.b64decode(first["payload"]["data"]) == b"one"
    assert first["payload"]["dataCrc32c"] == str(google_crc32c.value(b"one"))

    assert secrets.get(name=f"projects/{PROJECT}/secrets/wandb").execute()["name"] == created["name"]
    listed = versions.list(parent=f"projects/{PROJECT}/secrets/wandb").execute()
    assert [v["name"].rsplit("/", 1)[-1] for v in listed["versions"]] == ["2", "1"]  # newest first
    assert listed["totalSize"] == 2
    assert versions.get(name=f"projects/{PROJECT}/secrets/wandb/versions/latest").execute()["name"] == latest["name"]


def test_errors_are_googles_statuses_and_messages(gcp: Emulator) -> None:
    secrets = _svc(gcp).projects().secrets()
    parent = f"projects/{PROJECT}"
    with pytest.raises(HttpError) as e:
        secrets.create(parent=parent, secretId="hf", body={}).execute()
    assert e.value.status_code == 400 and _error(e.value)["status"] == "INVALID_ARGUMENT"
    assert "replication" in _error(e.value)["message"]
    with pytest.raises(HttpError) as e:
        secrets.create(parent=parent, secretId="bad/id", body={"replication": {"automatic": {}}}).execute()
    assert e.value.status_code in (400, 404)  # a slash never reaches the method as an id

    secrets.create(parent=parent, secretId="hf", body={"replication": {"automatic": {}}}).execute()
    with pytest.raises(HttpError) as e:
        secrets.create(parent=parent, secretId="hf", body={"replication": {"automatic": {}}}).execute()
    assert e.value.status_code == 409
    assert _error(e.value) == {"code": 409, "status": "ALREADY_EXISTS",
                               "message": f"Secret [projects/{NUMBER}/secrets/hf] already exists."}

    with pytest.raises(HttpError) as e:  # a secret with no versions yet
        secrets.versions().access(name=f"{parent}/secrets/hf/versions/latest").execute()
    assert e.value.status_code == 404
    assert _error(e.value)["message"] == f"Secret [projects/{NUMBER}/secrets/hf] not found or has no versions."
    with pytest.raises(HttpError) as e:
        secrets.versions().access(name=f"{parent}/secrets/nope/versions/1").execute()
    assert _error(e.value)["message"] == f"Secret [projects/{NUMBER}/secrets/nope] not found or has no versions."
    with pytest.raises(HttpError) as e:
        secrets.get(name=f"{parent}/secrets/nope").execute()
    assert e.value.status_code == 404 and _error(e.value)["message"] == f"Secret [projects/{NUMBER}/secrets/nope] not found."

    secrets.addVersion(parent=f"{parent}/secrets/hf", body={"payload": {"data": _b64(b"tok")}}).execute()
    with pytest.raises(HttpError) as e:
        secrets.versions().access(name=f"{parent}/secrets/hf/versions/7").execute()
    assert e.value.status_code == 404
    assert _error(e.value)["message"] == f"Secret Version [projects/{NUMBER}/secrets/hf/versions/7] not found."
    with pytest.raises(HttpError) as e:  # a checksum that does not match the data
        secrets.addVersion(parent=f"{parent}/secrets/hf",
                           body={"payload": {"data": _b64(b"x"), "dataCrc32c": "12345"}}).execute()
    assert e.value.status_code == 400 and _error(e.value)["status"] == "INVALID_ARGUMENT"
    with pytest.raises(HttpError) as e:
        secrets.addVersion(parent=f"{parent}/secrets/hf", body={"payload": {"data": _b64(b"x" * 65537)}}).execute()
    assert e.value.status_code == 400


def test_a_disabled_latest_version_fails_access_and_a_destroyed_one_stays_destroyed(gcp: Emulator) -> None:
    secrets = _svc(gcp).projects().secrets()
    secrets.create(parent=f"projects/{PROJECT}", secretId="k", body={"replication": {"automatic": {}}}).execute()
    for data in (b"a", b"b"):
        secrets.addVersion(parent=f"projects/{PROJECT}/secrets/k", body={"payload": {"data": _b64(data)}}).execute()
    versions = secrets.versions()
    disabled = versions.disable(name=f"projects/{PROJECT}/secrets/k/versions/2", body={}).execute()
    assert disabled["state"] == "DISABLED"
    with pytest.raises(HttpError) as e:  # latest is the newest version whatever its state
        versions.access(name=f"projects/{PROJECT}/secrets/k/versions/latest").execute()
    assert e.value.status_code == 400 and _error(e.value)["status"] == "FAILED_PRECONDITION"
    assert _error(e.value)["message"] == f"Secret Version [projects/{NUMBER}/secrets/k/versions/2] is in DISABLED state."
    assert versions.list(parent=f"projects/{PROJECT}/secrets/k", filter="state:ENABLED").execute()["versions"][0][
        "name"].endswith("/versions/1")
    destroyed = versions.destroy(name=f"projects/{PROJECT}/secrets/k/versions/1", body={}).execute()
    assert destroyed["state"] == "DESTROYED" and "destroyTime" in destroyed
    with pytest.raises(HttpError) as e:
        versions.enable(name=f"projects/{PROJECT}/secrets/k/versions/1", body={}).execute()
    assert _error(e.value)["status"] == "FAILED_PRECONDITION"
    assert versions.enable(name=f"projects/{PROJECT}/secrets/k/versions/2", body={}).execute()["state"] == "ENABLED"
    assert base64.b64decode(versions.access(name=f"projects/{PROJECT}/secrets/k/versions/latest").execute()
                            ["payload"]["data"]) == b"b"


def test_list_pages_filters_and_delete(gcp: Emulator) -> None:
    secrets = _svc(gcp).projects().secrets()
    for i in range(5):
        secrets.create(parent=f"projects/{PROJECT}", secretId=f"s{i}",
                       body={"replication": {"automatic": {}}, "labels": {"parity": "even" if i % 2 == 0 else "odd"}}).execute()
    first = secrets.list(parent=f"projects/{PROJECT}", pageSize=2).execute()
    assert [s["name"].rsplit("/", 1)[-1] for s in first["secrets"]] == ["s4", "s3"] and first["totalSize"] == 5
    rest = secrets.list(parent=f"projects/{PROJECT}", pageSize=10, pageToken=first["nextPageToken"]).execute()
    assert [s["name"].rsplit("/", 1)[-1] for s in rest["secrets"]] == ["s2", "s1", "s0"] and "nextPageToken" not in rest
    odd = secrets.list(parent=f"projects/{PROJECT}", filter="labels.parity=odd").execute()
    assert sorted(s["name"].rsplit("/", 1)[-1] for s in odd["secrets"]) == ["s1", "s3"]
    with pytest.raises(HttpError) as e:
        secrets.list(parent=f"projects/{PROJECT}", filter="topics:x").execute()
    assert e.value.status_code == 400

    etag = secrets.get(name=f"projects/{PROJECT}/secrets/s0").execute()["etag"]
    with pytest.raises(HttpError) as e:
        secrets.delete(name=f"projects/{PROJECT}/secrets/s0", etag='"stale"').execute()
    assert _error(e.value)["status"] == "FAILED_PRECONDITION"
    assert secrets.delete(name=f"projects/{PROJECT}/secrets/s0", etag=etag).execute() == {}
    with pytest.raises(HttpError) as e:
        secrets.get(name=f"projects/{PROJECT}/secrets/s0").execute()
    assert e.value.status_code == 404
    assert {} == secrets.list(parent="projects/another-project").execute()  # projects are apart
    gcp.reset()
    assert {} == secrets.list(parent=f"projects/{PROJECT}").execute()


def test_plain_http_as_the_rest_reference_shapes_it(gcp: Emulator) -> None:
    status, body = _http(gcp, "POST", f"/v1/projects/{PROJECT}/secrets?secretId=token",
                         {"replication": {"userManaged": {"replicas": [{"location": "us-central1"}]}}})
    assert status == 200 and body["replication"]["userManaged"]["replicas"] == [{"location": "us-central1"}]
    # URL-safe base64 without padding is accepted (proto3 JSON), and the data comes back standard.
    data = b"\xfb\xff-secret"
    status, body = _http(gcp, "POST", f"/v1/projects/{PROJECT}/secrets/token:addVersion",
                         {"payload": {"data": base64.urlsafe_b64encode(data).decode().rstrip("=")}})
    assert status == 200 and body["replicationStatus"] == {"userManaged": {"replicas": [{"location": "us-central1"}]}}
    status, body = _http(gcp, "GET", f"/v1/projects/{PROJECT}/secrets/token/versions/1:access")
    assert status == 200 and base64.b64decode(body["payload"]["data"]) == data
    status, body = _http(gcp, "GET", f"/v1/projects/{PROJECT}/secrets/token/versions/1:frobnicate")
    assert status == 404
    status, body = _http(gcp, "POST", f"/v1/projects/{PROJECT}/secrets/token:addVersion", {"payload": {"data": "%%"}})
    assert status == 400 and body["error"]["status"] == "INVALID_ARGUMENT"
    # The request log names the API, like every other service's.
    assert any(r.path.endswith("/versions/1:access") and r.status == 200 for r in gcp.requests.all())


def test_google_cloud_secret_manager_over_rest(gcp: Emulator) -> None:
    secretmanager = pytest.importorskip("google.cloud.secretmanager_v1")
    from google.api_core import exceptions
    from google.api_core.client_options import ClientOptions
    from google.auth.credentials import AnonymousCredentials

    client = secretmanager.SecretManagerServiceClient(
        credentials=AnonymousCredentials(), transport="rest", client_options=ClientOptions(api_endpoint=gcp.url))
    secret = client.create_secret(parent=f"projects/{PROJECT}", secret_id="lib",
                                  secret={"replication": {"automatic": {}}})
    assert secret.name == f"projects/{NUMBER}/secrets/lib"
    payload = b"from the library"
    client.add_secret_version(parent=secret.name, payload={"data": payload, "data_crc32c": google_crc32c.value(payload)})
    got = client.access_secret_version(name=f"{secret.name}/versions/latest")
    assert got.payload.data == payload and got.payload.data_crc32c == google_crc32c.value(payload)
    assert got.name == f"{secret.name}/versions/1"
    with pytest.raises(exceptions.Conflict):  # over REST the library goes by the HTTP code
        client.create_secret(parent=f"projects/{PROJECT}", secret_id="lib", secret={"replication": {"automatic": {}}})
    with pytest.raises(exceptions.NotFound):
        client.access_secret_version(name=f"projects/{PROJECT}/secrets/none/versions/latest")
    client.disable_secret_version(name=f"{secret.name}/versions/1")
    with pytest.raises(exceptions.BadRequest, match="is in DISABLED state"):  # FAILED_PRECONDITION, HTTP 400
        client.access_secret_version(name=f"{secret.name}/versions/1")
