"""Conventions every gcpgpu command follows: fast help, lazy commands, one-line errors, exit codes, output."""

from __future__ import annotations

import importlib.util
import io
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import click
import pytest
import yaml
from click.testing import CliRunner

from gcpgpu.cli import COMMANDS, LazyGroup, _stub_from_source, main
from gcpgpu.errors import CloudError, UsageProblem, describe_google_error, is_google_error
from gcpgpu.output import Column, emit

REPO = Path(__file__).resolve().parents[1]

# Each costs 1-3 s to import; help must never pay for them.
HEAVY_MODULES = (
    "google.cloud.compute_v1",
    "google.cloud.aiplatform",
    "google.cloud.aiplatform_v1",
    "google.cloud.monitoring_v3",
    "grpc",
    "torch",
    "google.api_core",
)

# Runs one gcpgpu command line in a fresh interpreter and reports what it imported.
_PROBE = """
import contextlib, io, json, sys
from gcpgpu.cli import main
captured = io.StringIO()
code = 0
with contextlib.redirect_stdout(captured), contextlib.redirect_stderr(captured):
    try:
        main(sys.argv[1:], prog_name="gcpgpu")
    except SystemExit as exit:
        code = exit.code
print(json.dumps({"code": code, "modules": sorted(sys.modules), "output": captured.getvalue()}))
"""


def probe(args: list[str]) -> dict:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, *args], capture_output=True, text=True, cwd=REPO, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def heavy_imports(modules: list[str]) -> list[str]:
    return [m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY_MODULES)]


def command_paths() -> list[list[str]]:
    """Every command and sub-subcommand reachable from `gcpgpu`, as argument lists."""
    paths: list[list[str]] = []

    def walk(group: click.Group, prefix: list[str], ctx: click.Context) -> None:
        for name in group.list_commands(ctx):
            command = group.get_command(ctx, name)
            if command is None:
                continue
            paths.append([*prefix, name])
            if isinstance(command, click.Group):
                walk(command, [*prefix, name], click.Context(command, parent=ctx, info_name=name))

    walk(main, [], click.Context(main, info_name="gcpgpu"))
    return paths


# --- help is fast --------------------------------------------------------------------------------


def test_root_help_imports_no_subcommand_and_nothing_heavy():
    result = probe(["--help"])
    assert result["code"] == 0, result["output"]
    assert "catalog" in result["output"]
    assert heavy_imports(result["modules"]) == []
    subcommand_modules = {target.partition(":")[0] for target in COMMANDS.values()}
    assert [m for m in result["modules"] if m in subcommand_modules] == []


def test_every_command_help_imports_nothing_heavy():
    paths = command_paths()
    assert ["catalog"] in paths and ["catalog", "show"] in paths  # the walk reaches sub-subcommands
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda path: probe([*path, "--help"]), paths))
    failures = {}
    for path, result in zip(paths, results, strict=True):
        if result["code"] != 0:
            failures[" ".join(path)] = f"exit {result['code']}: {result['output'][-500:]}"
        elif heavy_imports(result["modules"]):
            failures[" ".join(path)] = heavy_imports(result["modules"])
    assert failures == {}


def test_cluster_status_imports_only_the_compute_services_it_reads(gcp):
    # google.cloud.compute_v1's package __init__ imports all of its ~100 service clients (about 1.5 s
    # of every command that touches Compute); gcp/compute.py imports each service on its own instead.
    result = probe(["--project", "my-project", "cluster", "status", "demo"])
    assert "no cluster named demo" in result["output"]
    services = {m.split(".")[4] for m in result["modules"] if m.startswith("google.cloud.compute_v1.services.")}
    assert "instances" in services  # status read the project's instances...
    assert "accelerator_types" not in services, sorted(services)  # ...and nothing ran the package's __init__
    assert len(services) < 20, sorted(services)


# --- the command registry ----------------------------------------------------------------------


def test_every_registered_module_that_exists_loads():
    existing = [name for name, target in COMMANDS.items() if importlib.util.find_spec(target.split(":")[0])]
    assert "catalog" in existing  # so this test can never pass vacuously
    ctx = click.Context(main, info_name="gcpgpu")
    for name in existing:
        command = main.get_command(ctx, name)
        assert isinstance(command, click.Command), name
        assert name in main.list_commands(ctx)


def test_summaries_read_from_source_match_the_commands():
    # Root --help reads summaries from source; they must say what the imported command would.
    ctx = click.Context(main, info_name="gcpgpu")
    for name, target in COMMANDS.items():
        command = main.get_command(ctx, name)
        if command is not None:
            stub = _stub_from_source(name, target)
            assert (stub.get_short_help_str(45), stub.hidden) == (
                command.get_short_help_str(45),
                command.hidden,
            )


