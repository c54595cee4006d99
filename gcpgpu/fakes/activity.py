"""What runs where, in the emulator's shared world: the job runners write it, Monitoring reads it.

The cluster job agent (fakes/jobs) records when a job's process starts and ends on a node, and the
steps the job logs as it goes (its trainer's "step N | ..." lines, or a user's command's lines that
carry a step); the Monitoring backend turns those into busy GPUs, NICs and CPUs, as busy as the steps
say (a job that logs no step is busy all its run), and leaves every other minute of a RUNNING VM idle. Neither backend holds the other: both hold this ledger (ARCHITECTURE.md,
"The emulator's shape as it grows"). Times come from the emulator's clock, so a test that
advances the clock sees a job run for as long as it says.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass

from .core import Clock

MAX_STEP_POINTS = 4096  # per job: a long run's older progress is thinned, never unbounded
STEP_SPACING_S = 1.0  # at most one recorded point per second (the rest only move the last one)

Steps = tuple[tuple[float, int], ...]  # (time, step) a job's log reached, oldest first
# A line that carries a step, at its start: the trainer's "step 9 | loss ...", a user's "Step 10/100 ...",
# "step=10 ..." or a JSON line {"step": 10, ...}; a launcher's "[rank0]:" prefix allowed.
# At most 15 digits: a longer number is no step (a line of the job's own cannot break the emulator).
_STEP_LINE = re.compile(r"^\s*(?:\[(?:rank|default)\d+\]:\s?)?[{\"']*\s*step[\"']?\s*[=:]?\s*(\d{1,15})(?!\d)",
                        re.IGNORECASE)


def step_in(text: str) -> int | None:
    """The step a job's output line says it reached, or None."""
    m = _STEP_LINE.match(text)
    return int(m.group(1)) if m else None


@dataclass
class Busy:
    """One job's run on one VM: [start, end), end None while it runs; `job` names the steps it makes
    (the nodes of one job progress together: its rank 0 logs them)."""

    run_id: str
    start: float
    end: float | None = None
    job: str = ""


class Activity:
    """Busy spans per VM (by instance id), recorded by whoever runs work on it, and each job's steps."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self._spans: dict[str, list[Busy]] = {}
        self._steps: dict[str, list[tuple[float, int]]] = {}

    def begin(self, instance_id: str, run_id: str, at: float | None = None, job: str | None = None) -> None:
        """A job's process started on the VM (a second begin for the same run is ignored). `job`: whose
        steps it makes (default: its own run's)."""
        with self._lock:
            spans = self._spans.setdefault(str(instance_id), [])
            if any(b.run_id == run_id and b.end is None for b in spans):
                return
            spans.append(Busy(run_id, self.clock.now() if at is None else at, job=job or run_id))

    def progress(self, job: str, step: int, at: float | None = None) -> None:
        """The job logged `step` (a later step than before; repeats, such as other ranks', are ignored)."""
        t = self.clock.now() if at is None else at
        with self._lock:
            pts = self._steps.setdefault(job, [])
            if pts and step <= pts[-1][1]:
                return
            if len(pts) >= 2 and t - pts[-2][0] < STEP_SPACING_S:
                pts[-1] = (t, step)
            else:
                pts.append((t, step))
            if len(pts) > MAX_STEP_POINTS:
                half = len(pts) // 2
                pts[:half] = pts[:half:2]

    def steps(self, job: str) -> Steps:
        """The steps `job` logged."""
        with self._lock:
            return tuple(self._steps.get(job, ()))

    def work_of(self, instance_ids: list[str]) -> list[tuple[tuple[tuple[float, float | None], ...], tuple[Steps, ...]]]:
        """Per VM, its busy spans (as spans() gives them) and, for each, the steps its job logged (empty: none).
        Under one hold of the lock: Monitoring reads 1,024 VMs' in every call, and 14 calls at once each
        taking the lock 1,024 times queue on it (and on the GIL) for seconds."""
        with self._lock:
            out = []
            for i in instance_ids:
                busy = sorted(self._spans.get(str(i), []), key=lambda b: (b.start, b.end or 0.0))
                out.append((tuple((b.start, b.end) for b in busy),
                            tuple(tuple(self._steps.get(b.job, ())) for b in busy)))
            return out

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

    def reset(self) -> None:
        with self._lock:
            self._spans.clear()
            self._steps.clear()
