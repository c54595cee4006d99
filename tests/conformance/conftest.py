"""Fixtures of the conformance suite: third-party clients, unchanged, pointed at the emulator."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner
from helpers import LEAKY_ENV

from gcpgpu.cli import main

HERE = Path(__file__).parent


def pytest_collection_modifyitems(config, items):
    """Mark this folder's tests `conformance` (select them with `pytest -m conformance`), and the
    ones that run gcloud `gcloud` too."""
    for item in items:
        if HERE in Path(item.fspath).parents:
            item.add_marker(pytest.mark.conformance)
            if "gcloud" in getattr(item, "fixturenames", ()):
                item.add_marker(pytest.mark.gcloud)


@pytest.fixture(scope="session")
def _gcloud_config(_gcp_server, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One gcloud configuration for the session's emulator, made by running what `gcpgpu emulator gcloud-env`
    prints, as a user's shell would eval it. Each of its `gcloud config set` lines (one per API) starts gcloud (1-2 s
    each on a quiet machine, several times that under load), so it is paid once, not per test: the emulator's
    address does not change between tests, and no test changes the configuration (each resets the emulator)."""
    scratch = tmp_path_factory.mktemp("gcloud-env")
    config = scratch / "gcloud"
    # The developer's own configuration and project must not leak into the one the tests share.
    env = {name: None for name in LEAKY_ENV}
    env.update(CLOUDSDK_CONFIG=str(scratch / "empty"), GCPGPU_EMULATOR=_gcp_server.address)
    printed = CliRunner(env=env).invoke(main, ["emulator", "gcloud-env", "--config-dir", str(config)])
    assert printed.exit_code == 0, printed.output
    setup = scratch / "env.sh"
    setup.write_text(printed.stdout)
    subprocess.run(["bash", "-c", f". {shlex.quote(str(setup))} >/dev/null 2>&1"], check=True,
                   env={k: v for k, v in os.environ.items() if k not in LEAKY_ENV})
    return config


@pytest.fixture
def gcloud(gcp, _gcloud_config: Path):
    """Run one gcloud command in a shell that has eval'd gcloud-env's output; returns (rc, stdout, stderr)."""

    def run(command: str) -> tuple[int, str, str]:
        done = subprocess.run(["bash", "-c", f"export CLOUDSDK_CONFIG={shlex.quote(str(_gcloud_config))}; {command}"],
                              capture_output=True, text=True, timeout=120)
        return done.returncode, done.stdout, done.stderr

    return run
