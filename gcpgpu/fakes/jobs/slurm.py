"""The Slurm daemons of emulated nodes, as local process trees that live and die with their VMs.

On a real Slurm cluster made by gcpgpu each node runs `python -m gcpgpu.slurm.node` (munged, slurmctld on
node 0, slurmd under the node's name) for as long as the VM runs. Here a watcher thread looks at Compute's
instances a few times a second, as the node agents' does (jobs/node_agent.py), and runs that same program
through the runner for every RUNNING VM whose metadata says gcpgpu-scheduler=slurm, pointed at this
emulator: a VM that stops being RUNNING (stopped, deleted, preempted, a host error) loses its daemons and
every job step under them at once (SIGKILL to the whole tree); one that exited while its VM runs is
started again. Every node of one host shares 127.0.0.1, so each cluster gets a folder of its own under the
emulator's storage (spool, logs, each node's slurm.conf) and a block of free ports (slurmctld's, then one
per node); a cluster none of whose VMs exists any more loses both. Node 0's slurmctld keeps its state
where the real one does: on the cluster's Slurm state disk (metadata gcpgpu-slurm-state names it; the
emulator gives each disk a folder), and starts only once that disk is attached, as the real startup script
waits for its device; so a node 0 made again under its name finds the queue there. A node 0 of a cluster
without one keeps it in a folder of that VM's own, lost with the VM, as a boot disk is.
The daemons' output goes to Cloud Logging as log `gcpgpu-slurm` of the VM. Their batch tasks run the
job's process through the emulator's job agent, as `docker run` on a real node (slurm_engine.py).

Unlike the emulator's own servers, slurmctld and slurmd listen on every interface (Slurm 22.05 has no
bind address); what they accept must carry a munge credential of the cluster's random key, which only
this emulator's Secret Manager and the nodes' mode-700 run folders hold.
"""

from __future__ import annotations

import atexit
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from ..core import ApiError
from .ports import free_block
from .runner import LogLine, ReplicaSpec, Runner
from .shared_mounts import disk_folder_parts
from .slurm_engine import ENGINE_ENV, Engine
from .vmlife import alive, keep_with_vms

if TYPE_CHECKING:
    from ..compute.backend import ComputeBackend

SCHEDULER_KEY = "gcpgpu-scheduler"  # gcpgpu.slurm.node's keys (fakes/ imports nothing of the tool)
SIZE_KEY = "gcpgpu-nodes"
CLUSTER_KEY = "gcpgpu-cluster"
STATE_KEY = "gcpgpu-slurm-state"  # node 0's state disk (gcpgpu/cluster/slurm_state.py), attached as STATE_DEVICE
STATE_DEVICE = "gcpgpu-slurm-state"
LOG_NAME = "gcpgpu-slurm"
MODULE = "gcpgpu.slurm.node"
SCAN_S = 0.25
RESTART_S = 2.0
STOP_GRACE_S = 30.0  # SIGTERM -> SIGKILL while the VM is STOPPING


def slurm_installed() -> str | None:
    """None when this machine can run Slurm's daemons, else the one line saying what to install."""
    missing = [b for b in ("slurmctld", "slurmd", "munged", "sbatch") if shutil.which(b) is None]
    if not missing:
        return None
    return (f"Slurm is not installed here ({', '.join(missing)} missing): "
            "apt-get install -y slurmctld slurmd slurm-client munge")


