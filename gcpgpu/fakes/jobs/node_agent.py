"""The follower each emulated cluster node runs, as a local process that lives and dies with its node.

On a real node, a VM whose metadata has `gcpgpu-agent` runs gcpgpu's node agent (the follower:
`python -m gcpgpu.node.agent`, from the training image) as a systemd service, so it starts when
the VM does and ends when the VM stops, is deleted or is lost. Here a watcher thread looks at
Compute's instances a few times a second and does the same with local processes, through the
runner (a lost node's process tree is SIGKILLed, as its VM's loss would kill it): a RUNNING VM with
the key gets one agent, pointed at this emulator; a VM that stops being RUNNING (stopped,
deleted, preempted, host error) loses it at once; an agent that exited while its VM runs is
started again (systemd's Restart=always). Its output goes to Cloud Logging as log
`gcpgpu-node-agent` of the VM, so a test (or a user) reads what the follower did.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from .runner import LogLine, ReplicaSpec, Runner
from .vmlife import alive, keep_with_vms

if TYPE_CHECKING:
    from ..compute.backend import ComputeBackend

AGENT_KEY = "gcpgpu-agent"
CLUSTER_KEY = "gcpgpu-cluster"  # in metadata, else the label
LOG_NAME = "gcpgpu-node-agent"
MODULE = "gcpgpu.node.agent"
SCAN_S = 0.25
RESTART_S = 2.0  # systemd's RestartSec, shortened
STOP_GRACE_S = 30.0  # SIGTERM -> SIGKILL while the VM is STOPPING (it is TERMINATED by then on a preemption)


class NodeAgents:
    """Starts and ends the node agents of emulated VMs."""

    def __init__(self, compute: ComputeBackend, runner: Runner, address: Callable[[], str | None],
                 clock_file: Callable[[], str | None] = lambda: None) -> None:
        self.compute = compute
        self.runner = runner
        self.address = address
        self.clock_file = clock_file  # the emulator's published clock, which the agents then keep (gcpgpu.gcp.clock)
        self.poll_s = 1.0  # the agents' --poll (15 s on a real node)
        self.runs: dict[str, tuple[str, str, str]] = {}  # instance id -> (run id, project, name)
        self._ended: dict[str, float] = {}  # instance id -> when its agent was seen ended
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, name="emulator-node-agents", daemon=True)
        self._thread.start()

    def reset(self) -> None:
        with self._lock:
            self.runs.clear()
            self._ended.clear()

    def running(self) -> dict[str, str]:
        """Instance name -> run id of each node agent alive now (tests read it)."""
        with self._lock:
            return alive(self.runner, self.runs)

    def _loop(self) -> None:
        while True:
            time.sleep(SCAN_S)
            try:
                self.scan()
            except Exception as e:  # a VM changing under the scan: look again next time
                print(f"gcpgpu emulator: node agents: {type(e).__name__}: {e}", file=sys.stderr)

    def scan(self) -> None:
        address = self.address()
        if address is None:
            return  # not serving yet: an agent would have nowhere to call
        live: dict[str, tuple[str, dict]] = {}
        for project in list(self.compute.projects):
            for inst in self.compute.instance_summaries(project, (AGENT_KEY, CLUSTER_KEY)):
                live[inst["id"]] = (project, inst)
        with self._lock:
            keep_with_vms(self.runner, self.runs, self._ended, {i: str(p[1].get("status")) for i, p in live.items()},
                          STOP_GRACE_S, RESTART_S)
            for iid, (project, inst) in live.items():
                items = inst["metadata"]
                if inst["status"] != "RUNNING" or AGENT_KEY not in items or iid in self.runs:
                    continue
                cluster = items.get(CLUSTER_KEY) or inst["labels"].get(CLUSTER_KEY)
                if cluster:
                    self._start(project, inst, str(cluster), address)

    def _start(self, project: str, inst: dict, cluster: str, address: str) -> None:
        iid = inst["id"]
        zone = inst["zone"]
        run_id = f"agent/{project}/{inst['name']}/{iid}/{time.monotonic_ns()}"
        argv = [sys.executable, "-m", MODULE, "--project", project, "--cluster", cluster, "--node", inst["name"],
                "--poll", str(self.poll_s), "--emulator", address]

        def describe(line: LogLine) -> dict:
            return {"logName": f"projects/{project}/logs/{LOG_NAME}",
                    "resource": {"type": "gce_instance",
                                 "labels": {"instance_id": iid, "zone": zone, "project_id": project}},
                    "jsonPayload": {"instance": {"name": inst["name"], "zone": zone, "id": iid},
                                    "message": line.text},
                    "severity": "ERROR" if line.stream == "stderr" else "INFO"}

        env = {"GCPGPU_EMULATOR": address}
        if clock := self.clock_file():
            env["GCPGPU_CLOCK"] = clock
        self.runner.start(run_id, [ReplicaSpec(inst["name"], argv, env)], describe=describe)
        self.runs[iid] = (run_id, project, inst["name"])

