"""What the jobs' front ends (getGuestAttributes, Cloud Logging's entries.list) read of the emulator
that serves them, as a protocol, so `fakes.jobs` never imports `fakes.server` (which builds the
jobs): the dependency runs one way, server -> jobs. The jobs themselves get what they need as
constructor arguments (LocalJobs).

`gcpgpu.fakes.server.Emulator` is one such host; a test may pass any object with these attributes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from ..compute.backend import ComputeBackend
    from . import LocalJobs


class Host(Protocol):
    compute: ComputeBackend
    jobs: LocalJobs
