"""A new user's first hour (issue 24): names, messages and defaults as a newcomer meets them.

Each test runs the real CLI against the emulator; bad input must be refused in one line, exit 2,
before any API call.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from helpers import refused

from gcpgpu.cli import main

P = ["--project", "my-project"]


def run(*argv: str):
    return CliRunner().invoke(main, list(argv))


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


# -- item 5: messages name what exists and what the user typed; a command's own option wins
def _commands_named_in_messages() -> list[tuple[str, str]]:
    """(where, text) of every `'gcpgpu ...'` a message of the tool quotes, and every inline `gcpgpu ...` of the README."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    found = []
    for path in sorted((root / "gcpgpu").rglob("*.py")):
        for m in re.finditer(r"'(gcpgpu [^']*)'", path.read_text()):
            found.append((str(path.relative_to(root)), m.group(1)))
    for m in re.finditer(r"`(gcpgpu [^`]*)`", (root / "README.md").read_text()):
        found.append(("README.md", m.group(1)))
    return found


def _unknown_parts(text: str) -> list[str]:
    """The subcommands and options of one `gcpgpu ...` line that the CLI does not have."""
    import shlex

    import click

    from gcpgpu.cli.options import GLOBAL_OPTIONS

    global_flags = {f: o for o in GLOBAL_OPTIONS for f in o.flags}
    words = shlex.split(text.split("|")[0].replace("{", "X").replace("}", ""))[1:]
    ctx = click.Context(main)
    command: click.Command = main
    problems, skip = [], False
    for word in words:
        if skip:
            skip = False
            continue
        if word == "--":
            break  # the trainer's arguments
        if word.startswith("-"):
            flag = word.split("=", 1)[0]
            param = next((p for p in command.params if flag in (*p.opts, *p.secondary_opts)), None)
            if param is None and flag in global_flags:
                skip = "=" not in word and not global_flags[flag].kwargs.get("is_flag")
                continue
            if param is None and flag not in ("-h", "--help"):
                problems.append(f"{command.name} has no option {flag}")
            skip = param is not None and not getattr(param, "is_flag", False) and "=" not in word
            continue
        if isinstance(command, click.Group) and word[:1].islower() and word[:1].isalpha():
            sub = command.get_command(ctx, word)
            if sub is None:  # click answers "No such command" here, with or without invoke_without_command
                problems.append(f"no command '{command.name} {word}'")
                break
            ctx, command = click.Context(sub, parent=ctx, info_name=word), sub
    return problems


def test_every_gcpgpu_command_a_message_or_the_readme_names_exists():
    named = _commands_named_in_messages()
    assert len(named) > 40
    wrong = [f"{where}: '{text}': {problem}" for where, text in named for problem in _unknown_parts(text)]
    assert wrong == []


def test_catalog_zones_lists_the_zones_a_cluster_may_use():
    result = run("--format", "json", "catalog", "zones", "--machine-type", "a3-megagpu-8g")
    assert result.exit_code == 0, result.output
    zones = json.loads(result.stdout)
    assert "us-east5-a" in {z["zone"] for z in zones}
    assert all("a3-megagpu-8g" in z["machine_types"] for z in zones)
    assert "us-east5-b" not in {z["zone"] for z in zones}  # the catalog offers no A3 Mega there


def test_an_unknown_zone_points_at_a_command_that_lists_the_known_ones(gcp):
    line = refused(gcp, *P, "cluster", "plan", "c", "--machine-type", "a3-highgpu-8g", "--zone", "mars-north1-a")
    assert line.startswith("Error: --zone 'mars-north1-a' is not a zone the catalog knows")
    assert "'gcpgpu catalog zones'" in line and run("catalog", "zones").exit_code == 0


@pytest.mark.parametrize(("option", "value"), [("--zone", "europe-west4-b"), ("--zones", "us-central1-a,europe-west4-b")])
def test_a_zone_outside_the_region_names_the_option_the_user_typed(gcp, option, value):
    line = refused(gcp, *P, "cluster", "up", "c", "--machine-type", "a3-highgpu-8g", "--region", "us-central1",
                   option, value, "--yes")
    assert f"{option} europe-west4-b is in europe-west4, not in --region us-central1" in line