def test_a_registered_module_that_does_not_exist_yet_is_skipped(monkeypatch):
    monkeypatch.setitem(COMMANDS, "ghost", "gcpgpu.cli.ghost_not_written_yet:ghost")
    runner = CliRunner()
    helped = runner.invoke(main, ["--help"])
    assert helped.exit_code == 0, helped.output
    assert "ghost" not in helped.stdout and "catalog" in helped.stdout
    ran = runner.invoke(main, ["ghost"])
    assert ran.exit_code == 2 and "No such command 'ghost'" in ran.stderr


def test_lazy_group_is_reusable_for_nested_groups():
    group = LazyGroup("things", lazy_commands={"catalog": "gcpgpu.cli.catalog:catalog"})
    result = CliRunner().invoke(group, ["catalog", "--help"])
    assert result.exit_code == 0 and "GPU machine types" in result.stdout


def test_version():
    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0 and result.stdout.startswith("gcpgpu ")


# --- errors and exit codes -----------------------------------------------------------------------


def _raising(exc: BaseException) -> click.Command:
    @click.command("boom")
    def boom() -> None:
        raise exc

    return boom


def test_google_api_error_is_exit_1_in_one_line(monkeypatch):
    from google.api_core import exceptions

    message = "The resource 'projects/p/zones/z/instances/x' already exists"
    # As google.api_core builds it from a REST error body: the message carries method and URL.
    error = exceptions.Conflict(
        f"POST http://127.0.0.1:8085/compute/v1/projects/p/zones/z/instances: {message}",
        errors=[{"message": message, "domain": "global", "reason": "alreadyExists"}],
    )
    monkeypatch.setitem(main.commands, "boom", _raising(error))
    result = CliRunner().invoke(main, ["boom"])
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [f"Error: 409 alreadyExists: {message}"]


def test_verbose_adds_the_traceback(monkeypatch):
    from google.api_core import exceptions

    monkeypatch.setitem(main.commands, "boom", _raising(exceptions.NotFound("no such zone")))
    result = CliRunner().invoke(main, ["--verbose", "boom"])
    assert result.exit_code == 1
    assert "Traceback" in result.stderr
    assert result.stderr.splitlines()[-1] == "Error: 404: no such zone"


def test_google_error_reasons_from_each_transport():
    from google.api_core import exceptions
    from google.rpc import error_details_pb2

    # gRPC and REST with an ErrorInfo detail: exc.reason.
    info = error_details_pb2.ErrorInfo(reason="RATE_LIMIT_EXCEEDED", domain="googleapis.com")
    assert (
        describe_google_error(exceptions.TooManyRequests("Quota exceeded for\nrequests", error_info=info))
        == "429 RATE_LIMIT_EXCEEDED: Quota exceeded for requests"
    )
    # A failed Compute operation: from_http_status with the operation's errors[].code.
    op_error = type(
        "Errors", (), {"code": "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS", "message": "no H100s"}
    )()
    error = exceptions.from_http_status(503, "SERVICE UNAVAILABLE", errors=[op_error])
    assert describe_google_error(error) == "503 ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS: no H100s"
    # Retries that ran out: told by their last error and how long they tried (issue 23 item 9 found
    # api_core's raw "Timeout of 600.0s exceeded, last exception: ..." text ending a failed up).
    retry = exceptions.RetryError("Timeout of 600.0s exceeded", cause=exceptions.ServiceUnavailable("busy"))
    assert describe_google_error(retry) == "503: busy (still failing after 600.0 s of retries)"


def test_retries_that_ran_out_are_classified_by_their_last_error_and_stay_permanent():
    """Issue 51: a cluster up that gave up under 503s said 'creating 4 x a2-highgpu-1g in us-central1-a failed:
    : Timeout of 0.6s exceeded' (api_core's RetryError has no code or reason of its own)."""
    from google.api_core import exceptions

    from gcpgpu.gcp.errors import classify, is_transient

    retry = exceptions.RetryError("Timeout of 90.0s exceeded", cause=exceptions.ServiceUnavailable("The service is unavailable."))
    failure = classify(retry)
    assert failure.code == 503 and failure.message == "The service is unavailable. (still failing after retries)"
    assert failure.kind == "permanent" and not is_transient(retry)  # not retried again by an outer retry


