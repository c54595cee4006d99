"""One process per emulated VM that lives and dies with it, as a systemd service does on a real node.

Both per-VM programs the emulator runs for its nodes (gcpgpu's follower, guest/node_agent.py; the Slurm
daemons, guest/slurm.py) are a VmSupervisor: a watcher thread looks at Compute's instances a few times a
second and keeps one run per instance id through the runner, the same way for both:
- a RUNNING VM the program runs on (`kept`) that has no run gets one (`command`; None: not yet, the next
  scan asks again);
- a VM that is STOPPING has its process SIGTERMed (once), then SIGKILLed after STOP_GRACE_S;
- a VM that is no longer RUNNING (stopped, deleted, preempted, a host error), or no longer runs the program,
  loses it at once (SIGKILL to the whole tree);
- a process that exited while its VM runs is forgotten after RESTART_S (systemd's RestartSec), so the scan
  starts it again.
The process's output goes to Cloud Logging as log LOG_NAME of the VM (resource gce_instance).
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from .runner import LogLine, ReplicaSpec, Runner

if TYPE_CHECKING:
    from ..compute.backend import ComputeBackend

SCAN_S = 0.25
RESTART_S = 2.0  # systemd's RestartSec, shortened
STOP_GRACE_S = 30.0  # SIGTERM -> SIGKILL while the VM is STOPPING (it is TERMINATED by then on a preemption)


class VmSupervisor:
    """Starts and ends one program's process on each emulated VM that runs it; one per program per emulator.

    A subclass says which VMs run it (KEYS, the metadata keys the scan reads, and `kept`), how it starts
    (`command`) and what it is called (NAME, in the watcher thread's name and its error lines; RUN_PREFIX,
    the start of its run ids; LOG_NAME, its Cloud Logging log). The watcher starts in __init__: a subclass
    sets its own state before it calls it.
    """

    NAME = "program"
    RUN_PREFIX = "program"
    LOG_NAME = "program"
    KEYS: tuple[str, ...] = ()

    def __init__(self, compute: ComputeBackend, runner: Runner, address: Callable[[], str | None]) -> None:
        self.compute = compute
        self.runner = runner
        self.address = address
        self.runs: dict[str, tuple[str, str, str]] = {}  # instance id -> (run id, project, name)
        self._ended: dict[str, float] = {}  # instance id -> when its process was first seen ended
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, name=f"emulator-{self.NAME.replace(' ', '-')}",
                                        daemon=True)
        self._thread.start()

    # -- what a subclass says ---------------------------------------------------------------------
    def kept(self, inst: dict) -> bool:
        """Whether the program belongs on this VM at all (its process is kept with the VM while it does)."""
        return True

    def command(self, project: str, inst: dict, address: str) -> tuple[list[str], dict[str, str]] | None:
        """(argv, environment) of the program on a RUNNING VM that has none, pointed at the emulator at
        `address`; None when it does not start there (yet). Called under the lock."""
        raise NotImplementedError

    # -- the same for every program ---------------------------------------------------------------
    def reset(self) -> None:
        with self._lock:
            self.runs.clear()
            self._ended.clear()

    def running(self) -> dict[str, str]:
        """Instance name -> run id of each VM's process alive now (tests read it)."""
        with self._lock:
            return {name: run_id for run_id, _p, name in list(self.runs.values())
                    if (run := self.runner.get(run_id)) is not None and not run.done}

    def _loop(self) -> None:
        while True:
            time.sleep(SCAN_S)
            try:
                self.scan()
            except Exception as e:  # a VM changing under the scan: look again next time
                print(f"gcpgpu emulator: {self.NAME}: {type(e).__name__}: {e}", file=sys.stderr)

    def scan(self) -> dict[str, tuple[str, dict]] | None:
        """One look at Compute's instances: each kept VM's process started, stopped or forgotten as its state
        says. The VMs seen (instance id -> (project, summary)), or None before the emulator serves."""
        address = self.address()
        if address is None:
            return None  # not serving yet: the program would have nowhere to call
        live: dict[str, tuple[str, dict]] = {}
        for project in list(self.compute.projects):
            for inst in self.compute.instance_summaries(project, self.KEYS):
                if self.kept(inst):
                    live[inst["id"]] = (project, inst)
        with self._lock:
            self._keep_with_vms({iid: str(inst["status"]) for iid, (_project, inst) in live.items()})
            for iid, (project, inst) in live.items():
                if inst["status"] == "RUNNING" and iid not in self.runs:
                    self._start(project, inst, address)
        return live

    def _keep_with_vms(self, status: dict[str, str]) -> None:
        """One scan's changes to the runs, given each kept instance's Compute status (one not in `status` is
        gone). The caller holds the lock."""
        for iid, (run_id, _project, name) in list(self.runs.items()):
            now = status.get(iid)
            if now == "STOPPING":  # shutting down: SIGTERM now (once), SIGKILL after the grace
                self.runner.lose(run_id, STOP_GRACE_S, f"node {name} is stopping")
                continue
            if now != "RUNNING":
                self.runner.lose(run_id, 0.0, f"node {name} is no longer RUNNING")
                del self.runs[iid]
                continue
            run = self.runner.get(run_id)
            if run is not None and run.done:
                seen = self._ended.setdefault(iid, time.monotonic())
                if time.monotonic() - seen >= RESTART_S:
                    del self.runs[iid]
                    self._ended.pop(iid, None)

    def _start(self, project: str, inst: dict, address: str) -> None:
        how = self.command(project, inst, address)
        if how is None:
            return
        argv, env = how
        iid, zone, name = inst["id"], inst["zone"], inst["name"]
        run_id = f"{self.RUN_PREFIX}/{project}/{name}/{iid}/{time.monotonic_ns()}"
        log_name = f"projects/{project}/logs/{self.LOG_NAME}"

        def describe(line: LogLine) -> dict:
            return {"logName": log_name,
                    "resource": {"type": "gce_instance",
                                 "labels": {"instance_id": iid, "zone": zone, "project_id": project}},
                    "jsonPayload": {"instance": {"name": name, "zone": zone, "id": iid}, "message": line.text},
                    "severity": "ERROR" if line.stream == "stderr" else "INFO"}

        self.runner.start(run_id, [ReplicaSpec(name, argv, env)], describe=describe)
        self.runs[iid] = (run_id, project, name)
