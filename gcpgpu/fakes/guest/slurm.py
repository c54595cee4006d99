"""The Slurm daemons of emulated nodes, as local process trees that live and die with their VMs.

On a real Slurm cluster made by gcpgpu each node runs `python -m gcpgpu.slurm.node` (munged, slurmctld on
node 0, slurmd under the node's name) for as long as the VM runs. Here the emulator's per-VM supervisor
(host/supervisor.py, the node agents' too) runs that same program through the runner for every RUNNING VM
whose metadata says gcpgpu-scheduler=slurm, pointed at this emulator: a VM that stops being RUNNING
(stopped, deleted, preempted, a host error) loses its daemons and every job step under them at once
(SIGKILL to the whole tree); one that exited while its VM runs is started again. Every node of one host
shares 127.0.0.1, so each cluster gets a folder of its own under the emulator's storage (spool, logs,
each node's slurm.conf) and a block of free ports (slurmctld's, then one per node); a cluster none of
whose VMs exists any more loses both. Node 0's slurmctld keeps its state where the real one does: on the
cluster's Slurm state disk (metadata gcpgpu-slurm-state names it; the emulator gives each disk a folder),
and starts only once that disk is attached, as the real startup script waits for its device; so a node 0
made again under its name finds the queue there. A node 0 of a cluster without one keeps it in a folder
of that VM's own, lost with the VM, as a boot disk is. The daemons' output goes to Cloud Logging as log
`gcpgpu-slurm` of the VM. Their batch tasks run the job's process through the emulator's job agent, as
`docker run` on a real node (jobs/slurm_engine.py: the environment `engine_env` gives the daemons names
it, and sbatch hands it on to the tasks).

Unlike the emulator's own servers, slurmctld and slurmd listen on every interface (Slurm 22.05 has no
bind address); what they accept must carry a munge credential of the cluster's random key, which only
this emulator's Secret Manager and the nodes' mode-700 run folders hold.
"""

from __future__ import annotations

import atexit
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from ..core import ApiError
from ..host.ports import free_block
from ..host.shared_mounts import disk_folder_parts
from ..host.supervisor import VmSupervisor

if TYPE_CHECKING:
    from ..compute.backend import ComputeBackend
    from ..host.runner import Runner

SCHEDULER_KEY = "gcpgpu-scheduler"  # gcpgpu.slurm.node's keys (fakes/ imports nothing of the tool)
SIZE_KEY = "gcpgpu-nodes"
CLUSTER_KEY = "gcpgpu-cluster"
STATE_KEY = "gcpgpu-slurm-state"  # node 0's state disk (gcpgpu/cluster/slurm_state.py), attached as STATE_DEVICE
STATE_DEVICE = "gcpgpu-slurm-state"
MODULE = "gcpgpu.slurm.node"


def slurm_installed() -> str | None:
    """None when this machine can run Slurm's daemons, else the one line saying what to install."""
    missing = [b for b in ("slurmctld", "slurmd", "munged", "sbatch") if shutil.which(b) is None]
    if not missing:
        return None
    return (f"Slurm is not installed here ({', '.join(missing)} missing): "
            "apt-get install -y slurmctld slurmd slurm-client munge")


def _cluster_of(inst: dict) -> str | None:
    return inst["metadata"].get(CLUSTER_KEY) or inst["labels"].get(CLUSTER_KEY)


