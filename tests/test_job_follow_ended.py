"""`job follow` of a job that has ended tells its end as `job status` does, even when its nodes run another job."""

from __future__ import annotations

import json

from click.testing import CliRunner

from gcpgpu.cli import main

GLOBAL = ["--project", "test-proj", "--region", "us-central1"]


def cli(*argv: str, fmt: str | None = None):
    return CliRunner().invoke(main, [*GLOBAL, *(["--format", fmt] if fmt else []), *argv])


def submit_sleep() -> str:
    done = cli("job", "submit", "--cluster", "c", "--image", "busybox", "--command", "sleep 600")
    assert done.exit_code == 0, done.output
    return done.stdout.splitlines()[0]


def test_follow_of_a_cancelled_job_whose_nodes_run_another_says_cancelled_not_missing(gcp):
    up = cli("cluster", "up", "c", "--machine-type", "a2-highgpu-1g", "--nodes", "1", "--zone", "us-central1-a", "--yes")
    assert up.exit_code == 0, up.output
    first = submit_sleep()
    assert cli("job", "cancel", first, "--wait").exit_code == 0
    second = submit_sleep()  # the node holds this one now
    assert json.loads(cli("job", "status", first, fmt="json").stdout)["state"] == "CANCELLED"
    followed = cli("job", "follow", first)
    assert "not on cluster" not in followed.output and "CANCELLED" in followed.output, followed.output
    assert followed.exit_code == 1  # not SUCCEEDED
    assert cli("job", "cancel", second, "--wait").exit_code == 0
    assert cli("cluster", "down", "c", "--yes").exit_code == 0
