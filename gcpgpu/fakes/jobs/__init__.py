"""Jobs the emulator really runs: local processes for Vertex AI replicas and cluster nodes.

runner.py         starts a job's replicas as local processes on 127.0.0.1, captures their output
                  line by line with timestamps, and reports how each one ended.
agent.py          the emulated cluster job agent: it watches instances' metadata (setMetadata) for
                  a gcpgpu job, runs one process per node with the rank the real agent would give,
                  and reports per-node state as guest attributes (instances.getGuestAttributes).
cloud_logging.py  Cloud Logging's entries.list over REST, answered from the captured output, so
                  job logs are read the way they are read from the real cloud.
filters.py        the AIP-160 / Logging filter grammar both APIs take.

The trainer's numbers: when rank 0 of a job run here writes `--log-json FILE`, LocalJobs starts
gcpgpu.metrics.reporter beside it (a runner sidecar), as the training image's entrypoint does, with
`--emulator` this emulator and `--cluster NAME` (a cluster job) or `--job ID` (a Vertex AI job: the
numeric id its cloudml_job metrics carry), so `gcpgpu metrics tail` shows the trainer's throughput.
GCPGPU_METRICS=0 in the job's environment turns it off, as it does in the image.

Nothing here imports Google's libraries or torch: the trainer and the reporter run in their own processes.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from gcpgpu.trainer.argv import args_in_command_line, log_json_path, metrics_off

from .agent import ClusterAgent, MetricsTarget
from .runner import Replica, Run, Runner

if TYPE_CHECKING:
    from ..activity import Activity
    from ..compute.backend import ComputeBackend
    from .host import Host

__all__ = ["ClusterAgent", "LocalJobs", "Runner"]

REPORTER_MODULE = "gcpgpu.metrics.reporter"


class LocalJobs:
    """The emulator's `jobs`: one process runner shared by Vertex AI jobs and cluster jobs, and the agent."""

    def __init__(self, compute: ComputeBackend, activity: Activity | None = None) -> None:
        self.runner = Runner()
        self.agent = ClusterAgent(compute, self.runner, activity)
        self.emulator: Host | None = None  # the emulator these jobs run for (attach); its address is the reporters'
        self.runner.sidecar = self.reporter_argv

    def attach(self, emulator: Host) -> None:
        """The emulator whose Monitoring the reporters write to, and whose Vertex AI backend names jobs."""
        self.emulator = emulator

    def address(self) -> str | None:
        """HOST:PORT of the emulator, once it serves; else GCPGPU_EMULATOR (an in-process emulator's)."""
        port = getattr(self.emulator, "port", None)
        if port is not None:
            return str(self.emulator.address)
        return os.environ.get("GCPGPU_EMULATOR") or None

    def metrics_target(self, run: Run, replica: Replica) -> MetricsTarget | None:
        """Where rank 0's numbers go: its cluster (a cluster job), or its Vertex AI job; other ranks: None."""
        target = self.agent.metrics_target(run.id)
        if target is not None:
            return target
        vertex = getattr(self.emulator, "vertex", None)
        job = getattr(vertex, "jobs", {}).get(run.id) if vertex is not None else None
        if job is None or replica.spec.task != "workerpool0-0":  # workerpool0's only replica is rank 0
            return None
        parts = run.id.split("/")  # projects/NUMBER/locations/REGION/customJobs/ID
        return MetricsTarget(str(job.get("_project_id") or parts[1]), parts[3], "job", parts[-1])

    def reporter_argv(self, run: Run, replica: Replica) -> list[str] | None:
        """The runner's sidecar hook: gcpgpu.metrics.reporter for rank 0 when its trainer writes --log-json."""
        log_json = log_json_path(args_in_command_line(replica.spec.argv))
        if log_json is None or metrics_off(replica.spec.env):
            return None
        target = self.metrics_target(run, replica)
        address = self.address()
        if target is None or address is None or replica.popen is None:
            return None
        return [sys.executable, "-m", REPORTER_MODULE, "--log-json", log_json, f"--{target.kind}", target.name,
                "--project", target.project, "--location", target.location, "--task-id", "0",
                "--emulator", address, "--pid", str(replica.popen.pid)]

    def reset(self) -> None:
        """Stop every local process and forget every run and report."""
        self.agent.reset()
        self.runner.reset()
