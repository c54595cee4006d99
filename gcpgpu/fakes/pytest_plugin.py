"""pytest fixtures for the emulator: `gcp` gives each test a clean emulator (one server per session)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .server import Emulator


@pytest.fixture(scope="session")
def _gcp_server() -> Iterator[Emulator]:
    emu = Emulator(run_user_commands=True).start()  # the test's own code runs jobs' commands
    try:
        yield emu
    finally:
        emu.stop()


@pytest.fixture
def gcp(_gcp_server: Emulator, monkeypatch: pytest.MonkeyPatch) -> Iterator[Emulator]:
    """A running emulator, reset for this test, with GCPGPU_EMULATOR pointing at it."""
    _gcp_server.reset()
    monkeypatch.setenv("GCPGPU_EMULATOR", _gcp_server.address)
    yield _gcp_server
