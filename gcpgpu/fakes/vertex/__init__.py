"""The emulator's Vertex AI: JobService custom jobs over gRPC (the client's default) and REST.

backend.py holds jobs and their state machine; validation.py checks a job as the service does,
list_filter.py reads ListCustomJobs' filter, local_run.py turns a job into local processes, and
errors.py is the service's error shape. rest.py and service.py are the two wire formats. The
backend lives at `emulator.vertex`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .backend import VertexBackend
from .errors import VertexError

if TYPE_CHECKING:
    from ..server import Emulator

__all__ = ["VertexBackend", "VertexError", "grpc_service"]


def grpc_service(emulator: Emulator) -> Any:
    """The gRPC handler for the server's GRPC_SERVICES (imported here: grpc and aiplatform types are heavy)."""
    from .service import VertexService

    return VertexService(emulator)
