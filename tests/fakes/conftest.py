"""Fixtures for the emulator's tests: real google-cloud-compute clients aimed at it.

The `gcp` fixture (a session server, reset per test) comes from gcpgpu.fakes.pytest_plugin, which
tests/conftest.py registers for the whole suite.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from google.cloud import compute_v1

from gcpgpu.fakes.server import Emulator
from gcpgpu.gcp.clients import Clients

from .builders import PROJECT

_CLIENTS: dict[str, Clients] = {}


@pytest.fixture
def compute(gcp: Emulator) -> Callable[[str], Any]:
    """compute("InstancesClient") -> a real compute_v1 client built by gcpgpu's Clients, aimed at `gcp`."""
    clients = _CLIENTS.setdefault(gcp.address, Clients(emulator=gcp.address, project=PROJECT))
    return clients.compute


@pytest.fixture
def instances(compute: Callable[[str], Any]) -> compute_v1.InstancesClient:
    return compute("InstancesClient")


