"""The emulator's Cloud Build: CreateBuild/GetBuild/ListBuilds/CancelBuild over gRPC, builds validated and
timed, never run.

backend.py  builds recorded, validated and timed on the emulator's clock (`emulator.cloudbuild`).
service.py  the gRPC wire, as google-cloud-build's default transport speaks it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .backend import CloudBuildBackend

if TYPE_CHECKING:
    from ..server import Emulator

__all__ = ["CloudBuildBackend", "grpc_service"]


def grpc_service(emulator: Emulator) -> Any:
    """The gRPC handler for GRPC_SERVICE_FACTORIES (imported here: grpc and the Cloud Build types are heavy)."""
    from .service import CloudBuildService

    return CloudBuildService(emulator)
