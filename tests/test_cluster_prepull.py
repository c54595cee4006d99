"""Images ready before the job (issue 40): `cluster up` has its nodes pull the image jobs will run while they
boot, so a job's own pull finds it there. The emulator's node agent times a pull on the emulator's clock
(agent.pull_s for a cold pull), less the time since the node booted where its spec says it pulls ahead."""

from __future__ import annotations

import json

from click.testing import CliRunner
from helpers import PROJECT, wait_for

from gcpgpu.cli import main

GLOBAL = ["--project", PROJECT, "--region", "us-central1"]
UP = ["cluster", "up", "--machine-type", "a2-highgpu-1g", "--nodes", "2", "--zone", "us-central1-a", "--yes"]
IMAGE = "docker.io/library/busybox:1.36"  # not gcpgpu's: the emulator simulates its run
SEEDED = f"us-central1-docker.pkg.dev/{PROJECT}/gcpgpu/gcpgpu-trainer:none-emulator"  # the emulator's registry


def cli(*argv: str, fmt: str | None = None):
    return CliRunner().invoke(main, [*GLOBAL, *(["--format", fmt] if fmt else []), *argv])


def spec_of(gcp, node: str) -> dict:
    inst = gcp.compute.get(PROJECT, "zones/us-central1-a/instances", node)
    items = {i["key"]: i["value"] for i in inst["metadata"]["items"]}
    return json.loads(items["gcpgpu-spec"])


def pulls(job_id: str) -> dict[str, float | None]:
    status = json.loads(cli("job", "status", job_id, fmt="json").stdout)
    return {row["node"]: row.get("pull_s") for row in status["per_node"]}


def test_nodes_pull_gcpgpus_image_while_they_boot(gcp):
    up = cli(*UP[:2], "dflt", *UP[2:])
    assert up.exit_code == 0, up.output
    # The image jobs get by default, found as submit finds it, in the spec a recovery re-creates nodes from.
    assert spec_of(gcp, "dflt-0")["prepull"] == spec_of(gcp, "dflt-1")["prepull"] == SEEDED
    startup = gcp.compute.get(PROJECT, "zones/us-central1-a/instances", "dflt-1")["metadata"]["items"][0]["value"]
    assert f"PREPULL_IMAGE={SEEDED}" in startup and 'docker pull "$PREPULL_IMAGE"' in startup


def test_a_job_on_nodes_that_pulled_its_image_while_booting_starts_warm(gcp):
    gcp.jobs.agent.pull_s = 600.0  # a cold pull: ten minutes of the emulator's clock
    gcp.jobs.agent.simulated_run_s = 1.0
    up = cli(*UP[:2], "warm", *UP[2:], "--prepull", IMAGE)
    assert up.exit_code == 0, up.output
    gcp.clock.advance(600)  # the nodes have been up as long as a pull takes
    job = cli("job", "submit", "--cluster", "warm", "--image", IMAGE)
    assert job.exit_code == 0, job.output
    job_id = job.stdout.splitlines()[0]
    # A cold pull would hold it PENDING until the test moved the clock on by pull_s again.
    wait_for(lambda: json.loads(cli("job", "status", job_id, fmt="json").stdout)["state"] != "PENDING",
             what="the job past its pull")
    assert pulls(job_id) == {"warm-0": 0.0, "warm-1": 0.0}


def test_without_a_pull_ahead_the_jobs_first_pull_is_cold_and_shown(gcp):
    gcp.jobs.agent.pull_s = 600.0
    gcp.jobs.agent.simulated_run_s = 1.0
    up = cli(*UP[:2], "cold", *UP[2:], "--prepull", "none")
    assert up.exit_code == 0, up.output
    assert spec_of(gcp, "cold-0")["prepull"] == "none"
    gcp.clock.advance(600)
    job = cli("job", "submit", "--cluster", "cold", "--image", IMAGE)
    assert job.exit_code == 0, job.output
    job_id = job.stdout.splitlines()[0]
    wait_for(lambda: json.loads(cli("job", "status", job_id, fmt="json").stdout)["per_node"][1]["message"]
             == "pulling the image", what="the nodes pulling")
    gcp.clock.advance(600)
    wait_for(lambda: json.loads(cli("job", "status", job_id, fmt="json").stdout)["state"] != "PENDING",
             what="the pull's end")
    assert pulls(job_id) == {"cold-0": 600.0, "cold-1": 600.0}


def test_a_bad_prepull_image_is_refused_before_any_call(gcp):
    bad = cli(*UP[:2], "x", *UP[2:], "--prepull", "not an image; rm -rf /")
    assert bad.exit_code == 2 and "prepull" in bad.output and "container image" in bad.output, bad.output
    assert len(gcp.requests) == 0
