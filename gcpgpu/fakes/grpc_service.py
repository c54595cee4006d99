"""The plumbing the emulator's gRPC services share (Vertex AI, Cloud Build, Cloud Monitoring).

A service subclasses EmulatedService and registers each method with `serve(path, handler,
deserialize, serialize, http)`. Every call then goes as it does through the REST front end:
injected latency and failures (picked by the HTTP verb the method stands for), one line in the
emulator's RequestLog, and core.ApiError (or an emulator bug) turned into a gRPC status.

google.longrunning.Operations/GetOperation: one gRPC server takes the first handler that claims a
method, and several emulated APIs have operations. `serve_operations(owns, get)` claims it for a
service and hands a name the service does not own on to the services registered after it in
server.GRPC_SERVICES (all of them where it is not listed there), then server.GRPC_SERVICE_FACTORIES.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import grpc
from google.longrunning import operations_pb2
from google.protobuf import any_pb2, json_format
from google.rpc import error_details_pb2, status_pb2

from .core import ApiError, LoggedRequest

if TYPE_CHECKING:
    from .server import Emulator

OPERATIONS = "google.longrunning.Operations"
GET_OPERATION = f"/{OPERATIONS}/GetOperation"

GRPC_CODES = {
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
_CODES_BY_NAME = {c.name: c for c in grpc.StatusCode}

# The services handing a GetOperation on on this thread: each hands on once, so two never loop.
_HANDING_ON = threading.local()


def json_request(raw: bytes) -> Any:
    """An emulator-only method's request: JSON bytes (none reads as {})."""
    return json.loads(raw or b"{}")


def json_response(value: Any) -> bytes:
    return json.dumps(value).encode()


def to_message(cls: Any, data: dict) -> Any:
    """A backend's camelCase JSON as the library's proto-plus message of type cls."""
    return cls.wrap(json_format.ParseDict(data, cls.pb()(), ignore_unknown_fields=True))


def from_message(message: Any) -> dict:
    """A proto-plus message as camelCase JSON, as the REST API would carry it."""
    return json_format.MessageToDict(type(message).pb(message))


def abort_with_details(
    context: grpc.ServicerContext, status: str, message: str, violations: Iterable[tuple[str, str]] = ()
) -> None:
    """End the call with a google.rpc.Status (canonical name `status`), BadRequest field violations in its details."""
    from grpc_status import rpc_status

    code = _CODES_BY_NAME.get(status, grpc.StatusCode.UNKNOWN)
    rich = status_pb2.Status(code=code.value[0], message=message)
    violations = list(violations)
    if violations:
        detail = any_pb2.Any()
        detail.Pack(error_details_pb2.BadRequest(field_violations=[
            error_details_pb2.BadRequest.FieldViolation(field=f, description=d) for f, d in violations]))
        rich.details.append(detail)
    context.abort_with_status(rpc_status.to_status(rich))


def _handing_on() -> set[type]:
    if not hasattr(_HANDING_ON, "services"):
        _HANDING_ON.services = set()
    return _HANDING_ON.services


class _Details(grpc.HandlerCallDetails):
    def __init__(self, method: str) -> None:
        self.method = method
        self.invocation_metadata = ()


class EmulatedService(grpc.GenericRpcHandler):
    """One emulated API's gRPC methods; subclasses set `api` and serve their methods in __init__."""

    api = ""  # the RequestLog's name for the API
    target = ""  # the service's "module:factory" in server.GRPC_SERVICES, where it is listed

    def __init__(self, emulator: Emulator) -> None:
        self.emulator = emulator
        self._methods: dict[str, grpc.RpcMethodHandler] = {}
        self._others: list[Any] | None = None

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
        return self._methods.get(handler_call_details.method)

    def serve(
        self,
        path: str,
        handler: Callable[[Any], Any],
        deserialize: Callable[[bytes], Any],
        serialize: Callable[[Any], bytes],
        http: str,
        api: str = "",
    ) -> None:
        """Serve `path` with handler(request) -> response, as the REST method `http` of `api` (default: self.api)."""
        self._methods[path] = grpc.unary_unary_rpc_method_handler(
            self.wrap(handler, http, path, api or self.api),
            request_deserializer=deserialize,
            response_serializer=serialize,
        )

    def wrap(self, handler: Callable[[Any], Any], http: str, path: str, api: str) -> Callable[[Any, Any], Any]:
        """Faults, latency and the request log, as the REST front end applies them; errors -> gRPC status."""

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
            except Exception as e:
                status = self.http_status(e)
                self.abort(context, e)
            finally:
                self.emulator.requests.add(LoggedRequest(api, http, path, "", status, time.perf_counter() - t0))

        return call

    def http_status(self, error: Exception) -> int:
        """The HTTP status the request log records for a call that raised `error`."""
        return error.code if isinstance(error, ApiError) else 500

    def abort(self, context: grpc.ServicerContext, error: Exception) -> None:
        """End the call with the gRPC status for `error`: ApiError's by its HTTP code, anything else INTERNAL."""
        if isinstance(error, ApiError):
            aborted = error.reason == "aborted"  # an etag that does not match
            code = grpc.StatusCode.ABORTED if aborted else GRPC_CODES.get(error.code, grpc.StatusCode.UNKNOWN)
            context.abort(code, error.message)
        else:  # an emulator bug: say so, in gRPC's terms, rather than hang the client
            context.abort(grpc.StatusCode.INTERNAL, f"emulator error: {type(error).__name__}: {error}")

    # ------------------------------------------------------------------ GetOperation
    def serve_operations(self, owns: Callable[[str], bool], get_operation: Callable[[Any], Any]) -> None:
        """Claim GetOperation: get_operation(request) for the names owns(name) says are this API's."""
        own = self.wrap(get_operation, "GET", GET_OPERATION, self.api)

        def route(request: Any, context: grpc.ServicerContext) -> Any:
            handing_on = _handing_on()
            if not owns(request.name) and type(self) not in handing_on:
                handing_on.add(type(self))
                try:
                    for other in self._other_handlers():
                        handler = other.service(_Details(GET_OPERATION))
                        if handler is not None:
                            return handler.unary_unary(request, context)
                finally:
                    handing_on.discard(type(self))
            return own(request, context)

        self._methods[GET_OPERATION] = grpc.unary_unary_rpc_method_handler(
            route,
            request_deserializer=operations_pb2.GetOperationRequest.FromString,
            response_serializer=operations_pb2.Operation.SerializeToString,
        )

    def _other_handlers(self) -> list[Any]:
        if self._others is None:
            from . import server

            # Only the services after this one: those before it have had the call already (the
            # server asked them first, or one of them handed it here).
            listed = list(server.GRPC_SERVICES)
            after = listed[listed.index(self.target) + 1 :] if self.target in listed else listed
            factories = [server._load(t) for t in after] + list(server.GRPC_SERVICE_FACTORIES)
            self._others = [factory(self.emulator) for factory in factories]
        return self._others
