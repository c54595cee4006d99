"""Secret Manager's state: secrets per project, their numbered versions and payloads.

Held apart from the wire format (rest.py). Names come out as the service writes them, with the
project's number (`projects/123.../secrets/S`), and a project's id or number finds the same secret.
Errors carry the canonical status and the message the service sends, HTTP code by status:
a missing secret or version 404 NOT_FOUND, a taken id 409 ALREADY_EXISTS, a disabled or destroyed
version 400 FAILED_PRECONDITION, bad input 400 INVALID_ARGUMENT.
"""

from __future__ import annotations

import base64
import binascii
import copy
import re
import threading
import uuid
from dataclasses import dataclass, field
from typing import Any

from ..core import Clock, proto_timestamp, stable_number

MAX_PAYLOAD = 64 * 1024  # bytes, as the service caps SecretPayload.data
_SECRET_ID = re.compile(r"^[A-Za-z0-9_-]{1,255}$")
_STATES = ("ENABLED", "DISABLED", "DESTROYED")


class SecretError(Exception):
    """An error as Secret Manager returns it: a canonical status and a message."""

    HTTP = {"INVALID_ARGUMENT": 400, "FAILED_PRECONDITION": 400, "NOT_FOUND": 404, "ALREADY_EXISTS": 409}

    def __init__(self, status: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message

    @property
    def http(self) -> int:
        return self.HTTP.get(self.status, 500)

    def to_json(self) -> dict:
        return {"error": {"code": self.http, "message": self.message, "status": self.status}}


def project_number(project: str) -> str:
    """The number the emulator gives a project id: the same one Compute and Vertex AI give it."""
    return project if project.isdigit() else str(100000000000 + stable_number(project, 899999999999))


def crc32c(data: bytes) -> int:
    import google_crc32c  # google-cloud-storage's dependency; C-accelerated where it can be

    return google_crc32c.value(data)


def _etag() -> str:
    # The service's etags are quoted opaque strings.
    return f'"{uuid.uuid4().hex[:14]}"'


@dataclass
class _Version:
    number: int
    data: bytes
    created: float
    client_checksum: bool
    state: str = "ENABLED"
    etag: str = field(default_factory=_etag)
    destroyed: float | None = None


@dataclass
class _Secret:
    body: dict[str, Any]  # what the caller gave that the service keeps (labels, annotations, replication ...)
    created: float
    etag: str = field(default_factory=_etag)
    versions: list[_Version] = field(default_factory=list)
    policy: dict[str, Any] = field(default_factory=dict)  # its IAM policy (bindings), as setIamPolicy left it


class SecretManagerBackend:
    """Secrets by (project number, secret id); every method takes the project as id or number."""

    def __init__(self, clock: Clock | None = None) -> None:
        self.clock = clock or Clock()
        self._lock = threading.Lock()
        self._secrets: dict[tuple[str, str], _Secret] = {}

    def reset(self) -> None:
        with self._lock:
            self._secrets.clear()

    def snapshot(self) -> list[dict]:
        """Every secret, its versions and their payloads (base64), as plain JSON for the server's --state-file
        (which it writes readable by its owner alone: these are secrets)."""
        with self._lock:
            return [{"project": number, "id": sid, "body": copy.deepcopy(s.body), "created": s.created, "etag": s.etag,
                     "policy": copy.deepcopy(s.policy),
                     "versions": [{**{k: v for k, v in vars(ver).items() if k != "data"},
                                   "data": base64.b64encode(ver.data).decode()} for ver in s.versions]}
                    for (number, sid), s in self._secrets.items()]

    def restore(self, data: list[dict]) -> None:
        with self._lock:
            self._secrets.clear()
            for row in data:
                versions = [_Version(**{**v, "data": base64.b64decode(v["data"])}) for v in row["versions"]]
                self._secrets[(row["project"], row["id"])] = _Secret(row["body"], row["created"], row["etag"], versions,
                                                                     row.get("policy", {}))

    # -- names ------------------------------------------------------------------------------
    @staticmethod
    def secret_name(project: str, secret_id: str) -> str:
        return f"projects/{project_number(project)}/secrets/{secret_id}"

    def _secret(self, project: str, secret_id: str, *, access: bool = False) -> _Secret:
        secret = self._secrets.get((project_number(project), secret_id))
        if secret is None:
            # Access says "or has no versions" even for a secret that does not exist at all.
            tail = " or has no versions." if access else "."
            raise SecretError("NOT_FOUND", f"Secret [{self.secret_name(project, secret_id)}] not found{tail}")
        return secret

    def _version(self, project: str, secret_id: str, version: str, *, access: bool = False) -> _Version:
        secret = self._secret(project, secret_id, access=access)
        if version == "latest":
            # The newest version whatever its state: a disabled newest version fails access.
            if not secret.versions:
                raise SecretError("NOT_FOUND", f"Secret [{self.secret_name(project, secret_id)}] not found or has "
                                               "no versions.")
            return secret.versions[-1]
        found = next((v for v in secret.versions if str(v.number) == version), None)
        if found is None:
            raise SecretError("NOT_FOUND", f"Secret Version [{self.secret_name(project, secret_id)}/versions/{version}] "
                                           "not found.")
        return found

    # -- wire shapes ---------------------------------------------------------------------------
    def _secret_json(self, project: str, secret_id: str, secret: _Secret) -> dict:
        return {"name": self.secret_name(project, secret_id), **secret.body,
                "createTime": proto_timestamp(secret.created), "etag": secret.etag}

    def _version_json(self, project: str, secret_id: str, secret: _Secret, version: _Version) -> dict:
        replication = secret.body.get("replication") or {}
        if "userManaged" in replication:
            replicas = [{"location": r.get("location", "")} for r in replication["userManaged"].get("replicas", [])]
            status: dict = {"userManaged": {"replicas": replicas}}
        else:
            status = {"automatic": {}}
        out: dict[str, Any] = {
            "name": f"{self.secret_name(project, secret_id)}/versions/{version.number}",
            "createTime": proto_timestamp(version.created),
            "state": version.state,
            "replicationStatus": status,
            "etag": version.etag,
        }
        if version.destroyed is not None:
            out["destroyTime"] = proto_timestamp(version.destroyed)
        if version.client_checksum:  # proto3 JSON leaves a false bool out
            out["clientSpecifiedPayloadChecksum"] = True
        return out

    # -- secrets -------------------------------------------------------------------------------
    def create_secret(self, project: str, secret_id: str, body: dict) -> dict:
        if not secret_id:
            raise SecretError("INVALID_ARGUMENT", "secret_id is required.")
        if not _SECRET_ID.match(secret_id):
            raise SecretError("INVALID_ARGUMENT", f"Secret ID [{secret_id}] is invalid: it may contain only letters, "
                                                  "numerals, hyphens and underscores, at most 255 characters.")
        replication = body.get("replication")
        if not isinstance(replication, dict) or not (("automatic" in replication) ^ ("userManaged" in replication)):
            raise SecretError("INVALID_ARGUMENT", "Secret.replication must set exactly one of automatic or "
                                                  "userManaged.")
        if "userManaged" in replication and not (replication["userManaged"] or {}).get("replicas"):
            raise SecretError("INVALID_ARGUMENT", "Secret.replication.userManaged.replicas must not be empty.")
        kept = {k: v for k, v in body.items() if k in ("replication", "labels", "annotations", "topics",
                                                           "expireTime", "rotation", "versionAliases")}
        with self._lock:
            key = (project_number(project), secret_id)
            if key in self._secrets:
                raise SecretError("ALREADY_EXISTS", f"Secret [{self.secret_name(project, secret_id)}] already exists.")
            secret = self._secrets[key] = _Secret(kept, self.clock.now())
            return self._secret_json(project, secret_id, secret)

    def get_secret(self, project: str, secret_id: str) -> dict:
        with self._lock:
            return self._secret_json(project, secret_id, self._secret(project, secret_id))

    def list_secrets(self, project: str, page_size: int = 0, page_token: str = "", filter_text: str = "") -> dict:
        number = project_number(project)
        with self._lock:
            rows = [(sid, s) for (n, sid), s in self._secrets.items() if n == number]
            rows.sort(key=lambda row: row[1].created)  # stable: ties keep the order they were made in
            items = [self._secret_json(project, sid, s) for sid, s in reversed(rows)]  # newest first
        items = _filtered(items, filter_text, ("name", "labels"))
        return _page("secrets", items, page_size, page_token, total=0 if filter_text else len(items))

    def delete_secret(self, project: str, secret_id: str, etag: str = "") -> None:
        with self._lock:
            secret = self._secret(project, secret_id)
            _check_etag(etag, secret.etag)
            del self._secrets[(project_number(project), secret_id)]

    def get_iam_policy(self, project: str, secret_id: str) -> dict:
        with self._lock:
            secret = self._secret(project, secret_id)
            return {"version": 1, "etag": "ACAB", **copy.deepcopy(secret.policy)}

    def set_iam_policy(self, project: str, secret_id: str, body: dict) -> dict:
        """secrets.setIamPolicy: the policy given replaces the secret's (its bindings: role and members)."""
        policy = body.get("policy")
        if not isinstance(policy, dict) or not all(
                isinstance(b, dict) and isinstance(b.get("role"), str) and isinstance(b.get("members"), list)
                for b in policy.get("bindings", [])):
            raise SecretError("INVALID_ARGUMENT", "Invalid JSON payload: policy.bindings must be a list of "
                                                  "{role, members}.")
        with self._lock:
            secret = self._secret(project, secret_id)
            secret.policy = {"bindings": copy.deepcopy(policy.get("bindings", []))}
            return {"version": 1, "etag": "ACAB", **copy.deepcopy(secret.policy)}

    # -- versions --------------------------------------------------------------------------------
    def add_version(self, project: str, secret_id: str, payload: Any) -> dict:
        if not isinstance(payload, dict) or "data" not in payload:
            raise SecretError("INVALID_ARGUMENT", "payload.data is required.")
        try:
            text = str(payload["data"]).replace("-", "+").replace("_", "/")
            data = base64.b64decode(_padded(text), validate=True)
        except (binascii.Error, ValueError):
            raise SecretError("INVALID_ARGUMENT", "Invalid value at 'payload.data' (TYPE_BYTES), Base64 decoding "
                                                  "failed.") from None
        if len(data) > MAX_PAYLOAD:
            raise SecretError("INVALID_ARGUMENT", f"Secret payload is {len(data)} bytes: it must be no larger than "
                                                  f"{MAX_PAYLOAD} bytes.")
        given = payload.get("dataCrc32c")
        if given is not None:
            try:
                matches = int(given) == crc32c(data)
            except (TypeError, ValueError):
                raise SecretError("INVALID_ARGUMENT", f"Invalid value at 'payload.data_crc32c' (TYPE_INT64), "
                                                      f"\"{given}\"") from None
            if not matches:
                raise SecretError("INVALID_ARGUMENT", "Checksum mismatch: payload.data_crc32c does not match the "
                                                      "CRC32C of payload.data.")
        with self._lock:
            secret = self._secret(project, secret_id)
            number = secret.versions[-1].number + 1 if secret.versions else 1
            version = _Version(number, data, self.clock.now(), client_checksum=given is not None)
            secret.versions.append(version)
            return self._version_json(project, secret_id, secret, version)

    def get_version(self, project: str, secret_id: str, version: str) -> dict:
        with self._lock:
            found = self._version(project, secret_id, version)
            return self._version_json(project, secret_id, self._secret(project, secret_id), found)

    def list_versions(self, project: str, secret_id: str, page_size: int = 0, page_token: str = "",
                      filter_text: str = "") -> dict:
        with self._lock:
            secret = self._secret(project, secret_id)
            items = [self._version_json(project, secret_id, secret, v) for v in secret.versions]
        items = _filtered(items, filter_text, ("name", "state"))
        items.reverse()  # newest first
        return _page("versions", items, page_size, page_token, total=0 if filter_text else len(items))

    def access_version(self, project: str, secret_id: str, version: str) -> dict:
        with self._lock:
            found = self._version(project, secret_id, version, access=True)
            name = f"{self.secret_name(project, secret_id)}/versions/{found.number}"  # latest comes back resolved
            if found.state != "ENABLED":
                raise SecretError("FAILED_PRECONDITION", f"Secret Version [{name}] is in {found.state} state.")
            data = found.data
        # int64 fields are strings in proto3 JSON.
        return {"name": name, "payload": {"data": base64.b64encode(data).decode(), "dataCrc32c": str(crc32c(data))}}

    def set_version_state(self, project: str, secret_id: str, version: str, state: str, etag: str = "") -> dict:
        """enable / disable / destroy: a destroyed version stays destroyed and loses its data."""
        if state not in _STATES:
            raise SecretError("INVALID_ARGUMENT", f"Unknown state {state}.")
        with self._lock:
            secret = self._secret(project, secret_id)
            found = self._version(project, secret_id, version)
            _check_etag(etag, found.etag)
            name = f"{self.secret_name(project, secret_id)}/versions/{found.number}"
            if found.state == "DESTROYED" and state != "DESTROYED":
                raise SecretError("FAILED_PRECONDITION", f"Secret Version [{name}] is in DESTROYED state.")
            found.state = state
            found.etag = _etag()
            if state == "DESTROYED" and found.destroyed is None:
                found.destroyed = self.clock.now()
                found.data = b""
            return self._version_json(project, secret_id, secret, found)


def _padded(text: str) -> str:
    # proto3 JSON accepts standard or URL-safe base64, padded or not.
    return text + "=" * (-len(text) % 4)


def _check_etag(given: str, current: str) -> None:
    if given and given != current:
        raise SecretError("FAILED_PRECONDITION", f"The etag provided ({given}) does not match the resource's "
                                                 f"current etag.")


def _filtered(items: list[dict], text: str, fields: tuple[str, ...]) -> list[dict]:
    """The service's list filter, the part worth emulating: `field:value` (contains) and `field=value`
    (equals) terms joined by AND or spaces, on name, state and labels.KEY."""
    terms = [t for t in re.split(r"\s+(?:AND\s+)?", text.strip()) if t and t != "AND"]
    for term in terms:
        m = re.fullmatch(r"([A-Za-z_.\-]+)\s*([:=])\s*\"?([^\"]*)\"?", term)
        if m is None:
            raise SecretError("INVALID_ARGUMENT", f"Invalid filter: {term!r}.")
        key, op, value = m.groups()
        base = key.split(".", 1)[0]
        if base not in fields:
            shown = ", ".join("labels.KEY" if f == "labels" else f for f in fields)
            raise SecretError("INVALID_ARGUMENT", f"Invalid filter: the emulator filters on {shown}, not {key!r}.")

        def hit(item: dict, key: str = key, op: str = op, value: str = value) -> bool:
            if key.startswith("labels."):
                have = (item.get("labels") or {}).get(key[len("labels."):])
            elif key == "labels":
                return value in (item.get("labels") or {})
            else:
                have = item.get(key)
                if key == "name" and have:
                    have = have.rsplit("/", 1)[-1] if op == "=" else have
            if have is None:
                return False
            return have == value if op == "=" else value.lower() in str(have).lower()

        items = [i for i in items if hit(i)]
    return items


def _page(key: str, items: list[dict], size: int, token: str, total: int) -> dict:
    size = min(size, 25000) if size and size > 0 else 25000
    try:
        offset = int(base64.urlsafe_b64decode(_padded(token)).decode()) if token else 0
    except (binascii.Error, ValueError):
        raise SecretError("INVALID_ARGUMENT", "Invalid page token.") from None
    out: dict[str, Any] = {}
    if items[offset:offset + size]:
        out[key] = items[offset:offset + size]
    if offset + size < len(items):
        out["nextPageToken"] = base64.urlsafe_b64encode(str(offset + size).encode()).decode().rstrip("=")
    if total:
        out["totalSize"] = total
    return out
