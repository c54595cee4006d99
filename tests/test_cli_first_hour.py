"""A new user's first hour (issue 24): names, messages and defaults as a newcomer meets them.

Each test runs the real CLI against the emulator; bad input must be refused in one line, exit 2,
before any API call.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from gcpgpu.cli import main

P = ["--project", "my-project"]


def run(*argv: str):
    return CliRunner().invoke(main, list(argv))


def refused(gcp, *argv: str) -> str:
    """The one line a bad input gets; asserts exit 2 and that nothing reached the emulator."""
    gcp.requests.clear()
    result = run(*argv)
    lines = result.output.strip().splitlines()
    assert result.exit_code == 2, result.output
    assert len(lines) == 1, result.output
    assert gcp.requests.all() == [], [r.path for r in gcp.requests.all()]
    return lines[0]


# -- item 11: a capital is refused alike in every name, with the lowercase name suggested
@pytest.mark.parametrize(("argv", "suggestion"), [
    ([*P, "cluster", "plan", "Demo", "--machine-type", "a3-highgpu-8g", "--zone", "us-central1-a"], "'demo'"),
    ([*P, "cluster", "up", "Demo", "--machine-type", "a3-highgpu-8g", "--zone", "us-central1-a", "--yes"], "'demo'"),
    ([*P, "cluster", "status", "Demo"], "'demo'"),
    ([*P, "cluster", "down", "DEMO", "--yes"], "'demo'"),
    ([*P, "cluster", "plan", "demo", "--machine-type", "A3-HighGPU-8G", "--zone", "us-central1-a"], "'a3-highgpu-8g'"),
    ([*P, "cluster", "up", "demo", "--machine-type", "A3-HIGHGPU-8G", "--zone", "us-central1-a", "--yes"],
     "'a3-highgpu-8g'"),
    ([*P, "--region", "us-central1", "job", "submit", "--cluster", "Demo", "--", "--model", "tiny"], "'demo'"),
    ([*P, "--region", "us-central1", "job", "submit", "--vertex", "--machine-type", "A2-HIGHGPU-1G", "--dry-run"],
     "'a2-highgpu-1g'"),
    ([*P, "metrics", "tail", "--cluster", "Demo", "--once"], "'demo'"),
    (["plan", "memory", "--model", "124m", "--batch-size", "8", "--machine-type", "A2-HIGHGPU-8G"], "'a2-highgpu-8g'"),
    (["nccl", "env", "--machine-type", "A3-MEGAGPU-8G"], "'a3-megagpu-8g'"),
])
def test_capitals_in_any_name_are_refused_with_the_lowercase_name(gcp, argv, suggestion):
    line = refused(gcp, *argv)
    assert f"did you mean {suggestion}?" in line


def test_a_spec_files_name_with_capitals_gets_the_lowercase_name_too(gcp, tmp_path):
    spec = tmp_path / "c.yaml"
    spec.write_text("name: Demo\nmachine_type: a3-highgpu-8g\nzones: us-central1-a\n")
    assert "did you mean 'demo'?" in refused(gcp, *P, "cluster", "plan", "-f", str(spec))


def test_a_lowercase_name_still_works_and_a_hopeless_one_gets_no_suggestion(gcp):
    result = run(*P, "--format", "json", "cluster", "plan", "demo", "--machine-type", "a3-highgpu-8g",
                 "--zone", "us-central1-a")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["machineType"] == "a3-highgpu-8g"
    assert "did you mean" not in refused(gcp, *P, "cluster", "status", "9Demo")
