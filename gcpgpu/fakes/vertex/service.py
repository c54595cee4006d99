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

from typing import TYPE_CHECKING, Any

import grpc
from google.cloud import aiplatform_v1
from google.longrunning import operations_pb2
from google.protobuf import any_pb2, empty_pb2, timestamp_pb2

from ..core import ApiError
from ..grpc_service import GET_OPERATION as GET_OPERATION
from ..grpc_service import EmulatedService, abort_with_details, from_message, to_message
from .errors import VertexError

if TYPE_CHECKING:
    from ..server import Emulator

SERVICE = "google.cloud.aiplatform.v1.JobService"
MINE = "gcpgpu.fakes.vertex:grpc_service"
# Injected failures (core.ApiError) by canonical status; any other code reads as INTERNAL.
_API_ERROR_STATUS = {503: "UNAVAILABLE", 429: "RESOURCE_EXHAUSTED", 504: "DEADLINE_EXCEEDED"}


def to_job(data: dict) -> aiplatform_v1.CustomJob:
    return to_message(aiplatform_v1.CustomJob, data)


class VertexService(EmulatedService):
    """Routes the JobService custom-job methods and Vertex operations to emulator.vertex."""

    api = "aiplatform"
    target = MINE

    def __init__(self, emulator: Emulator) -> None:
        super().__init__(emulator)
        v1 = aiplatform_v1
        self.serve(f"/{SERVICE}/CreateCustomJob", self._create, v1.CreateCustomJobRequest.deserialize,
                   v1.CustomJob.serialize, "POST")
        self.serve(f"/{SERVICE}/GetCustomJob", self._get, v1.GetCustomJobRequest.deserialize,
                   v1.CustomJob.serialize, "GET")
        self.serve(f"/{SERVICE}/ListCustomJobs", self._list, v1.ListCustomJobsRequest.deserialize,
                   v1.ListCustomJobsResponse.serialize, "GET")
        self.serve(f"/{SERVICE}/CancelCustomJob", self._cancel, v1.CancelCustomJobRequest.deserialize,
                   empty_pb2.Empty.SerializeToString, "POST")
        self.serve(f"/{SERVICE}/DeleteCustomJob", self._delete, v1.DeleteCustomJobRequest.deserialize,
                   operations_pb2.Operation.SerializeToString, "DELETE")
        self.serve_operations(lambda name: self.backend.owns_operation(name),
                              lambda request: _operation(*self.backend.operation(request.name)))

    @property
    def backend(self) -> Any:
        return self.emulator.vertex

    def http_status(self, error: Exception) -> int:
        return error.http if isinstance(error, VertexError) else super().http_status(error)

    def abort(self, context: grpc.ServicerContext, error: Exception) -> None:
        """Errors as rich statuses (google.rpc.Status, BadRequest field violations), as the real service sends."""
        if isinstance(error, VertexError):
            abort_with_details(context, error.status, error.message, error.violations)
        elif isinstance(error, ApiError):
            abort_with_details(context, _API_ERROR_STATUS.get(error.code, "INTERNAL"), error.message)
        else:
            super().abort(context, error)

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