class SlurmNodes:
    """Starts and ends the Slurm daemons of emulated VMs; one per emulator."""

    def __init__(self, compute: ComputeBackend, runner: Runner, address: Callable[[], str | None],
                 root: Callable[[], Path], engine: Engine | None = None) -> None:
        self.compute = compute
        self.runner = runner
        self.engine = engine  # the nodes' "Docker": runs the jobs' processes as the job agent does
        self.address = address
        self.root = root  # the emulator's storage folder: each cluster's Slurm folder goes under it
        self.runs: dict[str, tuple[str, str, str]] = {}  # instance id -> (run id, project, name)
        # (project, cluster) -> (folder, its short run folder for munged's sockets, port base)
        self.clusters: dict[tuple[str, str], tuple[Path, Path, int]] = {}
        self._ended: dict[str, float] = {}
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, name="emulator-slurm", daemon=True)
        self._thread.start()

    def reset(self) -> None:
        with self._lock:
            for run_id, _project, name in self.runs.values():
                self.runner.lose(run_id, 0.0, f"node {name}: the emulator was reset")
            self.runs.clear()
            self._ended.clear()
            folders = [f for folder, run, _base in self.clusters.values() for f in (folder, run)]
            self.clusters.clear()
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

    def running(self) -> dict[str, str]:
        """Instance name -> run id of each node whose daemons run now (tests read it)."""
        with self._lock:
            return alive(self.runner, self.runs)

    def _loop(self) -> None:
        while True:
            time.sleep(SCAN_S)
            try:
                self.scan()
            except Exception as e:  # a VM changing under the scan: look again next time
                print(f"gcpgpu emulator: slurm: {type(e).__name__}: {e}", file=sys.stderr)

    def scan(self) -> None:
        address = self.address()
        if address is None:
            return
        live: dict[str, tuple[str, dict]] = {}
        present: set[tuple[str, str]] = set()
        for project in list(self.compute.projects):
            for inst in self.compute.instance_summaries(project, (SCHEDULER_KEY, SIZE_KEY, CLUSTER_KEY, STATE_KEY)):
                if inst["metadata"].get(SCHEDULER_KEY) != "slurm":
                    continue
                cluster = inst["metadata"].get(CLUSTER_KEY) or inst["labels"].get(CLUSTER_KEY)
                if cluster:
                    live[inst["id"]] = (project, inst)
                    present.add((project, str(cluster)))
        gone: list[Path] = []
        with self._lock:
            keep_with_vms(self.runner, self.runs, self._ended, {i: str(p[1]["status"]) for i, p in live.items()},
                          STOP_GRACE_S, RESTART_S)
            for key in [k for k in self.clusters if k not in present]:
                gone.extend(self.clusters.pop(key)[:2])  # no VM of it is left: its folders and ports go
            for iid, (project, inst) in live.items():
                if inst["status"] == "RUNNING" and iid not in self.runs:
                    self._start(project, inst, address)
        for folder in gone:
            shutil.rmtree(folder, ignore_errors=True)

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

    def _start(self, project: str, inst: dict, address: str) -> None:
        iid, zone, name = inst["id"], inst["zone"], inst["name"]
        cluster = str(inst["metadata"].get(CLUSTER_KEY) or inst["labels"].get(CLUSTER_KEY))
        try:
            size = int(inst["metadata"].get(SIZE_KEY) or 1)
        except ValueError:
            size = 1
        folder, run, base = self._cluster(project, cluster, size)
        state = self._state_dir(project, inst, cluster, folder)
        if state is None:
            return  # node 0 waits for its state disk, as its startup script does: the next scan looks again
        run_id = f"slurm/{project}/{name}/{iid}/{time.monotonic_ns()}"
        argv = [sys.executable, "-m", MODULE, "--project", project, "--cluster", cluster, "--node", name,
                "--dir", str(folder), "--run-dir", str(run), "--port-base", str(base), "--emulator", address,
                "--state-dir", str(state)]

        def describe(line: LogLine) -> dict:
            return {"logName": f"projects/{project}/logs/{LOG_NAME}",
                    "resource": {"type": "gce_instance",
                                 "labels": {"instance_id": iid, "zone": zone, "project_id": project}},
                    "jsonPayload": {"instance": {"name": name, "zone": zone, "id": iid}, "message": line.text},
                    "severity": "ERROR" if line.stream == "stderr" else "INFO"}

        env = {"GCPGPU_EMULATOR": address, **({ENGINE_ENV: self.engine.command()} if self.engine else {})}
        self.runner.start(run_id, [ReplicaSpec(name, argv, env)], describe=describe)
        self.runs[iid] = (run_id, project, name)

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
