"""The tool's clock for what it waits on in the cloud: lease expiries, polls, idle and stall times, backoff.

On Google Cloud it is this machine's clock. Under test it is the emulator's: the emulator publishes its
clock to a small JSON file and GCPGPU_CLOCK names it (the `gcp` test fixture sets it, and the emulator
passes it to the followers its nodes run), so every process of one test, a stopped one resumed later
included, reads the same time, and a test that sets that clock forward (`gcp.clock.advance(120)`) makes a
lease lapse, an idle minute pass or a poll come due at once instead of waiting them out.

The file holds {"base": wall time, "at": clock time at base, "rate": clock seconds per wall second}
(rate 0: stopped; 30: thirty times faster); the emulator rewrites it whole on each change. A file that
is absent or unreadable (an emulator gone) reads as this machine's clock.
"""

from __future__ import annotations

import json
import os
import threading
import time

ENV = "GCPGPU_CLOCK"
TICK_S = 0.1  # how soon a sleeper on a published clock sees it set forward


def _published() -> tuple[float, float, float] | None:
    """(base, at, rate) of the clock GCPGPU_CLOCK names, or None: this machine's clock."""
    path = os.environ.get(ENV)
    if not path:
        return None
    try:
        with open(path, encoding="utf-8") as f:
            got = json.load(f)
        return float(got["base"]), float(got["at"]), float(got["rate"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def now() -> float:
    """Seconds since the epoch on the clock the cloud keeps (time.time() unless a test's emulator says)."""
    wall = time.time()
    got = _published()
    if got is None:
        return wall
    base, at, rate = got
    return at + (wall - base) * rate


def monotonic() -> float:
    """Seconds for measuring a duration: time.monotonic(), or the emulator's clock when one is published."""
    return now() if os.environ.get(ENV) else time.monotonic()


def _left(deadline: float) -> float | None:
    """Wall seconds to sleep before looking at the published clock again; None once `deadline` has come."""
    got = _published()
    t = now() if got is None else got[1] + (time.time() - got[0]) * got[2]
    if t >= deadline:
        return None
    rate = 1.0 if got is None else got[2]
    return min((deadline - t) / rate if rate > 0 else TICK_S, TICK_S)


def sleep(seconds: float) -> None:
    """Sleep `seconds` of this clock: time.sleep, or until the emulator's clock has moved that far."""
    if not os.environ.get(ENV):
        time.sleep(max(seconds, 0.0))
        return
    deadline = now() + seconds
    while (step := _left(deadline)) is not None:
        time.sleep(step)


def wait(event: threading.Event, seconds: float) -> bool:
    """event.wait(seconds) on this clock: True as soon as `event` is set, False once `seconds` have passed."""
    if not os.environ.get(ENV):
        return event.wait(max(seconds, 0.0))
    deadline = now() + seconds
    while (step := _left(deadline)) is not None:
        if event.wait(step):
            return True
    return event.is_set()
