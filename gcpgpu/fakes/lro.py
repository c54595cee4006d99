"""Google's long-running operations (google.longrunning.Operation over REST) and the error body of the
newer one-platform APIs, shared by the emulator's Filestore, Managed Lustre and Service Networking.

An operation's state is derived from the emulator's clock when it is read (nothing runs in the
background): it is done once `done_at` has come, and its `response` is what `result()` gave then
(the resource as it stands, or Empty). The python clients' REST transports poll
GET /v1/{name=projects/*/locations/*/operations/*}; gcloud polls the same path.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable
from typing import Any

from .core import HTTP_STATUS_NAMES, ApiError, proto_timestamp

EMPTY = {"@type": "type.googleapis.com/google.protobuf.Empty"}
_HTTP = {name: code for code, name in HTTP_STATUS_NAMES.items()}
_HTTP.update(FAILED_PRECONDITION=400, OUT_OF_RANGE=400, ABORTED=409, CANCELLED=499)
# google.rpc.Code numbers, for an operation's `error` (a google.rpc.Status).
RPC_CODES = {"INVALID_ARGUMENT": 3, "NOT_FOUND": 5, "ALREADY_EXISTS": 6, "PERMISSION_DENIED": 7,
             "RESOURCE_EXHAUSTED": 8, "FAILED_PRECONDITION": 9, "INTERNAL": 13, "UNAVAILABLE": 14}


class GoogleError(ApiError):
    """An error as the one-platform APIs (file, lustre, servicenetworking) send it: code, message, status and
    optional google.rpc.BadRequest field violations; no Compute-style `errors` list."""

    def __init__(self, status: str, message: str, violations: list[tuple[str, str]] | None = None) -> None:
        super().__init__(_HTTP.get(status, 500), status, message)
        self.status = status
        self.violations = violations or []

    def to_json(self) -> dict:
        body: dict[str, Any] = {"code": self.code, "message": self.message, "status": self.status}
        if self.violations:
            body["details"] = [{"@type": "type.googleapis.com/google.rpc.BadRequest",
                                "fieldViolations": [{"field": f, "description": d} for f, d in self.violations]}]
        return {"error": body}

    def to_status(self) -> dict:
        """The google.rpc.Status an operation that failed carries in `error`."""
        return {"code": RPC_CODES.get(self.status, 2), "message": self.message}


def invalid_argument(message: str, field: str | None = None) -> GoogleError:
    return GoogleError("INVALID_ARGUMENT", message, [(field, message)] if field else None)


def not_found(name: str) -> GoogleError:
    return GoogleError("NOT_FOUND", f"Resource '{name}' was not found")


def json_body(data: bytes) -> dict:
    try:
        body = json.loads(data or b"{}")
    except ValueError:
        raise invalid_argument("Invalid JSON payload received.") from None
    if not isinstance(body, dict):
        raise invalid_argument("Invalid JSON payload received. Expected an object.")
    return body


def page(items: list, args: Any, key: str) -> dict:
    """One page of `items` (pageSize, pageToken: an offset here), under `key`, with nextPageToken."""
    try:
        size = int(args.get("pageSize") or 0)
        start = int(args.get("pageToken") or 0)
    except ValueError:
        raise invalid_argument("Invalid pageSize or pageToken.") from None
    if size < 0 or start < 0:
        raise invalid_argument("pageSize and pageToken must not be negative.")
    size = size or 500
    out: dict[str, Any] = {key: items[start:start + size]}
    if start + size < len(items):
        out["nextPageToken"] = str(start + size)
    return out


class Operations:
    """The operations of one API, by full name (projects/P/locations/L/operations/operation-...)."""

    def __init__(self, clock: Any, metadata_type: str, api_version: str = "v1",
                 cancel_field: str = "cancelRequested") -> None:
        self.clock = clock
        self.metadata_type = metadata_type
        self.cancel_field = cancel_field  # google.cloud.common's name; Lustre's metadata says requestedCancellation
        self.name_prefix = "operation-"  # Service Networking's operations are operations/pssn.ID
        self.api_version = api_version
        self._ops: dict[str, dict] = {}
        self._lock = threading.RLock()

    def reset(self) -> None:
        with self._lock:
            self._ops.clear()

    def start(self, parent: str, target: str, verb: str, seconds: float,
              result: Callable[[], dict] | None = None, error: GoogleError | None = None) -> dict:
        """A new operation under `parent` (projects/P/locations/L) on `target`, done `seconds` from now,
        whose response is `result()` when read after that (Empty when None), or which fails with `error`."""
        now = self.clock.now()
        leaf = self.name_prefix + (uuid.uuid4().hex[:24] if self.name_prefix != "operation-" else
                                   f"{int(now * 1000)}-{uuid.uuid4().hex[:24]}")
        name = f"{parent}/operations/{leaf}" if parent else f"operations/{leaf}"
        op = {"name": name, "target": target, "verb": verb, "t0": now, "done_at": now + max(seconds, 0.0),
              "result": result, "error": error, "response": None}
        with self._lock:
            self._ops[name] = op
            return self._render(op)

    def get(self, name: str) -> dict:
        with self._lock:
            op = self._ops.get(name)
            if op is None:
                raise not_found(name)
            return self._render(op)

    def list(self, parent: str, args: Any) -> dict:
        with self._lock:
            under = f"{parent}/operations/" if parent else "operations/"
            ops = [self._render(o) for n, o in sorted(self._ops.items()) if n.startswith(under)]
        return page(ops, args, "operations")

    def delete(self, name: str) -> dict:
        with self._lock:
            if self._ops.pop(name, None) is None:
                raise not_found(name)
        return {}

    def cancel(self, name: str) -> dict:
        """Accepted and recorded, as Google does for operations it cannot stop (the work goes on here)."""
        with self._lock:
            op = self._ops.get(name)
            if op is None:
                raise not_found(name)
            op["cancel"] = True
        return {}

    def _render(self, op: dict) -> dict:
        now = self.clock.now()
        done = now >= op["done_at"]
        meta: dict[str, Any] = {"@type": self.metadata_type, "createTime": proto_timestamp(op["t0"]),
                                "target": op["target"], "verb": op["verb"], "apiVersion": self.api_version}
        if op.get("cancel"):
            meta[self.cancel_field] = True
        out: dict[str, Any] = {"name": op["name"], "done": done}
        if self.metadata_type:
            out["metadata"] = meta
        if not done:
            return out
        meta["endTime"] = proto_timestamp(op["done_at"])
        if op["error"] is not None:
            out["error"] = op["error"].to_status()
            return out
        if op["response"] is None:  # fixed when first seen done: later reads show the same result
            op["response"] = op["result"]() if op["result"] else EMPTY
        out["response"] = op["response"]
        return out
