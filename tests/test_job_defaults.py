"""Issue 24 item 2: a job's defaults fit its target, and `job submit --dry-run` refuses what submit refuses.

The trainer's default global batch (8) does not split over 2 nodes x 8 GPUs: left to the user's
default it becomes a multiple of the process count (said in one line before submit); given by the
user, it is refused in one line naming --batch-size and the nearest values that work.
"""

from __future__ import annotations

import json

import pytest
import yaml
from click.testing import CliRunner
from helpers import PROJECT, clients, make_plan

from gcpgpu.cli import main
from gcpgpu.cluster.apply import Cluster

GLOBAL = ["--project", PROJECT, "--region", "us-central1"]
VERTEX_16 = ["job", "submit", "--vertex", "--machine-type", "a3-highgpu-8g", "--nodes", "2"]
TINY = ["--model", "tiny", "--steps", "1", "--seq-len", "16"]


def run(*argv: str):
    return CliRunner().invoke(main, [*GLOBAL, *argv])


def trainer_args_of(dry_run_output: str) -> list[str]:
    doc = yaml.safe_load(dry_run_output)
    if "customJob" in doc:
        return doc["customJob"]["jobSpec"]["workerPoolSpecs"][0]["containerSpec"]["args"]
    return doc["args"]


def test_vertex_default_batch_is_fitted_to_the_processes_and_said_before_submit(gcp):
    result = run(*VERTEX_16, "--dry-run", "--", *TINY)
    assert result.exit_code == 0, result.output
    assert trainer_args_of(result.stdout) == [*TINY, "--batch-size", "16"]
    note = [line for line in result.stderr.splitlines() if "--batch-size" in line]
    assert note == ["note: trainer --batch-size 16 (the global batch): the default 8 does not split over the job's "
                    "16 GPU processes; pass --batch-size to choose another multiple of 16"]


def test_a_batch_the_user_gave_that_does_not_split_is_refused_with_the_nearest_that_do(gcp):
    result = run(*VERTEX_16, "--dry-run", "--", *TINY, "--batch-size", "24")
    assert result.exit_code == 2, result.output
    assert result.output.strip() == ("Error: trainer arguments: --batch-size 24 does not split over 16 GPU processes; "
                                     "use a multiple of 16 (nearest: 16 or 32)")
    accum = run(*VERTEX_16, "--dry-run", "--", *TINY, "--batch-size", "8", "--grad-accum", "2")
    assert accum.exit_code == 2 and "x --grad-accum 2; use a multiple of 32 (nearest: 32)" in accum.output


@pytest.fixture
def two_h100_nodes(gcp):
    """A cluster "c" of 2 x a3-highgpu-8g: 16 GPU processes in the real cloud (one per node here)."""
    Cluster(clients(gcp), PROJECT).up(make_plan(nodes=2))
    gcp.requests.clear()
    return "c"


def test_cluster_dry_run_refuses_what_submit_refuses_and_changes_nothing(gcp, two_h100_nodes):
    dry = run("job", "submit", "--cluster", "c", "--dry-run", "--", *TINY, "--batch-size", "8")
    real = run("job", "submit", "--cluster", "c", "--", *TINY, "--batch-size", "8")
    assert (dry.exit_code, real.exit_code) == (2, 2), dry.output + real.output
    assert dry.output == real.output
    assert "--batch-size 8 does not split over 16 GPU processes" in dry.output and "(nearest: 16)" in dry.output
    assert gcp.requests.all(method="POST") == []  # read the nodes, changed nothing


def test_cluster_job_without_a_batch_size_gets_one_that_splits_and_runs(gcp, two_h100_nodes):
    """The README's cluster example (`job submit --cluster demo -- --model 124m --parallel ddp ...`, no
    --batch-size) exited 2 on two 8-GPU nodes; here with the tiny model so it runs in seconds."""
    argv = ["job", "submit", "--cluster", "c", "--", *TINY, "--parallel", "ddp"]
    dry = run(*argv[:4], "--dry-run", *argv[4:])
    assert dry.exit_code == 0, dry.output
    planned = yaml.safe_load(dry.stdout)
    assert planned["args"][-2:] == ["--batch-size", "16"] and planned["nodes"] == 2
    assert planned["machine_type"] == "a3-highgpu-8g" and "NCCL_" in "".join(planned["env"])  # the cluster's profile
    assert gcp.requests.all(method="POST") == []

    result = run(*argv[:4], "--wait", *argv[4:])
    assert result.exit_code == 0, result.output
    assert "note: trainer --batch-size 16 (the global batch)" in result.stderr
    assert result.stderr.index("note: trainer --batch-size") < result.stderr.index("Submitted ")
    inst = gcp.compute.get(PROJECT, "zones/us-central1-a/instances", "c-0")
    record = json.loads({i["key"]: i["value"] for i in inst["metadata"]["items"]}["gcpgpu-job"])
    assert record["args"][-2:] == ["--batch-size", "16"]


def test_an_auto_batch_is_left_to_the_trainer_which_sizes_it_from_the_memory_plan(gcp):
    """--batch-size auto and --micro-batch auto pass the pre-submit check unchanged: the trainer picks the
    numbers on the GPU it finds; a bad value is still refused before anything is submitted."""
    for extra in (["--batch-size", "auto"], ["--batch-size", "64", "--micro-batch", "auto"]):
        result = run(*VERTEX_16, "--dry-run", "--", *TINY, *extra)
        assert result.exit_code == 0, result.output
        assert trainer_args_of(result.stdout) == [*TINY, *extra]
    bad = run(*VERTEX_16, "--dry-run", "--", *TINY, "--micro-batch", "many")
    assert bad.exit_code == 2 and "--micro-batch: invalid _int_or_auto value" not in bad.output
    assert "expected a whole number or 'auto', got 'many'" in bad.output
