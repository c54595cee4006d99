"""Vertex AI's JobService custom-job methods over REST/JSON, as aiplatform_v1's REST transport calls them.

    POST   /v1/projects/P/locations/L/customJobs              CreateCustomJob
    GET    /v1/projects/P/locations/L/customJobs              ListCustomJobs (pageSize, pageToken, filter)
    GET    /v1/projects/P/locations/L/customJobs/ID           GetCustomJob
    POST   /v1/projects/P/locations/L/customJobs/ID:cancel    CancelCustomJob
    DELETE /v1/projects/P/locations/L/customJobs/ID           DeleteCustomJob (a long-running operation)
    GET    /ui|v1/projects/P/locations/L/operations/OP        Operations.GetOperation (the client polls /ui/)

The library sends enums as numbers (use_integers_for_enums); bodies are read through its own proto
types so the backend always sees enum names, as the service's canonical JSON has them.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

from werkzeug.wrappers import Request

from ..core import ApiError, proto_timestamp
from .errors import VertexError

if TYPE_CHECKING:
    from ..server import Emulator


_ROUTES = [
    ("POST", re.compile(r"^/v1/(?P<parent>projects/[^/]+/locations/[^/]+)/customJobs$"), "create"),
    ("GET", re.compile(r"^/v1/(?P<parent>projects/[^/]+/locations/[^/]+)/customJobs$"), "list"),
    ("GET", re.compile(r"^/v1/(?P<name>projects/[^/]+/locations/[^/]+/customJobs/[^/:]+)$"), "get"),
    ("POST", re.compile(r"^/v1/(?P<name>projects/[^/]+/locations/[^/]+/customJobs/[^/:]+):cancel$"), "cancel"),
    ("DELETE", re.compile(r"^/v1/(?P<name>projects/[^/]+/locations/[^/]+/customJobs/[^/:]+)$"), "delete"),
    ("GET", re.compile(r"^/(?:v1|ui)/(?P<name>projects/[^/]+/locations/[^/]+/(?:customJobs/[^/]+/)?operations/[^/:]+)$"),
     "operation"),
]


class _RestError(ApiError):
    """A VertexError in the shape the server's front door writes (Google's newer error JSON)."""

    def __init__(self, error: VertexError) -> None:
        super().__init__(error.http, error.status, error.message)
        self.error = error

    def to_json(self) -> dict:
        return self.error.to_json()


def canonical_job(body: dict) -> dict:
    """A CustomJob body as the service's canonical JSON: enum names, int64 as strings, camelCase."""
    from google.cloud import aiplatform_v1
    from google.protobuf import json_format

    try:
        message = json_format.ParseDict(body, aiplatform_v1.CustomJob.pb()())
    except json_format.ParseError as e:
        raise VertexError("INVALID_ARGUMENT", f"Invalid JSON payload received. {e}",
                          [("custom_job", str(e))]) from None
    return json_format.MessageToDict(message)


def operation_json(op: Any, done: bool) -> dict:
    out: dict[str, Any] = {
        "name": op.name,
        "metadata": {
            "@type": "type.googleapis.com/google.cloud.aiplatform.v1.DeleteOperationMetadata",
            "genericMetadata": {"createTime": proto_timestamp(op.created), "updateTime": proto_timestamp(op.done_at if done else op.created)},
        },
        "done": done,
    }
    if done:
        out["response"] = {"@type": "type.googleapis.com/google.protobuf.Empty"}
    return out


class VertexRest:
    """Dispatches the JobService custom-job REST paths to emulator.vertex."""

    @classmethod
    def for_emulator(cls, emulator: Emulator) -> VertexRest:
        return cls(emulator)

    def __init__(self, emulator: Emulator) -> None:
        self.emulator = emulator

    def handle(self, request: Request) -> tuple[int, dict | None]:
        for method, pattern, action in _ROUTES:
            match = pattern.match(request.path)
            if match and request.method == method:
                try:
                    return 200, getattr(self, action)(request, **match.groupdict())
                except VertexError as e:
                    raise _RestError(e) from None
        raise _RestError(VertexError("NOT_FOUND", f"The requested URL {request.path} was not found on this server."))

    @property
    def backend(self) -> Any:
        return self.emulator.vertex

    def _body(self, request: Request) -> dict:
        raw = request.get_data()
        if not raw:
            return {}
        try:
            body = json.loads(raw)
        except ValueError:
            raise VertexError("INVALID_ARGUMENT", "Invalid JSON payload received.") from None
        if not isinstance(body, dict):
            raise VertexError("INVALID_ARGUMENT", "Invalid JSON payload received: expected an object.")
        return body

    def create(self, request: Request, parent: str) -> dict:
        return self.backend.create(parent, canonical_job(self._body(request)))

    def list(self, request: Request, parent: str) -> dict:
        try:
            size = int(request.args.get("pageSize") or 0)
        except ValueError:
            raise VertexError("INVALID_ARGUMENT", "pageSize must be an integer.", [("page_size", "not an integer")]) from None
        jobs, token = self.backend.list(parent, size, request.args.get("pageToken", ""), request.args.get("filter", ""))
        out: dict[str, Any] = {}
        if jobs:
            out["customJobs"] = jobs
        if token:
            out["nextPageToken"] = token
        return out

    def get(self, request: Request, name: str) -> dict:
        return self.backend.get(name)

    def cancel(self, request: Request, name: str) -> dict:
        self.backend.cancel(name)
        return {}

    def delete(self, request: Request, name: str) -> dict:
        return operation_json(self.backend.delete(name), False)

    def operation(self, request: Request, name: str) -> dict:
        op, done = self.backend.operation(name)
        return operation_json(op, done)
