"""The emulator's fault clock: fires armed node losses (Faults.preemptions) when they come due,
and ends the VMs whose scheduling.maxRunDuration is up (compute/runtime.py).

A loss is data on the world (core.Faults), armed from a test (`gcp.faults.preempt("c-1", after_s=30)`),
a faults file or `gcpgpu emulator faults --set preempt=c-1@30s`. This clock, one thread per running
emulator, reads it and acts through the backends' own verbs: Compute takes the VM away
(compute/preemption.py), and whoever runs work on the VM (the job agent, a loss observer) stops it.

When a loss is due:
    after_s given:  `after_s` seconds into a job running on the VM, counted from the later of the
                    moment the fault was armed and the moment that job started (Activity knows);
                    a VM that runs no job waits for one;
    at given:       at that emulator-clock time, job or not;
    neither:        at once.
A loss whose VM does not exist (or is not RUNNING) yet waits for it.
"""

from __future__ import annotations

import sys
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .activity import Activity
    from .compute.backend import ComputeBackend
    from .core import Clock, Faults

TICK_S = 0.1


class FaultClock:
    """Checks the armed losses every TICK_S seconds while the emulator runs."""

    def __init__(self, faults: Faults, compute: ComputeBackend, activity: Activity, clock: Clock) -> None:
        self.faults = faults
        self.compute = compute
        self.activity = activity
        self.clock = clock
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="emulator-fault-clock", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None

    def _run(self) -> None:
        while not self._stop.wait(TICK_S):
            try:
                self.tick()
            except Exception as e:  # a fault must never take the emulator down
                print(f"gcpgpu emulator: fault clock: {type(e).__name__}: {e}", file=sys.stderr)

    def tick(self) -> list[str]:
        """Fire every loss that is due now; returns the names of the VMs taken away."""
        now = self.clock.now()
        targets: dict[int, list[tuple[str, str, dict]]] = {}

        def due(entry: dict) -> bool:
            if entry.get("armed") is None:
                entry["armed"] = now
            found = self.compute.find_running(entry["instance"])
            if not found:
                return False
            if entry.get("at") is not None:
                hit = now >= entry["at"]
            elif entry.get("after_s") is not None:
                starts = [s for _p, _z, inst in found for s, end in self.activity.spans(inst["id"]) if end is None]
                hit = bool(starts) and now >= max(entry["armed"], max(starts)) + entry["after_s"]
            else:
                hit = True
            if hit:
                targets[id(entry)] = found
            return hit

        lost = []
        for entry in self.faults.take_preemptions(due):
            for project, zone, inst in targets.get(id(entry), []):
                if self.compute.lose_instance(project, zone, inst["name"], entry["kind"],
                                              float(self.faults.preempt_grace_s)):
                    lost.append(inst["name"])
        # Not a fault but the same kind of event on the same clock: VMs whose maxRunDuration is up.
        return lost + self.compute.end_expired_runs()
