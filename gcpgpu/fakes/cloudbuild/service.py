"""Cloud Build over gRPC, as google-cloud-build's default transport speaks it.

google.devtools.cloudbuild.v1.CloudBuild: CreateBuild (a google.longrunning.Operation with the
Build in its BuildOperationMetadata, and as its response once done), GetBuild, ListBuilds,
CancelBuild; google.longrunning.Operations/GetOperation for the client's `operation.result()`.
Messages are (de)serialized with the library's own proto-plus types; the backend speaks JSON.

Two emulator-only methods take JSON bytes, for what real Cloud Build does through Cloud Storage:
  /gcpgpu.emulator.v1.Storage/PutObject       hold a source tarball as gs://BUCKET/OBJECT
  /gcpgpu.emulator.v1.CloudBuildLogs/Read     a build's log from an offset (real: gs://LOGS/log-ID.txt)
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import grpc
from google.cloud.devtools.cloudbuild_v1.types import cloudbuild as cb
from google.longrunning import operations_pb2
from google.protobuf import any_pb2, json_format
from google.rpc import code_pb2, status_pb2

from ..core import ApiError, LoggedRequest

if TYPE_CHECKING:
    from ..server import Emulator

SERVICE = "google.devtools.cloudbuild.v1.CloudBuild"
OPERATIONS = "google.longrunning.Operations"
GET_OPERATION = f"/{OPERATIONS}/GetOperation"
MINE = "gcpgpu.fakes.cloudbuild:grpc_service"
# Set while this thread hands a GetOperation on, so two services that hand on never loop.
_HANDING_ON = threading.local()
PUT_OBJECT = "/gcpgpu.emulator.v1.Storage/PutObject"
READ_LOG = "/gcpgpu.emulator.v1.CloudBuildLogs/Read"

_GRPC_CODES = {
    400: grpc.StatusCode.INVALID_ARGUMENT,
    401: grpc.StatusCode.UNAUTHENTICATED,
    403: grpc.StatusCode.PERMISSION_DENIED,
    404: grpc.StatusCode.NOT_FOUND,
    408: grpc.StatusCode.DEADLINE_EXCEEDED,
    409: grpc.StatusCode.ALREADY_EXISTS,
    412: grpc.StatusCode.FAILED_PRECONDITION,
    429: grpc.StatusCode.RESOURCE_EXHAUSTED,
    500: grpc.StatusCode.INTERNAL,
    502: grpc.StatusCode.UNAVAILABLE,
    503: grpc.StatusCode.UNAVAILABLE,
    504: grpc.StatusCode.DEADLINE_EXCEEDED,
}


def to_build(data: dict) -> cb.Build:
    """A backend build (camelCase JSON) as the library's proto-plus Build."""
    return cb.Build.wrap(json_format.ParseDict(data, cb.Build.pb()(), ignore_unknown_fields=True))


def from_message(message: Any) -> dict:
    """A proto-plus message as camelCase JSON, as the REST API would carry it."""
    return json_format.MessageToDict(type(message).pb(message))


def _json_request(raw: bytes) -> Any:
    return json.loads(raw or b"{}")


def _json_response(value: Any) -> bytes:
    return json.dumps(value).encode()


def _object_request(raw: bytes) -> tuple[dict, bytes]:
    # PutObject: a JSON header line, then the object's bytes.
    head, _, data = raw.partition(b"\n")
    return json.loads(head), data


class _Details(grpc.HandlerCallDetails):
    def __init__(self, method: str) -> None:
        self.method = method
        self.invocation_metadata = ()