class SlurmNodes(VmSupervisor):
    """Starts and ends the Slurm daemons of emulated VMs; one per emulator."""

    NAME = "slurm"
    RUN_PREFIX = "slurm"
    LOG_NAME = "gcpgpu-slurm"
    KEYS = (SCHEDULER_KEY, SIZE_KEY, CLUSTER_KEY, STATE_KEY)

    def __init__(self, compute: ComputeBackend, runner: Runner, address: Callable[[], str | None],
                 root: Callable[[], Path], engine_env: Callable[[], dict[str, str]] | None = None) -> None:
        # The nodes' "Docker": what the daemons' environment adds so that their tasks run the jobs' processes
        # as the job agent does (jobs/slurm_engine.py); None: no engine, a task says so and fails.
        self.engine_env = engine_env
        self.root = root  # the emulator's storage folder: each cluster's Slurm folder goes under it
        # (project, cluster) -> (folder, its short run folder for munged's sockets, port base)
        self.clusters: dict[tuple[str, str], tuple[Path, Path, int]] = {}
        super().__init__(compute, runner, address)

    def reset(self) -> None:
        with self._lock:
            for run_id, _project, name in self.runs.values():
                self.runner.lose(run_id, 0.0, f"node {name}: the emulator was reset")
            folders = [f for folder, run, _base in self.clusters.values() for f in (folder, run)]
            self.clusters.clear()
        super().reset()
        for folder in folders:
            shutil.rmtree(folder, ignore_errors=True)

    def folder(self, project: str, cluster: str) -> Path | None:
        """The cluster's Slurm folder (nodes/NAME/slurm.conf is node NAME's SLURM_CONF), None if it has none."""
        with self._lock:
            found = self.clusters.get((project, cluster))
        return found[0] if found else None

    def run_folder(self, project: str, cluster: str) -> Path | None:
        """The cluster's short-lived folder (node NAME's munged socket is NAME/munge.sock), None if it has none."""
        with self._lock:
            found = self.clusters.get((project, cluster))
        return found[1] if found else None

    def kept(self, inst: dict) -> bool:
        return inst["metadata"].get(SCHEDULER_KEY) == "slurm" and bool(_cluster_of(inst))

    def scan(self) -> dict[str, tuple[str, dict]] | None:
        """The supervisor's scan, then a cluster none of whose VMs exists any more loses its folders and ports."""
        live = super().scan()
        if live is None:
            return None
        present = {(project, str(_cluster_of(inst))) for project, inst in live.values()}
        with self._lock:
            gone = [f for key in [k for k in self.clusters if k not in present] for f in self.clusters.pop(key)[:2]]
        for folder in gone:
            shutil.rmtree(folder, ignore_errors=True)
        return live

    def _cluster(self, project: str, cluster: str, size: int) -> tuple[Path, Path, int]:
        key = (project, cluster)
        if key not in self.clusters:
            folder = self.root() / "slurm" / project / cluster
            folder.mkdir(parents=True, exist_ok=True)
            # munged's socket path must stay under 108 bytes, which the storage folder's may not.
            run = Path(tempfile.mkdtemp(prefix="gcpgpu-slurm-"))
            atexit.register(shutil.rmtree, run, True)  # an emulator that exits with the cluster up leaves none
            self.clusters[key] = (folder, run, free_block(size + 1))
        return self.clusters[key]

    def command(self, project: str, inst: dict, address: str) -> tuple[list[str], dict[str, str]] | None:
        name = inst["name"]
        cluster = str(_cluster_of(inst))
        try:
            size = int(inst["metadata"].get(SIZE_KEY) or 1)
        except ValueError:
            size = 1
        folder, run, base = self._cluster(project, cluster, size)
        state = self._state_dir(project, inst, cluster, folder)
        if state is None:
            return None  # node 0 waits for its state disk, as its startup script does: the next scan looks again
        argv = [sys.executable, "-m", MODULE, "--project", project, "--cluster", cluster, "--node", name,
                "--dir", str(folder), "--run-dir", str(run), "--port-base", str(base), "--emulator", address,
                "--state-dir", str(state)]
        env = {"GCPGPU_EMULATOR": address, **(self.engine_env() if self.engine_env is not None else {})}
        return argv, env

    def _state_dir(self, project: str, inst: dict, cluster: str, folder: Path) -> Path | None:
        """Where the node's slurmctld keeps the queue. Node 0 of a cluster with a state disk: that disk's folder,
        once the disk is attached (None until then); node 0 without one: its boot disk, a folder of this VM's
        own, so a node 0 made again starts with an empty queue, as a real one would. Other nodes run no
        slurmctld: the cluster's folder."""
        if inst["name"] != f"{cluster}-0":
            return folder / "state"
        disk_key = inst["metadata"].get(STATE_KEY)
        if not disk_key:
            return folder / "boot" / str(inst["id"]) / "state"
        zone = inst["zone"]
        try:
            body = self.compute.get(project, f"zones/{zone}/instances", inst["name"])
            attached = next((d for d in body.get("disks", []) if d.get("deviceName") == STATE_DEVICE), None)
            if attached is None:
                return None
            name = str(attached["source"]).rsplit("/", 1)[-1]
            disk = self.compute.get(project, f"zones/{zone}/disks", name)
        except ApiError:
            return None
        path = self.root().joinpath(*disk_folder_parts(project, zone, name, disk["id"]))
        path.mkdir(parents=True, exist_ok=True)
        return path
