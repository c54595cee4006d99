"""A reader that quits early (`| head -c 600`, `less`) ends gcpgpu quietly: never a cloud or connection error."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner
from helpers import PROJECT

from gcpgpu.cli import EXIT_STDOUT_CLOSED, main

REPO = Path(__file__).resolve().parents[1]


def run_with_closed_stdout(args: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run gcpgpu with a stdout whose reader has already gone: every write to it fails with EPIPE."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # closed before the child writes a byte: deterministic, unlike racing `head`
    try:
        return subprocess.run(
            [sys.executable, "-c", "from gcpgpu.cli import main; main(prog_name='gcpgpu')", *args],
            stdout=write_end, stderr=subprocess.PIPE, text=True, cwd=REPO, timeout=120,
            env={**os.environ, **(env or {})},
        )
    finally:
        os.close(write_end)


def test_a_closed_stdout_ends_quietly_with_141_without_a_command():
    done = run_with_closed_stdout(["--format", "json", "catalog"])
    assert done.returncode == EXIT_STDOUT_CLOSED == 141
    assert done.stderr == ""  # no "Error: ...", no "Exception ignored ... BrokenPipeError"


def test_metrics_tail_into_a_closed_pipe_is_not_a_dead_endpoint(gcp):
    up = CliRunner().invoke(main, ["--project", PROJECT, "cluster", "up", "c", "--machine-type", "a2-highgpu-1g",
                                   "--zone", "us-central1-a", "--yes"])
    assert up.exit_code == 0, up.output
    # The line: gcpgpu --format json metrics tail --cluster c --once | head -c 600
    done = run_with_closed_stdout(["--format", "json", "metrics", "tail", "--cluster", "c", "--once",
                                   "--project", PROJECT], env={"GCPGPU_EMULATOR": gcp.address})
    assert "cannot reach" not in done.stderr and "Error" not in done.stderr, done.stderr
    assert done.returncode == EXIT_STDOUT_CLOSED


def test_a_real_head_gets_its_bytes_and_gcpgpu_exits_quietly():
    """`gcpgpu --format json catalog | head -c 600` through a shell, as a user types it."""
    script = (f"{sys.executable} -c \"from gcpgpu.cli import main; main(prog_name='gcpgpu')\" "
              "--format json catalog 2>err.txt | head -c 600; echo \" ${PIPESTATUS[0]}\"")
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, cwd=REPO, timeout=120,
                          env={**os.environ, "TMPDIR": os.environ.get("TMPDIR", "/tmp")})
    try:
        stderr = (REPO / "err.txt").read_text()
    finally:
        (REPO / "err.txt").unlink(missing_ok=True)
    printed, _, status = done.stdout.rpartition(" ")
    assert printed.startswith("[") and len(printed.encode()) == 600  # head cut the catalog (17 kB)
    # The catalog may fit in the pipe before head quits (0) or not (141); either way nothing on stderr.
    status = int(status)
    assert status in (0, EXIT_STDOUT_CLOSED)
    assert stderr == ""
