"""Global options (--project --region --zone --format --emulator -v) anywhere on the line, as in gcloud."""

from __future__ import annotations

import json

import click
import pytest
import yaml
from click.testing import CliRunner
from helpers import PROJECT

from gcpgpu.cli import main
from gcpgpu.cli.options import GLOBAL_OPTIONS, adopt_global_options


def run(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


@pytest.fixture
def demo(gcp):
    """A one-node cluster 'demo' in PROJECT, then a clean request log."""
    up = run("--project", PROJECT, "cluster", "up", "demo", "--machine-type", "a2-highgpu-1g",
             "--zone", "us-central1-a", "--yes")
    assert up.exit_code == 0, up.output
    gcp.requests.clear()
    return gcp


# The two lines, and every position a global option can take around `cluster status`.
@pytest.mark.parametrize("args", [
    ["--project", PROJECT, "--format", "json", "cluster", "status", "demo"],
    ["cluster", "--project", PROJECT, "--format", "json", "status", "demo"],
    ["cluster", "status", "demo", "--format", "json", "--project", PROJECT],
    ["cluster", "status", "--format", "json", "demo", "--project", PROJECT],
    ["--project", PROJECT, "cluster", "--format", "json", "status", "demo"],
    ["--format", "table", "--project", "someone-else", "cluster", "status", "demo", "--format", "json",
     "--project", PROJECT],  # the last one given wins
])
def test_global_options_before_between_and_after_the_subcommand(demo, args):
    result = run(*args)
    assert result.exit_code == 0, result.output
    status = json.loads(result.stdout)
    assert [node["name"] for node in status["nodes"]] == ["demo-0"]
    # The project given after the command is the one the API calls went to.
    # (the Billing Catalog's price reads name no project: services/SERVICE/skus)
    paths = [r.path for r in demo.requests.all() if not r.path.startswith("/v1/services")]
    assert paths and all(f"/projects/{PROJECT}/" in p + "/" for p in paths), paths


def test_cluster_list_with_the_project_after_the_command(demo):
    result = run("cluster", "list", "--project", PROJECT, "--format", "yaml")
    assert result.exit_code == 0, result.output
    assert [c["cluster"] for c in yaml.safe_load(result.stdout)] == ["demo"]


def test_emulator_and_verbose_after_the_command(gcp, monkeypatch):
    monkeypatch.delenv("GCPGPU_EMULATOR")
    result = CliRunner().invoke(main, ["cluster", "list", "--project", PROJECT, "--emulator", "127.0.0.1:9", "-v"])
    assert result.exit_code == 1
    assert "no emulator answers at 127.0.0.1:9" in result.stderr
    assert "Traceback" in result.stderr  # -v after the command still shows the traceback


def test_a_bad_value_after_the_command_is_a_usage_error_before_any_call(gcp):
    result = run("cluster", "list", "--project", PROJECT, "--format", "xml")
    assert result.exit_code == 2
    assert "--format" in result.stderr and "'xml' is not one of" in result.stderr
    result = run("--region", "us-central1", "cluster", "list", "--project", PROJECT, "--zone", "europe-west4-a")
    assert result.exit_code == 2
    assert "--zone europe-west4-a is not in --region us-central1" in result.stderr
    assert gcp.requests.all() == []


@pytest.mark.parametrize("where", ["before", "own"])
def test_a_commands_own_zone_means_the_same_as_the_global_one(gcp, where):
    common = ["--machine-type", "a2-highgpu-1g", "--project", PROJECT, "--format", "json"]
    args = (["--zone", "us-central1-b", "cluster", "plan", "p", *common] if where == "before"
            else ["cluster", "plan", "p", "--zone", "us-central1-b", *common])
    result = run(*args)
    assert result.exit_code == 0, result.output
    plan = json.loads(result.stdout)
    assert plan["zones"] == ["us-central1-b"] and plan["region"] == "us-central1"


def test_job_submit_region_after_the_command_and_trainer_args_untouched(gcp):
    common = ["job", "submit", "--vertex", "--machine-type", "a2-highgpu-1g", "--dry-run"]
    result = run(*common, "--project", PROJECT, "--format", "json", "--region", "europe-west4",
                 "--", "--model", "tiny", "--steps", "5")
    assert result.exit_code == 0, result.output
    request = json.loads(result.stdout)
    assert request["parent"] == f"projects/{PROJECT}/locations/europe-west4"
    assert request["customJob"]["jobSpec"]["workerPoolSpecs"][0]["containerSpec"]["args"] == [
        "--model", "tiny", "--steps", "5"]
    # After -- nothing is lifted: a global flag there is the trainer's (which refuses it).
    result = run(*common, "--project", PROJECT, "--region", "us-central1", "--", "--model", "tiny", "--format", "json")
    assert result.exit_code == 2
    assert "unrecognized arguments: --format json" in result.stderr
    # --dry-run reads what submit reads (the registry's images, for the default image), and changes nothing.
    assert [(r.method, r.path.rsplit("/", 1)[-1]) for r in gcp.requests.all()] == [("GET", "dockerImages")]


def test_every_command_carries_each_global_option_once():
    """A command's own option of the same name wins; each other global flag is accepted exactly once."""

    @click.group()
    def group() -> None: ...

    @group.command()
    @click.option("--zone")
    def own(zone: str | None) -> None: ...

    adopt_global_options(group)
    adopt_global_options(group)  # idempotent
    flags = [f for p in own.params for f in p.opts]
    assert flags.count("--zone") == 1
    for option in GLOBAL_OPTIONS:
        for flag in option.flags:
            assert flags.count(flag) == 1, flag
    zone = next(p for p in own.params if "--zone" in p.opts)
    assert zone.expose_value  # still the command's own


def test_subcommand_help_mentions_global_options():
    result = run("cluster", "status", "--help")
    assert result.exit_code == 0
    assert "Global options (--project, --region, --zone, --format, --emulator, -v)" in result.output
