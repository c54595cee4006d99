"""Jobs the emulator really runs: local processes for Vertex AI replicas and cluster nodes.

runner.py         starts a job's replicas as local processes on 127.0.0.1, captures their output
                  line by line with timestamps, and reports how each one ended.
agent.py          the emulated cluster job agent: it watches instances' metadata (setMetadata) for
                  a gcpgpu job, runs one process per node with the rank the real agent would give,
                  and reports per-node state as guest attributes (instances.getGuestAttributes).
cloud_logging.py  Cloud Logging's entries.list over REST, answered from the captured output, so
                  job logs are read the way they are read from the real cloud.
filters.py        the AIP-160 / Logging filter grammar both APIs take.

Nothing here imports Google's libraries or torch: the trainer runs in its own processes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .agent import ClusterAgent
from .runner import Runner

if TYPE_CHECKING:
    from ..compute.backend import ComputeBackend

__all__ = ["ClusterAgent", "LocalJobs", "Runner"]


class LocalJobs:
    """The emulator's `jobs`: one process runner shared by Vertex AI jobs and cluster jobs, and the agent."""

    def __init__(self, compute: ComputeBackend) -> None:
        self.runner = Runner()
        self.agent = ClusterAgent(compute, self.runner)

    def reset(self) -> None:
        """Stop every local process and forget every run and report."""
        self.agent.reset()
        self.runner.reset()