@pytest.mark.parametrize(("argv", "region", "zones", "note"), [
    # The README's rule: a command's own option of the same name is the one it reads.
    (["--region", "us-central1", "cluster", "plan", "c", "--region", "us-east5"], "us-east5", None,
     "using the command's --region us-east5, not the global --region us-central1"),
    (["--region", "us-central1", "cluster", "plan", "c", "--zone", "europe-west4-b"], "europe-west4",
     ["europe-west4-b"], "using the command's --zone europe-west4-b, not the global --region us-central1"),
    (["--zone", "us-central1-b", "cluster", "plan", "c", "--zone", "us-central1-a"], "us-central1",
     ["us-central1-a"], "not the global --zone us-central1-b"),
    (["--zone", "europe-west4-b", "cluster", "plan", "c", "--region", "us-east5"], "us-east5", None,
     "using the command's --region us-east5, not the global --zone europe-west4-b"),
    # Global flags the command agrees with, or that it takes as its default, get no note.
    (["--region", "us-east5", "cluster", "plan", "c", "--region", "us-east5"], "us-east5", None, None),
    (["--region", "us-east5", "cluster", "plan", "c"], "us-east5", None, None),
    (["--region", "us-east5", "cluster", "plan", "c", "--zone", "us-east5-a"], "us-east5", ["us-east5-a"], None),
])
def test_a_commands_own_location_replaces_the_global_one_with_a_note(gcp, argv, region, zones, note):
    result = run(*P, "--format", "json", *argv, "--machine-type", "a3-megagpu-8g")
    assert result.exit_code == 0, result.output
    plan = json.loads(result.stdout)
    assert plan["region"] == region
    if zones:
        assert plan["zones"] == zones
    notes = [line for line in result.stderr.splitlines() if line.startswith("note: using")]
    assert len(notes) == (1 if note else 0), result.stderr
    assert note is None or note in notes[0]
    assert gcp.requests.all() == []


def test_two_global_flags_that_disagree_are_still_refused(gcp):
    line = refused(gcp, *P, "--region", "us-east4", "--zone", "us-central1-a", "cluster", "plan", "c",
                   "--machine-type", "a3-megagpu-8g")
    assert "--zone us-central1-a is not in --region us-east4" in line


# -- item 3: gcloud-env keeps the user's project (or says which it sets), one folder per emulator
def _gcloud_config(folder, project: str, extra: str = "") -> None:
    (folder / "configurations").mkdir(parents=True, exist_ok=True)
    (folder / "configurations" / "config_default").write_text(f"[core]\nproject = {project}\n{extra}")


def written_config(folder) -> dict:
    import configparser

    parser = configparser.ConfigParser(interpolation=None)
    assert parser.read(f"{folder}/configurations/config_default"), f"no gcloud configuration in {folder}"
    assert (Path(folder) / "active_config").read_text() == "default"
    return {name: dict(parser[name]) for name in parser.sections()}


def test_gcloud_env_sets_only_the_overrides_the_installed_gcloud_knows(gcp, tmp_path, monkeypatch):
    """gcloud 528 has no api_endpoint_overrides/servicenetworking: `gcloud config set` of it printed an ERROR
    line (and nine 'universe domain' WARNING paragraphs, ten seconds) in every eval of gcloud-env."""
    import gcpgpu.cli.emulator as emulator_cli

    monkeypatch.setattr(emulator_cli, "_gcloud_known", lambda section: {"compute", "storage"})
    result = run("emulator", "gcloud-env", "--config-dir", str(tmp_path / "g"))
    assert result.exit_code == 0, result.output
    assert set(written_config(tmp_path / "g")["api_endpoint_overrides"]) == {"compute", "storage"}


def test_the_sdk_reader_finds_the_installed_gclouds_overrides():
    import shutil

    from gcpgpu.cli.emulator import _gcloud_known

    if shutil.which("gcloud") is None:
        assert _gcloud_known("api_endpoint_overrides") is None
        return
    known = _gcloud_known("api_endpoint_overrides")
    assert known is not None and {"compute", "storage", "logging", "monitoring", "file"} <= known


def test_gcloud_env_keeps_the_users_project_and_says_so(gcp, tmp_path, monkeypatch, isolated_gcloud):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    _gcloud_config(isolated_gcloud, "users-project", "[compute]\nregion = europe-west4\n")
    result = run("emulator", "gcloud-env")
    assert result.exit_code == 0, result.output
    folder = tmp_path / "cache" / "gcpgpu" / "emulator-gcloud" / gcp.address.replace(":", "-")
    assert result.stdout == f"export CLOUDSDK_CONFIG={folder}\n"  # gcloud itself is not run: instant, quiet
    written = written_config(folder)
    assert written["core"]["project"] == "users-project" and written["compute"]["region"] == "europe-west4"
    assert written["auth"]["disable_credentials"] == "true"
    assert written["api_endpoint_overrides"]["compute"] == f"http://{gcp.address}/compute/v1/"
    assert (f"gcloud and gcpgpu now use your project users-project (from your gcloud configuration), region "
            f"europe-west4, with the emulator at {gcp.address}; gcloud's configuration: {folder}") in result.stderr


