"""pytest fixtures for the emulator: `gcp` gives each test a clean emulator (one server per session).

Its clock is published (GCPGPU_CLOCK, gcpgpu.gcp.clock), so the tool's leases, polls and idle times, in this
process and in every one the test starts, run on it: `gcp.clock.advance(120)` lets a lease lapse now.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .server import Emulator


@pytest.fixture(scope="session")
def _gcp_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Emulator]:
    emu = Emulator(run_user_commands=True).start()  # the test's own code runs jobs' commands
    emu.clock.publish(tmp_path_factory.mktemp("emulator-clock") / "clock.json")
    try:
        yield emu
    finally:
        emu.stop()


@pytest.fixture
def gcp(_gcp_server: Emulator, monkeypatch: pytest.MonkeyPatch) -> Iterator[Emulator]:
    """A running emulator, reset for this test, with GCPGPU_EMULATOR pointing at it and GCPGPU_CLOCK at its clock."""
    _gcp_server.reset()
    monkeypatch.setenv("GCPGPU_EMULATOR", _gcp_server.address)
    monkeypatch.setenv("GCPGPU_CLOCK", str(_gcp_server.clock.published))
    yield _gcp_server