def test_only_google_errors_are_classified_as_google():
    from google.api_core import exceptions

    assert is_google_error(exceptions.Forbidden("x"))
    assert not is_google_error(ValueError("x"))
    assert not is_google_error(CloudError("x"))


def test_our_own_bugs_keep_their_traceback(monkeypatch):
    monkeypatch.setitem(main.commands, "boom", _raising(ZeroDivisionError("oops")))
    result = CliRunner().invoke(main, ["boom"])
    assert isinstance(result.exception, ZeroDivisionError)


def test_usage_problem_is_exit_2_in_one_line(monkeypatch):
    monkeypatch.setitem(main.commands, "boom", _raising(UsageProblem("--nodes 0 must be at least 1")))
    result = CliRunner().invoke(main, ["boom"])
    assert result.exit_code == 2
    assert result.stderr.splitlines() == ["Error: --nodes 0 must be at least 1"]


def test_cloud_error_is_exit_1(monkeypatch):
    monkeypatch.setitem(main.commands, "boom", _raising(CloudError("cluster c has no running nodes")))
    result = CliRunner().invoke(main, ["boom"])
    assert result.exit_code == 1
    assert result.stderr.splitlines() == ["Error: cluster c has no running nodes"]


def test_ctrl_c_is_exit_130_in_one_line(monkeypatch):
    monkeypatch.setitem(main.commands, "boom", _raising(KeyboardInterrupt()))
    result = CliRunner().invoke(main, ["boom"])
    assert result.exit_code == 130
    assert result.stderr.splitlines() == ["Interrupted."]


def test_bad_format_is_a_usage_error():
    result = CliRunner().invoke(main, ["--format", "xml", "catalog"])
    assert result.exit_code == 2 and "xml" in result.stderr


# --- output ------------------------------------------------------------------------------------

ROWS = [
    {"name": "node-0", "status": "RUNNING", "gpus": 8, "spot": True, "labels": {"team": "[ml]"}},
    {"name": "node-1", "status": None, "gpus": 8, "spot": False, "labels": {}},
]


def test_emit_json_and_yaml_carry_every_field():
    out = io.StringIO()
    emit(ROWS, ["name"], fmt="json", file=out)
    assert json.loads(out.getvalue()) == ROWS
    out = io.StringIO()
    emit(ROWS[0], fmt="yaml", file=out)
    assert yaml.safe_load(out.getvalue()) == ROWS[0]


def test_emit_table_shows_the_chosen_columns():
    out = io.StringIO()
    emit(
        ROWS,
        ["name", ("status", "STATE"), Column("gpus", justify="right"), "spot", "labels"],
        fmt="table",
        file=out,
    )
    lines = out.getvalue().splitlines()
    assert lines[0].split() == ["NAME", "STATE", "GPUS", "SPOT", "LABELS"]
    assert lines[2].split() == ["node-0", "RUNNING", "8", "yes", "team=[ml]"]  # "[ml]" is not rich markup
    assert lines[3].split() == ["node-1", "-", "8", "no", "-"]
    assert all(line == line.rstrip() for line in lines)


def test_emit_one_record_as_fields():
    out = io.StringIO()
    emit({"name": "c", "nodes": 2}, [Column("name", "Name"), Column("nodes", "Nodes")], fmt="table", file=out)
    assert [line.split() for line in out.getvalue().splitlines()] == [["Name", "c"], ["Nodes", "2"]]


def test_emit_follows_the_format_flag_and_notes_go_to_stderr(monkeypatch):
    @click.command("rows")
    @click.option("--none", is_flag=True)
    def rows(none: bool) -> None:
        emit([] if none else ROWS, ["name"], empty="No clusters.")

    monkeypatch.setitem(main.commands, "rows", rows)
    runner = CliRunner()
    assert json.loads(runner.invoke(main, ["--format", "json", "rows"]).stdout) == ROWS
    assert json.loads(runner.invoke(main, ["--format", "json", "rows", "--none"]).stdout) == []
    as_table = runner.invoke(main, ["rows"])
    assert as_table.stdout.split() == ["NAME", "─" * len("node-0"), "node-0", "node-1"]
    empty_table = runner.invoke(main, ["rows", "--none"])
    assert (empty_table.stdout, empty_table.stderr) == ("", "No clusters.\n")


@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_emit_handles_dataclasses(fmt):
    from gcpgpu.catalog import get_machine_type

    out = io.StringIO()
    emit([get_machine_type("g2-standard-12")], fmt=fmt, file=out)
    loaded = json.loads(out.getvalue()) if fmt == "json" else yaml.safe_load(out.getvalue())
    assert loaded[0]["gpu"]["name"] == "nvidia-l4"
