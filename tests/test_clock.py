"""The tool's clock (gcpgpu.gcp.clock): this machine's, or the emulator's where a test published it.

Leases, polls, idle and stall times and webhook backoff read it, so a test that sets the emulator's
clock forward makes them pass at once, in every process that reads the same file.
"""

from __future__ import annotations

import threading
import time

import pytest
from helpers import wait_for

from gcpgpu.fakes.clock import Clock
from gcpgpu.gcp import clock


@pytest.fixture
def emulated(tmp_path, monkeypatch) -> Clock:
    """An emulator's clock, published where GCPGPU_CLOCK says."""
    c = Clock()
    monkeypatch.setenv(clock.ENV, c.publish(tmp_path / "clock.json"))
    return c


@pytest.fixture
def looks(monkeypatch) -> list[int]:
    """One item each time a process reads the published clock."""
    seen: list[int] = []
    read = clock._published
    monkeypatch.setattr(clock, "_published", lambda: seen.append(1) or read())
    return seen


def looked(looks: list[int], times: int = 2) -> None:
    """Wait until the clock has been read `times` more times (a sleeper took its deadline and looked again)."""
    seen = len(looks)
    wait_for(lambda: len(looks) >= seen + times, timeout=30, what="a sleeper looking at the clock")


def in_thread(fn) -> threading.Thread:
    t = threading.Thread(target=fn, daemon=True)
    t.start()
    return t


def test_without_a_published_clock_it_is_this_machine_s(monkeypatch):
    monkeypatch.delenv(clock.ENV, raising=False)
    assert abs(clock.now() - time.time()) < 1
    assert abs(clock.monotonic() - time.monotonic()) < 1


def test_an_unreadable_clock_file_reads_as_this_machine_s(tmp_path, monkeypatch):
    for text in (None, "not json", '{"base": 1}'):
        path = tmp_path / "clock.json"
        if text is not None:
            path.write_text(text)
        monkeypatch.setenv(clock.ENV, str(path))
        assert abs(clock.now() - time.time()) < 1


def test_the_tool_reads_the_emulator_s_clock_as_it_is_set(emulated):
    assert abs(clock.now() - time.time()) < 1
    emulated.advance(3600)
    assert abs(clock.now() - (time.time() + 3600)) < 1
    assert abs(clock.monotonic() - emulated.now()) < 1  # durations too
    emulated.freeze()
    stopped = clock.now()
    assert clock.now() == stopped == emulated.now()
    emulated.scale(30)
    later = clock.now()
    time.sleep(0.2)
    assert clock.now() - later >= 0.2 * 30 * 0.9


def test_a_sleep_ends_when_the_emulator_s_clock_passes_it(emulated, looks):
    """An hour's sleep ends when the test sets the clock an hour on, not an hour later."""
    emulated.freeze()  # only the test moves it: nothing ends on its own
    slept = in_thread(lambda: clock.sleep(3600))
    looked(looks)
    emulated.advance(1800)
    looked(looks)
    assert slept.is_alive()  # half way is not there
    emulated.advance(1800)
    slept.join(30)
    assert not slept.is_alive()


def test_a_wait_ends_on_its_event_or_when_the_clock_passes_it(emulated, looks):
    emulated.freeze()
    event, got = threading.Event(), []
    waiting = in_thread(lambda: got.append(clock.wait(event, 60)))
    event.set()
    waiting.join(30)
    assert got == [True]

    event.clear()
    waiting = in_thread(lambda: got.append(clock.wait(event, 60)))
    looked(looks)  # its deadline is taken
    emulated.advance(61)
    waiting.join(30)
    assert got == [True, False]


def test_the_emulator_s_clock_runs_faster_when_scaled_and_refuses_a_negative_rate():
    c = Clock()
    c.scale(100)
    start, t0 = c.now(), time.time()
    time.sleep(0.1)
    assert c.now() - start >= (time.time() - t0) * 100 * 0.9
    with pytest.raises(ValueError, match="rate"):
        c.scale(-1)
    c.reset()
    assert not c.frozen and c.rate == 1.0 and abs(c.now() - time.time()) < 1