def test_gcloud_env_without_a_project_says_which_one_it_sets(gcp, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    result = run("emulator", "gcloud-env")
    assert result.exit_code == 0, result.output
    folder = result.stdout.strip().removeprefix("export CLOUDSDK_CONFIG=")
    assert written_config(folder)["core"]["project"] == "emulator-project"
    assert "now use the placeholder project emulator-project (none was set)" in result.stderr
    flagged = run("--project", "flag-project", "emulator", "gcloud-env")
    assert written_config(folder)["core"]["project"] == "flag-project" and "(from --project)" in flagged.stderr
    assert "is not a project id" in refused(gcp, "--project", "Bad", "emulator", "gcloud-env")


def test_each_emulator_gets_its_own_gcloud_folder(monkeypatch, tmp_path):
    from gcpgpu.cli.emulator import gcloud_config_dir

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    folders = {gcloud_config_dir(a) for a in ("127.0.0.1:8085", "127.0.0.1:8086", "localhost:8085")}
    assert len(folders) == 3 and all(f.parent == tmp_path / "gcpgpu" / "emulator-gcloud" for f in folders)


def test_empty_listings_name_the_project(gcp):
    result = run("--project", "my-project", "cluster", "list")
    assert result.exit_code == 0 and "No gcpgpu clusters in project my-project." in result.stderr
    result = run("--project", "my-project", "job", "list", "--clusters")
    assert result.exit_code == 0 and "No jobs in project my-project." in result.stderr


# -- item 1: cluster ssh against the emulator runs no gcloud and never uses the key that reaches real nodes
@pytest.fixture
def recorded_tools(tmp_path, monkeypatch):
    """gcloud and ssh stubs first on PATH that record each call, and a HOME of the test's own."""
    import os
    import stat

    bin_dir, log = tmp_path / "bin", tmp_path / "calls.log"
    bin_dir.mkdir()
    for tool in ("gcloud", "ssh", "ssh-keygen"):
        stub = bin_dir / tool
        stub.write_text(f'#!/bin/sh\necho "{tool} $*" >> {log}\nexit 0\n')
        stub.chmod(stub.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    return lambda: log.read_text().splitlines() if log.exists() else []


def test_cluster_ssh_against_the_emulator_runs_no_gcloud_and_only_the_emulators_own_key(gcp, recorded_tools,
                                                                                         tmp_path):
    """Issue 54: the emulator's nodes are reached through its own tunnel (tests/test_node_ssh.py runs it for real),
    with a key of the emulator's own: gcloud's google_compute_engine, which reaches real nodes, is never read."""
    up = run(*P, "cluster", "up", "flex", "--machine-type", "a3-highgpu-8g", "--nodes", "2", "--region",
             "us-central1", "--iap-ssh", "--yes")
    assert up.exit_code == 0, up.output
    ssh_dir = tmp_path / "home" / ".ssh"
    ssh_dir.mkdir()
    (ssh_dir / "gcpgpu_emulator").write_text("private\n")
    (ssh_dir / "gcpgpu_emulator.pub").write_text("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFakeKeyForTheTest me\n")
    result = run(*P, "cluster", "ssh", "flex", "--node", "1", "--", "nvidia-smi")
    assert result.exit_code == 0, result.output
    [call] = recorded_tools()
    assert call.startswith("ssh ") and "gcpgpu.cluster.tunnel" in call and f"{ssh_dir}/gcpgpu_emulator " in call
    assert call.endswith(" flex-1 nvidia-smi") and "google_compute_engine" not in call
    assert sorted(p.name for p in ssh_dir.iterdir()) == ["gcpgpu_emulator", "gcpgpu_emulator.pub"]


def test_cluster_ssh_with_only_gcloud_pointed_at_an_emulator_runs_nothing(gcp, recorded_tools, monkeypatch,
                                                                          isolated_gcloud):
    """After `eval "$(gcpgpu emulator gcloud-env)"` without GCPGPU_EMULATOR: gcloud would still write keys."""
    monkeypatch.delenv("GCPGPU_EMULATOR")
    (isolated_gcloud / "configurations").mkdir()
    (isolated_gcloud / "configurations" / "config_default").write_text(
        f"[api_endpoint_overrides]\ncompute = http://{gcp.address}/compute/v1/\n[core]\nproject = my-project\n")
    line = refused(gcp, "cluster", "ssh", "flex", "--", "nvidia-smi")
    assert "sends compute to http://" in line and "cannot be reached by gcloud's IAP tunnel" in line
    assert recorded_tools() == []
    monkeypatch.setenv("CLOUDSDK_API_ENDPOINT_OVERRIDES_COMPUTE", "http://localhost:8085/compute/v1/")
    assert "CLOUDSDK_API_ENDPOINT_OVERRIDES_COMPUTE" in refused(gcp, "cluster", "ssh", "flex")


def test_a_local_image_build_against_the_emulator_does_not_push_to_the_real_registry(gcp, recorded_tools):
    line = refused(gcp, *P, "--region", "us-central1", "container", "build", "--local", "--flavor", "none")
    assert "--local against the emulator" in line and "--no-push" in line


# -- done when: nothing the tool runs while pointed at the emulator reaches past it
SWEEP = [
    ["catalog"], ["catalog", "zones"], ["plan", "memory", "--model", "124m"], ["nccl", "env", "--machine-type",
                                                                              "a3-megagpu-8g"],
    ["emulator", "info"], ["emulator", "faults"], ["emulator", "gcloud-env"],
    ["cluster", "plan", "demo", "--machine-type", "a2-highgpu-1g", "--nodes", "2", "--region", "us-central1"],
    ["cluster", "up", "demo", "--machine-type", "a2-highgpu-1g", "--nodes", "2", "--region", "us-central1",
     "--iap-ssh", "--yes"],
    ["cluster", "status", "demo"], ["cluster", "list"], ["cluster", "doctor", "demo"],
    # `cluster ssh` against the emulator runs OpenSSH to the nodes' real sshd through the emulator's loopback tunnel
    # with a key of the emulator's own (issue 54): tests/test_node_ssh.py and the ssh test above.
    ["job", "submit", "--vertex", "--region", "us-central1", "--machine-type", "a2-highgpu-1g", "--dry-run", "--",
     "--model", "tiny"],
    ["job", "submit", "--cluster", "demo", "--wait", "--", "--model", "tiny", "--steps", "3", "--seq-len", "32",
     "--log-json", "m.jsonl"],
    ["job", "list"], ["job", "status", "{job}"], ["job", "logs", "{job}"], ["job", "follow", "{job}"],
    ["job", "cancel", "{job}"],
    ["metrics", "tail", "--cluster", "demo", "--once"], ["metrics", "tail", "--job", "{job}", "--once"],
    ["metrics", "report", "--cluster", "demo", "--since", "30m", "-o", "{tmp}/r.html"],
    ["metrics", "dashboard", "create", "--cluster", "demo"], ["metrics", "dashboard", "delete", "--cluster", "demo"],
    ["container", "build", "--machine-type", "a3-highgpu-8g", "--region", "us-central1"],
    ["cluster", "down", "demo", "--nodes", "1", "--yes"], ["cluster", "down", "demo", "--yes"],
    ["emulator", "reset"],
]


@pytest.mark.slow
def test_no_command_pointed_at_the_emulator_reaches_google_cloud_gcloud_or_ssh(gcp, recorded_tools, tmp_path,
                                                                                monkeypatch):
    """Issue 24, done when: every command group run against the emulator (in this process, with the
    emulator) while an audit hook refuses and records any connection beyond loopback and any start of
    gcloud or ssh; stubs on PATH would record one started any other way, and HOME gets no ~/.ssh and
    no gcloud configuration."""
    from emulator_guard import Guard, watch_this_process

    guard = Guard(tmp_path / "guard")
    monkeypatch.setenv("PYTHONPATH", guard.pythonpath(Path(__file__).resolve().parents[1]))  # the trainers
    monkeypatch.setenv("GCPGPU_GUARD_LOG", str(guard.log))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    codes, job = {}, ""
    with watch_this_process() as records:
        for argv in SWEEP:
            argv = [a.replace("{job}", job).replace("{tmp}", str(tmp_path)) for a in argv]
            result = run(*P, *argv)
            codes[" ".join(argv)] = result.exit_code
            if argv[:2] == ["job", "submit"] and "--dry-run" not in argv:
                job = result.stdout.split()[0]
    assert records == [] and guard.problems() == [] and recorded_tools() == []
    home = tmp_path / "home"
    assert not (home / ".ssh").exists() and not (home / ".config" / "gcloud").exists()  # (matplotlib's cache may be)
    refused = {c: code for c, code in codes.items() if code}
    assert refused == {}, refused


@pytest.mark.parametrize("keep", [True, False], ids=["state-file", "none"])
def test_ctrl_c_on_the_emulator_says_what_it_kept(tmp_path, keep):
    """Issue 51: Ctrl-C on the emulator said nothing of what a --state-file kept or what was lost."""
    import signal
    import subprocess
    import sys

    from helpers import free_port

    state = tmp_path / "state.json"
    argv = [str(Path(sys.executable).with_name("gcpgpu")), "emulator", "start", "--port", str(free_port()),
            *(["--state-file", str(state)] if keep else [])]
    server = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        for line in server.stderr:  # the event: it says where it listens, then how to stop it
            if "Stop with Ctrl-C" in line:
                break
        server.send_signal(signal.SIGINT)
        _, err = server.communicate(timeout=120)
    finally:
        server.kill()
    assert server.returncode == 0, err
    if keep:
        assert f"Stopped. Saved to {state}: every resource" in err and state.is_file(), err
    else:
        assert "Stopped. Nothing was kept" in err and "--state-file FILE" in err, err
