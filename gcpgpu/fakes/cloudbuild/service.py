"""Cloud Build over gRPC, as google-cloud-build's default transport speaks it.

google.devtools.cloudbuild.v1.CloudBuild: CreateBuild (a google.longrunning.Operation with the
Build in its BuildOperationMetadata, and as its response once done), GetBuild, ListBuilds,
CancelBuild; google.longrunning.Operations/GetOperation for the client's `operation.result()`.
Messages are (de)serialized with the library's own proto-plus types; the backend speaks JSON.

Sources are objects in the emulator's Cloud Storage (fakes/storage/), uploaded there as to Google.
One emulator-only method takes JSON bytes, for what real Cloud Build writes to a logs bucket:
  /gcpgpu.emulator.v1.CloudBuildLogs/Read     a build's log from an offset (real: gs://LOGS/log-ID.txt)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from google.cloud.devtools.cloudbuild_v1.types import cloudbuild as cb
from google.longrunning import operations_pb2
from google.protobuf import any_pb2
from google.rpc import code_pb2, status_pb2

from ..core import ApiError
from ..grpc_service import GET_OPERATION as GET_OPERATION
from ..grpc_service import EmulatedService, from_message, json_request, json_response, to_message

if TYPE_CHECKING:
    from ..server import Emulator

SERVICE = "google.devtools.cloudbuild.v1.CloudBuild"
MINE = "gcpgpu.fakes.cloudbuild:grpc_service"
READ_LOG = "/gcpgpu.emulator.v1.CloudBuildLogs/Read"


def to_build(data: dict) -> cb.Build:
    """A backend build (camelCase JSON) as the library's proto-plus Build."""
    return to_message(cb.Build, data)


class CloudBuildService(EmulatedService):
    """Routes the Cloud Build methods (and the emulator's log reader) to emulator.cloudbuild."""

    api = "cloudbuild"
    target = MINE

    def __init__(self, emulator: Emulator) -> None:
        super().__init__(emulator)
        self.backend = emulator.cloudbuild

        op = operations_pb2.Operation.SerializeToString
        self.serve(f"/{SERVICE}/CreateBuild", self._create, cb.CreateBuildRequest.deserialize, op, "POST")
        self.serve(f"/{SERVICE}/GetBuild", self._get, cb.GetBuildRequest.deserialize, cb.Build.serialize, "GET")
        self.serve(
            f"/{SERVICE}/ListBuilds", self._list, cb.ListBuildsRequest.deserialize, cb.ListBuildsResponse.serialize, "GET"
        )
        self.serve(f"/{SERVICE}/CancelBuild", self._cancel, cb.CancelBuildRequest.deserialize, cb.Build.serialize, "POST")
        self.serve(READ_LOG, self._read_log, json_request, json_response, "GET")
        # Other emulated APIs (Vertex AI) have operations too: a name that is not a build's goes on.
        self.serve_operations(lambda name: name in self.backend.operations, self._get_operation)

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
    def _read_log(self, request: dict) -> dict:
        text, offset, done = self.backend.read_log(request.get("project", ""), request.get("id", ""), int(request.get("offset", 0)))
        return {"text": text, "offset": offset, "done": done}