class CloudBuildService(grpc.GenericRpcHandler):
    """Routes the Cloud Build methods (and the emulator's two helpers) to emulator.cloudbuild."""

    def __init__(self, emulator: Emulator) -> None:
        self.emulator = emulator
        self.backend = emulator.cloudbuild

        op = operations_pb2.Operation.SerializeToString
        table: dict[str, tuple[Callable[[Any], Any], Callable[[bytes], Any], Callable[[Any], bytes], str]] = {
            f"/{SERVICE}/CreateBuild": (self._create, cb.CreateBuildRequest.deserialize, op, "POST"),
            f"/{SERVICE}/GetBuild": (self._get, cb.GetBuildRequest.deserialize, cb.Build.serialize, "GET"),
            f"/{SERVICE}/ListBuilds": (
                self._list, cb.ListBuildsRequest.deserialize, cb.ListBuildsResponse.serialize, "GET"
            ),
            f"/{SERVICE}/CancelBuild": (self._cancel, cb.CancelBuildRequest.deserialize, cb.Build.serialize, "POST"),
            GET_OPERATION: (self._get_operation, operations_pb2.GetOperationRequest.FromString, op, "GET"),
            PUT_OBJECT: (self._put_object, _object_request, _json_response, "POST"),
            READ_LOG: (self._read_log, _json_request, _json_response, "GET"),
        }
        self._methods = {
            path: grpc.unary_unary_rpc_method_handler(
                self._wrap(handler, http, path), request_deserializer=deserialize, response_serializer=serialize
            )
            for path, (handler, deserialize, serialize, http) in table.items()
        }
        # One gRPC server takes the first handler that claims a method, and other emulated APIs
        # (Vertex AI) have operations too: an operation name that is not a build's is handed on
        # to the services registered after this one.
        own_get_operation = self._methods[GET_OPERATION].unary_unary
        self._methods[GET_OPERATION] = grpc.unary_unary_rpc_method_handler(
            lambda request, context: self._route_operation(own_get_operation, request, context),
            request_deserializer=operations_pb2.GetOperationRequest.FromString,
            response_serializer=op,
        )
        self._others: list[Any] | None = None

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
        return self._methods.get(handler_call_details.method)

    def _wrap(self, handler: Callable[[Any], Any], http: str, path: str) -> Callable[[Any, grpc.ServicerContext], Any]:
        """Faults, latency and the request log, as the REST front end applies them; ApiError -> gRPC status."""

        def call(request: Any, context: grpc.ServicerContext) -> Any:
            t0 = time.perf_counter()
            status = 200
            try:
                faults = self.emulator.faults
                if faults.latency_ms:
                    time.sleep(faults.latency_ms / 1000.0)
                code = faults.roll_error(http)
                if code is not None:
                    raise ApiError(code, "backendError", "Injected failure.")
                return handler(request)
            except ApiError as e:
                status = e.code
                context.abort(_GRPC_CODES.get(e.code, grpc.StatusCode.UNKNOWN), e.message)
            except Exception as e:  # an emulator bug: say so, in gRPC's terms, rather than hang
                status = 500
                context.abort(grpc.StatusCode.INTERNAL, f"emulator error: {type(e).__name__}: {e}")
            finally:
                self.emulator.requests.add(
                    LoggedRequest("cloudbuild", http, path, "", status, time.perf_counter() - t0)
                )

        return call

    # ------------------------------------------------------------------ CloudBuild
    def _create(self, request: cb.CreateBuildRequest) -> operations_pb2.Operation:
        if "build" not in request:
            raise ApiError(400, "invalidArgument", "invalid build: build is required")
        build = self.backend.create(request.project_id, request.parent, from_message(request.build))
        name = self.backend.builds[build["id"]]["_operation"]
        return self._operation(name, build, done=False)

    def _get(self, request: cb.GetBuildRequest) -> cb.Build:
        return to_build(self.backend.get(request.project_id, request.id, request.name))

    def _list(self, request: cb.ListBuildsRequest) -> cb.ListBuildsResponse:
        builds, token = self.backend.list(
            request.project_id, request.parent, request.page_size, request.page_token, request.filter
        )
        return cb.ListBuildsResponse(builds=[to_build(b) for b in builds], next_page_token=token)

    def _cancel(self, request: cb.CancelBuildRequest) -> cb.Build:
        return to_build(self.backend.cancel(request.project_id, request.id, request.name))

    # ------------------------------------------------------------------ operations
    def _route_operation(self, own: Callable[[Any, Any], Any], request: Any, context: grpc.ServicerContext) -> Any:
        if request.name not in self.backend.operations and not getattr(_HANDING_ON, "active", False):
            _HANDING_ON.active = True
            try:
                for other in self._other_handlers():
                    handler = other.service(_Details(GET_OPERATION))
                    if handler is not None:
                        return handler.unary_unary(request, context)
            finally:
                _HANDING_ON.active = False
        return own(request, context)

    def _other_handlers(self) -> list[Any]:
        if self._others is None:
            from .. import server

            # Only the services after this one: those before it have had the call already (the
            # server asked them first, or one of them handed it here).
            listed = list(server.GRPC_SERVICES)
            after = listed[listed.index(MINE) + 1 :] if MINE in listed else listed
            factories = [server._load(t) for t in after] + list(server.GRPC_SERVICE_FACTORIES)
            self._others = [factory(self.emulator) for factory in factories]
        return self._others

    def _get_operation(self, request: operations_pb2.GetOperationRequest) -> operations_pb2.Operation:
        build, done = self.backend.operation(request.name)
        return self._operation(request.name, build, done=done)

    @staticmethod
    def _operation(name: str, build: dict, done: bool) -> operations_pb2.Operation:
        message = to_build(build)
        metadata = any_pb2.Any()
        metadata.Pack(cb.BuildOperationMetadata.pb(cb.BuildOperationMetadata(build=message)))
        op = operations_pb2.Operation(name=name, metadata=metadata, done=done)
        if done:
            if build["status"] == "SUCCESS":
                op.response.Pack(cb.Build.pb(message))
            else:
                # A failed build's operation ends in an error; the build itself says why.
                op.error.CopyFrom(
                    status_pb2.Status(code=code_pb2.UNKNOWN, message=f"Build {build['status']}: {build.get('statusDetail', '')}")
                )
        return op

    # ------------------------------------------------------------------ emulator helpers
    def _put_object(self, request: tuple[dict, bytes]) -> dict:
        head, data = request
        return self.backend.put_object(head.get("bucket", ""), head.get("name", ""), data, int(head.get("offset", 0)))

    def _read_log(self, request: dict) -> dict:
        text, offset, done = self.backend.read_log(request.get("project", ""), request.get("id", ""), int(request.get("offset", 0)))
        return {"text": text, "offset": offset, "done": done}
