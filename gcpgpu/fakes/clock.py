"""The emulator's clock: the wall clock unless a test sets it forward, stops it or runs it faster.

Everything in the emulator that takes time reads it (operations, VM phases, preemption notices, a VM's
maxRunDuration, simulated jobs, Monitoring's samples), and published to a file (publish) it is the
tool's clock too (gcpgpu.gcp.clock, GCPGPU_CLOCK).
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
from collections.abc import Callable
from typing import Any

MAX_ADVANCE = 10 * 366 * 86400.0  # ten years: past this a float clock stops moving by seconds (1e300 + 1 == 1e300)
MAX_RATE = 10_000.0  # clock seconds per wall second


def checked(field: str, value: Any, top: float) -> float:
    """`value` as seconds in [0, top], or a ValueError naming `field` and that range (Infinity, NaN and
    1e300 included: one of those would leave every later operation waiting for a time that never comes)."""
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        seconds = math.nan
    if not (math.isfinite(seconds) and 0 <= seconds <= top):
        raise ValueError(f"{field} {value!r}: give a number of seconds from 0 to {top:g}")
    return seconds


class Clock:
    """Seconds since the epoch: at + (wall - base) * rate, the three kept together (and published whole:
    the file gcpgpu.gcp.clock reads holds {"base", "at", "rate"})."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._path: str | None = None
        self.reset()

    def now(self) -> float:
        base, at, rate = self._state
        return at + (time.time() - base) * rate

    def advance(self, seconds: float) -> None:
        seconds = checked("advance", seconds, MAX_ADVANCE)
        with self._lock:
            self._set(self.now() + seconds, self._state[2])

    def freeze(self) -> None:
        """Stop the clock: it moves only when advanced."""
        with self._lock:
            self._set(self.now(), 0.0)

    def unfreeze(self) -> None:
        with self._lock:
            self._set(self.now(), 1.0)

    def scale(self, rate: float) -> None:
        """Run `rate` clock seconds per wall second from now on (0 stops it)."""
        rate = checked("rate", rate, MAX_RATE)
        with self._lock:
            self._set(self.now(), float(rate))

    def reset(self) -> None:
        """Back to the wall clock: running, nothing advanced."""
        now = time.time()
        with self._lock:
            self._state = (now, now, 1.0)
            self._publish()

    @property
    def frozen(self) -> bool:
        return self._state[2] == 0.0

    @property
    def rate(self) -> float:
        return self._state[2]

    def call_later(self, seconds: float, fn: Callable[..., Any], *args: Any) -> ClockTimer:
        """threading.Timer on this clock: fn(*args) once `seconds` of it have passed (set forward included)."""
        timer = ClockTimer(self, self.now() + seconds, fn, args)
        timer.start()
        return timer

    def wall_until(self, at: float, tick: float = 0.1) -> float:
        """Wall seconds to wait before looking at this clock again for `at` (0 once it has come)."""
        left = at - self.now()
        if left <= 0:
            return 0.0
        rate = self.rate
        return min(left / rate, tick) if rate > 0 else tick

    def publish(self, path: str | os.PathLike) -> str:
        """Keep `path` holding this clock for other processes (gcpgpu.gcp.clock's file); returns it."""
        with self._lock:
            self._path = str(path)
            self._publish()
        return self._path

    @property
    def published(self) -> str | None:
        return self._path

    def _set(self, at: float, rate: float) -> None:
        with self._lock:
            self._state = (time.time(), at, rate)
            self._publish()

    def _publish(self) -> None:
        if self._path is None:
            return
        base, at, rate = self._state
        tmp = f"{self._path}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump({"base": base, "at": at, "rate": rate}, f)
        os.replace(tmp, self._path)  # whole files only: a reader never sees half of one


class ClockTimer(threading.Thread):
    """One call when the emulator's clock reaches `at` (Clock.call_later); cancel() before then stops it."""

    def __init__(self, clock: Clock, at: float, fn: Callable[..., Any], args: tuple) -> None:
        super().__init__(name="emulator-clock-timer", daemon=True)
        self.clock, self.at, self.fn, self.args = clock, at, fn, args
        self._cancelled = threading.Event()

    def cancel(self) -> None:
        self._cancelled.set()

    def run(self) -> None:
        while not self._cancelled.wait(self.clock.wall_until(self.at)):
            if self.clock.now() >= self.at:
                self.fn(*self.args)
                return
