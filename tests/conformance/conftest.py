"""Fixtures of the conformance suite: third-party clients, unchanged, pointed at the emulator."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

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


@pytest.fixture
def gcloud(gcp, tmp_path):
    """Run one gcloud command in a shell that has eval'd gcloud-env's output; returns (rc, stdout, stderr)."""
    printed = CliRunner().invoke(main, ["emulator", "gcloud-env", "--config-dir", str(tmp_path / "gcloud")])
    assert printed.exit_code == 0, printed.output
    setup = tmp_path / "env.sh"
    setup.write_text(printed.stdout)
    subprocess.run(["bash", "-c", f". {setup} >/dev/null 2>&1"], check=True)

    def run(command: str) -> tuple[int, str, str]:
        done = subprocess.run(["bash", "-c", f"export CLOUDSDK_CONFIG={tmp_path / 'gcloud'}; {command}"],
                              capture_output=True, text=True, timeout=120)
        return done.returncode, done.stdout, done.stderr

    return run
