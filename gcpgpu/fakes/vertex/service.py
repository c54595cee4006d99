"""Vertex AI's JobService custom-job methods over gRPC, aiplatform_v1's default transport.

google.cloud.aiplatform.v1.JobService: CreateCustomJob, GetCustomJob, ListCustomJobs,
CancelCustomJob, DeleteCustomJob (a google.longrunning.Operation); and
google.longrunning.Operations/GetOperation, which the client's `operation.result()` polls.
Other emulated APIs serve GetOperation too (Cloud Build) and one gRPC server takes the first
handler that claims a method, so an operation name that is not a Vertex one is handed on to the
other registered services.

Errors carry google.rpc.Status details (BadRequest field violations), as the real service sends.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import grpc
from google.cloud import aiplatform_v1
from google.longrunning import operations_pb2
from google.protobuf import any_pb2, empty_pb2, json_format, timestamp_pb2
from google.rpc import error_details_pb2, status_pb2

from ..core import ApiError, LoggedRequest
from .backend import VertexError

if TYPE_CHECKING:
    from ..server import Emulator

SERVICE = "google.cloud.aiplatform.v1.JobService"
OPERATIONS = "google.longrunning.Operations"
GET_OPERATION = f"/{OPERATIONS}/GetOperation"

_CODES = {c.name: c for c in grpc.StatusCode}


def to_job(data: dict) -> aiplatform_v1.CustomJob:
    return aiplatform_v1.CustomJob.wrap(
        json_format.ParseDict(data, aiplatform_v1.CustomJob.pb()(), ignore_unknown_fields=True))


def from_message(message: Any) -> dict:
    return json_format.MessageToDict(type(message).pb(message))


class _Details(grpc.HandlerCallDetails):
    def __init__(self, method: str) -> None:
        self.method = method
        self.invocation_metadata = ()


class VertexService(grpc.GenericRpcHandler):
    """Routes the JobService custom-job methods and Vertex operations to emulator.vertex."""

    def __init__(self, emulator: Emulator) -> None:
        self.emulator = emulator
        self._others: list[Any] | None = None
        op = operations_pb2.Operation.SerializeToString
        table: dict[str, tuple[Callable[[Any], Any], Callable[[bytes], Any], Callable[[Any], bytes], str]] = {
            f"/{SERVICE}/CreateCustomJob": (self._create, aiplatform_v1.CreateCustomJobRequest.deserialize,
                                            aiplatform_v1.CustomJob.serialize, "POST"),
            f"/{SERVICE}/GetCustomJob": (self._get, aiplatform_v1.GetCustomJobRequest.deserialize,
                                         aiplatform_v1.CustomJob.serialize, "GET"),
            f"/{SERVICE}/ListCustomJobs": (self._list, aiplatform_v1.ListCustomJobsRequest.deserialize,
                                           aiplatform_v1.ListCustomJobsResponse.serialize, "GET"),
            f"/{SERVICE}/CancelCustomJob": (self._cancel, aiplatform_v1.CancelCustomJobRequest.deserialize,
                                            empty_pb2.Empty.SerializeToString, "POST"),
            f"/{SERVICE}/DeleteCustomJob": (self._delete, aiplatform_v1.DeleteCustomJobRequest.deserialize, op,
                                            "DELETE"),
        }
        self._methods = {
            path: grpc.unary_unary_rpc_method_handler(self._wrap(handler, http, path), request_deserializer=de,
                                                      response_serializer=ser)
            for path, (handler, de, ser, http) in table.items()
        }
        self._methods[GET_OPERATION] = grpc.unary_unary_rpc_method_handler(
            self._get_operation, request_deserializer=operations_pb2.GetOperationRequest.FromString,
            response_serializer=op)

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
        return self._methods.get(handler_call_details.method)

    @property
    def backend(self) -> Any:
        return self.emulator.vertex

    def _wrap(self, handler: Callable[[Any], Any], http: str, path: str) -> Callable[[Any, grpc.ServicerContext], Any]:
        """Faults, latency and the request log, as the REST front door applies them; errors as rich statuses."""

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
            except VertexError as e:
                status = e.http
                _abort(context, e.status, e.message, e.violations)
            except ApiError as e:
                status = e.code
                name = {503: "UNAVAILABLE", 429: "RESOURCE_EXHAUSTED", 504: "DEADLINE_EXCEEDED"}.get(e.code, "INTERNAL")
                _abort(context, name, e.message, [])
            except Exception as e:  # an emulator bug: say so in gRPC's terms rather than hang the client
                status = 500
                context.abort(grpc.StatusCode.INTERNAL, f"emulator error: {type(e).__name__}: {e}")
            finally:
                self.emulator.requests.add(LoggedRequest("aiplatform", http, path, "", status, time.perf_counter() - t0))

        return call

    # -- JobService -------------------------------------------------------------------------
    def _create(self, request: aiplatform_v1.CreateCustomJobRequest) -> aiplatform_v1.CustomJob:
        if "custom_job" not in request:
            raise VertexError("INVALID_ARGUMENT", "custom_job is required.", [("custom_job", "Required field is not set.")])
        return to_job(self.backend.create(request.parent, from_message(request.custom_job)))

    def _get(self, request: aiplatform_v1.GetCustomJobRequest) -> aiplatform_v1.CustomJob:
        return to_job(self.backend.get(request.name))

    def _list(self, request: aiplatform_v1.ListCustomJobsRequest) -> aiplatform_v1.ListCustomJobsResponse:
        jobs, token = self.backend.list(request.parent, request.page_size, request.page_token, request.filter)
        return aiplatform_v1.ListCustomJobsResponse(custom_jobs=[to_job(j) for j in jobs], next_page_token=token)

    def _cancel(self, request: aiplatform_v1.CancelCustomJobRequest) -> empty_pb2.Empty:
        self.backend.cancel(request.name)
        return empty_pb2.Empty()

    def _delete(self, request: aiplatform_v1.DeleteCustomJobRequest) -> operations_pb2.Operation:
        return _operation(self.backend.delete(request.name), False)

    # -- operations -------------------------------------------------------------------------
    def _get_operation(self, request: operations_pb2.GetOperationRequest, context: grpc.ServicerContext) -> Any:
        if not self.backend.owns_operation(request.name):
            for other in self._other_handlers():
                handler = other.service(_Details(GET_OPERATION))
                if handler is not None:
                    return handler.unary_unary(request, context)
        return self._wrap(lambda r: _operation(*self.backend.operation(r.name)), "GET", GET_OPERATION)(request, context)

    def _other_handlers(self) -> list[Any]:
        if self._others is None:
            from .. import server

            mine = "gcpgpu.fakes.vertex:grpc_service"
            factories = [server._load(t) for t in server.GRPC_SERVICES if t != mine] + list(server.GRPC_SERVICE_FACTORIES)
            self._others = [factory(self.emulator) for factory in factories]
        return self._others


def _timestamp(ts: float) -> timestamp_pb2.Timestamp:
    out = timestamp_pb2.Timestamp()
    out.FromNanoseconds(int(ts * 1e9))
    return out


def _operation(op: Any, done: bool) -> operations_pb2.Operation:
    meta = aiplatform_v1.DeleteOperationMetadata(generic_metadata=aiplatform_v1.GenericOperationMetadata(
        create_time=_timestamp(op.created), update_time=_timestamp(op.done_at if done else op.created)))
    packed = any_pb2.Any()
    packed.Pack(aiplatform_v1.DeleteOperationMetadata.pb(meta))
    out = operations_pb2.Operation(name=op.name, metadata=packed, done=done)
    if done:
        out.response.Pack(empty_pb2.Empty())
    return out


def _abort(context: grpc.ServicerContext, status: str, message: str, violations: list[tuple[str, str]]) -> None:
    from grpc_status import rpc_status

    code = _CODES.get(status, grpc.StatusCode.UNKNOWN)
    rich = status_pb2.Status(code=code.value[0], message=message)
    if violations:
        detail = any_pb2.Any()
        detail.Pack(error_details_pb2.BadRequest(field_violations=[
            error_details_pb2.BadRequest.FieldViolation(field=f, description=d) for f, d in violations]))
        rich.details.append(detail)
    context.abort_with_status(rpc_status.to_status(rich))
