"""What the jobs need of the emulator they run for, as a protocol, so `fakes.jobs` never imports
`fakes.server` (which builds the jobs): the dependency runs one way, server -> jobs.

`gcpgpu.fakes.server.Emulator` is one such host; a test may pass any object with these attributes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ..compute.backend import ComputeBackend
    from . import LocalJobs


class Host(Protocol):
    compute: ComputeBackend
    jobs: LocalJobs
    vertex: Any      # the Vertex AI backend (its `jobs` name Vertex runs)
    port: int | None  # the REST port once serving

    @property
    def address(self) -> str: ...  # HOST:PORT
