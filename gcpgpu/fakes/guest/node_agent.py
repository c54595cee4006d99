"""The follower each emulated cluster node runs, as a local process that lives and dies with its node.

On a real node, a VM whose metadata has `gcpgpu-agent` runs gcpgpu's node agent (the follower:
`python -m gcpgpu.node.agent`, from the training image) as a systemd service, so it starts when
the VM does and ends when the VM stops, is deleted or is lost. Here the emulator's per-VM supervisor
(host/supervisor.py) does the same with local processes, through the runner (a lost node's process tree
is SIGKILLed, as its VM's loss would kill it): a RUNNING VM with the key gets one agent, pointed at this
emulator; a VM that stops being RUNNING (stopped, deleted, preempted, host error) loses it at once; an
agent that exited while its VM runs is started again (systemd's Restart=always). Its output goes to Cloud
Logging as log `gcpgpu-node-agent` of the VM, so a test (or a user) reads what the follower did.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..host.supervisor import VmSupervisor

if TYPE_CHECKING:
    from ..compute.backend import ComputeBackend
    from ..host.runner import Runner

AGENT_KEY = "gcpgpu-agent"
CLUSTER_KEY = "gcpgpu-cluster"  # in metadata, else the label
MODULE = "gcpgpu.node.agent"


class NodeAgents(VmSupervisor):
    """Starts and ends the node agents of emulated VMs."""

    NAME = "node agents"
    RUN_PREFIX = "agent"
    LOG_NAME = "gcpgpu-node-agent"
    KEYS = (AGENT_KEY, CLUSTER_KEY)

    def __init__(self, compute: ComputeBackend, runner: Runner, address: Callable[[], str | None],
                 clock_file: Callable[[], str | None] = lambda: None) -> None:
        self.clock_file = clock_file  # the emulator's published clock, which the agents then keep (gcpgpu.gcp.clock)
        self.poll_s = 1.0  # the agents' --poll (15 s on a real node)
        super().__init__(compute, runner, address)

    def command(self, project: str, inst: dict, address: str) -> tuple[list[str], dict[str, str]] | None:
        items = inst["metadata"]
        cluster = items.get(CLUSTER_KEY) or inst["labels"].get(CLUSTER_KEY)
        if AGENT_KEY not in items or not cluster:
            return None
        argv = [sys.executable, "-m", MODULE, "--project", project, "--cluster", str(cluster), "--node", inst["name"],
                "--poll", str(self.poll_s), "--emulator", address]
        env = {"GCPGPU_EMULATOR": address}
        if clock := self.clock_file():
            env["GCPGPU_CLOCK"] = clock
        return argv, env
