"""Shared pytest fixtures."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

# gpuhunt (installed with dstack, a dev dependency for its conformance test) puts a regular package
# named `tests` into site-packages, and a regular package wins over this folder (a namespace package)
# wherever it is on sys.path, so `from tests.helpers import ...` found gpuhunt's. Bind the name here.
_TESTS = str(Path(__file__).resolve().parent)
if list(getattr(sys.modules.get("tests"), "__path__", [])) != [_TESTS]:
    sys.modules["tests"] = types.ModuleType("tests")
    sys.modules["tests"].__path__ = [_TESTS]

from helpers import LEAKY_ENV  # noqa: E402 - after the binding above

# The emulator's fixtures (`gcp`: a running emulator, reset per test, GCPGPU_EMULATOR set).
pytest_plugins = ["gcpgpu.fakes.pytest_plugin"]


@pytest.fixture(autouse=True)
def isolated_gcloud(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch):
    """Point gcloud's config at an empty folder so the developer's real configuration never leaks in."""
    config_dir = tmp_path_factory.mktemp("gcloud-config")
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(config_dir))
    # gcpgpu's own state (the images `container build` pushed, which `job submit` defaults to): per test.
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path_factory.mktemp("xdg-state")))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("xdg-cache")))  # the emulator's record
    for name in LEAKY_ENV:
        monkeypatch.delenv(name, raising=False)
    return config_dir


@pytest.fixture
def cluster(gcp):
    """A gcpgpu Cluster over the emulator's PROJECT (tests/helpers.py)."""
    from helpers import PROJECT, clients

    from gcpgpu.cluster.apply import Cluster

    return Cluster(clients(gcp), PROJECT)
