"""What runs where, in the emulator's shared world: the job runners write it, Monitoring reads it.

The cluster job agent (fakes/jobs) records when a job's process starts and ends on a node; the
Monitoring backend turns those spans into busy GPUs, NICs and CPUs, and leaves every other minute
of a RUNNING VM idle. Neither backend holds the other: both hold this ledger (ARCHITECTURE.md,
"The emulator's shape as it grows"). Times come from the emulator's clock, so a test that
advances the clock sees a job run for as long as it says.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from .core import Clock


@dataclass
class Busy:
    """One job's run on one VM: [start, end), end None while it runs."""

    run_id: str
    start: float
    end: float | None = None


class Activity:
    """Busy spans per VM (by instance id), recorded by whoever runs work on it."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self._spans: dict[str, list[Busy]] = {}

    def begin(self, instance_id: str, run_id: str, at: float | None = None) -> None:
        """A job's process started on the VM (a second begin for the same run is ignored)."""
        with self._lock:
            spans = self._spans.setdefault(str(instance_id), [])
            if any(b.run_id == run_id and b.end is None for b in spans):
                return
            spans.append(Busy(run_id, self.clock.now() if at is None else at))

    def end(self, instance_id: str, run_id: str, at: float | None = None) -> None:
        """The job's process on the VM ended (however it ended)."""
        with self._lock:
            for b in self._spans.get(str(instance_id), []):
                if b.run_id == run_id and b.end is None:
                    b.end = self.clock.now() if at is None else at

    def spans(self, instance_id: str) -> tuple[tuple[float, float | None], ...]:
        """The VM's busy [start, end) spans, oldest first."""
        with self._lock:
            return tuple(sorted((b.start, b.end) for b in self._spans.get(str(instance_id), [])))

    def spans_of(self, instance_ids: list[str]) -> list[tuple[tuple[float, float | None], ...]]:
        """spans() of many VMs under one hold of the lock: Monitoring reads 1,024 VMs' in every call, and
        14 calls at once each taking the lock 1,024 times queue on it (and on the GIL) for seconds."""
        with self._lock:
            return [tuple(sorted((b.start, b.end) for b in self._spans.get(str(i), []))) for i in instance_ids]

    def reset(self) -> None:
        with self._lock:
            self._spans.clear()
