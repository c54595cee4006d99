"""Jobs the emulator really runs: local processes for Vertex AI replicas and cluster nodes.

The machinery they run on (the process runner, the sandbox, storage, mounts, ports, the per-VM
supervisor) is the emulated host's: gcpgpu/fakes/host/. The programs each VM runs beside them (the
follower, the Slurm daemons) and its own reports are the guest's: gcpgpu/fakes/guest/. LocalJobs
wires the runner, the job agent and those programs together (`jobs.runner`, `jobs.agent`,
`jobs.node_agents`, `jobs.slurm`).

agent.py          the emulated cluster job agent: it watches instances' metadata (setMetadata) for
                  a gcpgpu job, runs one process per node with the rank the real agent would give,
                  and reports per-node state as guest attributes (instances.getGuestAttributes).
slurm_engine.py   the container engine of emulated Slurm nodes: a Slurm task's job runs through the
                  job agent, as `docker run` runs it on a real node.

What the runs print is Cloud Logging's (gcpgpu/fakes/logging/): job logs are read with entries.list,
the way they are read from the real cloud.

The trainer's numbers: when rank 0 of a job run here writes `--log-json FILE`, LocalJobs starts
gcpgpu.node.reporter beside it (a runner sidecar), as the training image's entrypoint does, with
`--emulator` this emulator and `--cluster NAME` (a cluster job) or `--job ID` (a Vertex AI job: the
numeric id its cloudml_job metrics carry), so `gcpgpu metrics tail` shows the trainer's throughput.
GCPGPU_METRICS=0 in the job's environment turns it off, as it does in the image.

Every node of a cluster job also runs gcpgpu.node.nics beside its process (as the image's entrypoint does on
every node), reading the node's fake sysfs (guest/nics.py: `jobs.nics` keeps it from the job's steps) and
writing each NIC's rates to this emulator's Monitoring.

Nothing here imports Google's libraries or torch: the trainer and the reporter run in their own processes.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from gcpgpu.trainer.argv import args_in_command_line, log_json_path, metrics_off

from ..guest.nics import NicTraffic
from ..guest.node_agent import NodeAgents
from ..guest.slurm import SlurmNodes
from ..host.runner import MetricsTarget, Replica, Run, Runner
from ..host.sandbox import UserCommands
from ..host.shared_mounts import SharedStorage
from ..host.storage import Storage
from .agent import ClusterAgent
from .slurm_engine import Engine

if TYPE_CHECKING:
    from ..activity import Activity
    from ..compute.backend import ComputeBackend
    from ..core import Faults
    from ..events import VmEvents

__all__ = ["ClusterAgent", "LocalJobs"]

REPORTER_MODULE = "gcpgpu.node.reporter"
NICS_MODULE = "gcpgpu.node.nics"
NIC_INTERVAL_S = 5.0  # the sampler's writes here: the fastest Cloud Monitoring takes, so tests wait less


class LocalJobs:
    """The emulator's `jobs`: one process runner shared by Vertex AI jobs and cluster jobs, and the agent.

    `address` says where the emulator serves (HOST:PORT, or None before it does): the reporters
    write there. It is a callable because the port exists only once serving starts.
    """

    def __init__(self, compute: ComputeBackend | None, activity: Activity | None = None,
                 events: VmEvents | None = None, storage: Storage | None = None,
                 address: Callable[[], str | None] | None = None, user: UserCommands | None = None,
                 clock_file: Callable[[], str | None] = lambda: None, shared: SharedStorage | None = None,
                 faults: Faults | None = None) -> None:
        self.runner = Runner(sidecar=self.sidecars)
        self.compute = compute
        # Each cluster node's NIC counters (a fake sysfs on its disk), following its job's steps and the faults.
        self.nics = NicTraffic(activity, lambda: faults, compute.clock) if compute is not None else None
        self.agent = ClusterAgent(compute, self.runner, activity, events, storage, user, shared)
        self._address = address
        # The follower each node with `gcpgpu-agent` runs (job submit --detach, cluster up --autostop),
        # on the emulator's clock where it is published (clock_file: its path, gcpgpu.gcp.clock).
        self.node_agents = NodeAgents(compute, self.runner, self.address, clock_file) if compute is not None else None
        # The Slurm daemons of the nodes of clusters made with --scheduler slurm (guest/slurm.py).
        slurm_root = (lambda: storage.root) if storage is not None else (lambda: self.runner.root)
        self.slurm = SlurmNodes(compute, self.runner, self.address, slurm_root,
                                Engine(compute, self.agent).env) if compute is not None else None

    def address(self) -> str | None:
        """HOST:PORT of the emulator, once it serves; else GCPGPU_EMULATOR (an in-process emulator's)."""
        serving = self._address() if self._address is not None else None
        return serving or os.environ.get("GCPGPU_EMULATOR") or None

    @staticmethod
    def metrics_target(run: Run, replica: Replica) -> MetricsTarget | None:
        """Where rank 0's numbers go (its cluster, or its Vertex AI job), as the run was started; other ranks: None."""
        if run.metrics is None or not run.replicas or replica.spec.task != run.replicas[0].spec.task:
            return None
        return run.metrics

    def reporter_argv(self, run: Run, replica: Replica) -> list[str] | None:
        """The runner's sidecar hook: gcpgpu.node.reporter for rank 0 when its trainer writes --log-json."""
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

    def node_workdir(self, instance_id: str) -> Path | None:
        """The working folder (/workdir) of the job running on node `instance_id` now, if one runs there."""
        run = self.running_on(instance_id)
        folder = run.workdir / "workdir" if run is not None else None
        return folder if folder is not None and folder.is_dir() else None

    def running_on(self, instance_id: str) -> Run | None:
        """The run of the job running on node `instance_id` now (its processes alive), or None."""
        run_id = self.agent.node_runs.get(instance_id)
        run = self.runner.get(run_id) if run_id else None
        return run if run is not None and run.replicas and not run.done else None

    def container(self, instance_id: str, name: str) -> tuple[int, dict[str, str]] | str:
        """What `docker exec NAME` on node `instance_id` enters: the pid of its running job's sandbox and the
        container's environment; else why not, in Docker's words."""
        run = self.running_on(instance_id)
        if run is None or self.agent.containers.get(instance_id) != name:
            return f"No such container: {name}"
        replica = run.replicas[0]
        from ..host.nsexec import sandbox_process

        pid = sandbox_process(replica.popen.pid) if replica.popen is not None and replica.spec.prepare else None
        if pid is None:
            return f"container {name} is not running"
        return pid, dict(replica.spec.env)

    def sidecars(self, run: Run, replica: Replica) -> list[list[str]]:
        """The runner's sidecar hook: the metrics reporter (rank 0 with --log-json), the NIC sampler (every node)."""
        return [argv for argv in (self.reporter_argv(run, replica), self.nic_sampler_argv(run, replica)) if argv]

    def nic_sampler_argv(self, run: Run, replica: Replica) -> list[str] | None:
        """gcpgpu.node.nics for a cluster node's run, over the node's fake sysfs, which starts following the run."""
        address = self.address()
        parts = run.id.split("/")
        if self.nics is None or self.compute is None or address is None or parts[0] != "cluster" or len(parts) != 4 \
                or replica.popen is None:
            return None
        project, _job, name = parts[1], parts[2], parts[3]
        found = [(z, inst) for p, z, inst in self.compute.find_running(name) if p == project]
        if not found:
            return None
        zone, inst = found[0]
        cluster = (inst.get("labels") or {}).get("gcpgpu-cluster")
        if not cluster:
            return None
        machine_type = str(inst.get("machineType", "")).rsplit("/", 1)[-1]
        root = Path(self.agent.storage.local("/", inst["id"], make="folder"))
        self.nics.track(inst["id"], name, machine_type, run.id.rsplit("/", 1)[0], int(replica.spec.env.get("NNODES", "1")),
                        replica.spec.argv, root, run)
        return [sys.executable, "-m", NICS_MODULE, "--project", project, "--cluster", cluster, "--node", name,
                "--machine-type", machine_type, "--location", zone, "--sysroot", str(root),
                "--interval", f"{NIC_INTERVAL_S:g}", "--emulator", address, "--pid", str(replica.popen.pid)]

    def reset(self) -> None:
        """Stop every local process and forget every run and report."""
        if self.nics is not None:
            self.nics.reset()
        self.agent.reset()
        if self.node_agents is not None:
            self.node_agents.reset()
        if self.slurm is not None:
            self.slurm.reset()
        self.runner.reset()
