"""`make test` runs every part whatever the one before it did (issue 37): gcpgpu's pytest suite, then
SkyPilot's conformance; it prints both outcomes at the end and fails if either failed.

The two parts are stand-ins here (a `python` that records its arguments and exits as told), so the
target's own logic is what runs, in seconds.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")


def _make_test(tmp_path: Path, pytest_rc: int, sky_rc: int, *extra: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    calls = tmp_path / "calls"
    for folder, rc in (("venv", pytest_rc), ("sky", sky_rc)):
        stub = tmp_path / folder / "bin" / "python"
        stub.parent.mkdir(parents=True, exist_ok=True)
        stub.write_text(f'#!/bin/sh\necho "{folder} $*" >> {calls}\nexit {rc}\n')
        stub.chmod(0o755)
    # Stamps newer than what they are made from: neither venv is (re)built.
    (tmp_path / "venv" / ".installed").touch()
    (tmp_path / "sky" / ".installed").touch()
    done = subprocess.run(["make", "--no-print-directory", "-C", str(ROOT), "test", f"BIN={tmp_path / 'venv' / 'bin'}",
                           f"STAMP={tmp_path / 'venv' / '.installed'}", f"SKY_VENV={tmp_path / 'sky'}", *extra],
                          capture_output=True, text=True, timeout=60,
                          # The caller's own make variables (SKIP_SKYPILOT=1 make test) are not this make's.
                          env={k: v for k, v in os.environ.items() if not k.startswith("MAKE") and k != "SKIP_SKYPILOT"})
    return done, calls.read_text().splitlines() if calls.exists() else []


def test_skypilots_part_runs_after_a_failed_pytest_and_both_outcomes_are_printed(tmp_path):
    done, calls = _make_test(tmp_path, pytest_rc=1, sky_rc=0)
    assert [c.split()[0] for c in calls] == ["venv", "sky"], done.stdout + done.stderr
    assert calls[1].endswith("tests/conformance/skypilot")
    assert done.returncode != 0
    assert "make test: pytest FAILED (exit 1); SkyPilot conformance passed" in done.stdout


def test_a_failed_skypilot_part_fails_the_target_and_both_pass_passes(tmp_path):
    done, _ = _make_test(tmp_path, pytest_rc=0, sky_rc=3)
    assert done.returncode != 0
    assert "make test: pytest passed; SkyPilot conformance FAILED" in done.stdout
    done, _ = _make_test(tmp_path, pytest_rc=0, sky_rc=0)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "make test: pytest passed; SkyPilot conformance passed" in done.stdout


def test_skip_skypilot_leaves_it_out_and_says_so(tmp_path):
    done, calls = _make_test(tmp_path, 0, 1, "SKIP_SKYPILOT=1")
    assert [c.split()[0] for c in calls] == ["venv"]
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SkyPilot conformance skipped (SKIP_SKYPILOT=1)" in done.stdout


def test_make_n_test_only_prints_the_recipe(tmp_path):
    """`make -n test` shows what would run; it must not run the suite (a recipe line that names the MAKE
    variable is run even under -n)."""
    done, calls = _make_test(tmp_path, 0, 0, "-n")
    assert done.returncode == 0, done.stdout + done.stderr
    assert calls == [] and "pytest -q" in done.stdout


def test_ci_still_runs_make_test():
    assert "\nmake test\n" in (ROOT / ".ci" / "run").read_text()
