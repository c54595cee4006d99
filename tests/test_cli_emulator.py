"""`gcpgpu emulator` as its owner meets it: the start banner says whether jobs' own commands run on this
machine, and `emulator faults --help` lists the keys the emulator accepts (read from its own code)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

from click.testing import CliRunner

import gcpgpu
from gcpgpu.cli import main
from gcpgpu.cli.emulator import _announce
from gcpgpu.fakes.core import Faults


def _banners(*flag_sets: tuple[str, ...]) -> list[str]:
    """The banners of real `gcpgpu emulator start`s (started together), each read until its last line; the
    servers are then stopped."""
    env = {**os.environ, "PYTHONPATH": str(Path(gcpgpu.__file__).parents[1])}
    procs = [subprocess.Popen([sys.executable, "-c", "from gcpgpu.cli import main; main()", "emulator", "start",
                               "--port", "0", *flags], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
                              stdin=subprocess.DEVNULL, env=env, text=True) for flags in flag_sets]
    guards = [threading.Timer(120, proc.kill) for proc in procs]  # a banner that never ends: the read sees its end
    banners = []
    try:
        for guard in guards:
            guard.start()
        for proc in procs:
            lines: list[str] = []
            for line in proc.stderr:
                lines.append(line)
                if line.startswith("Stop with Ctrl-C"):
                    break
            assert lines and lines[-1].startswith("Stop with Ctrl-C"), "".join(lines)
            banners.append("".join(lines))
    finally:
        for guard, proc in zip(guards, procs, strict=True):
            guard.cancel()
            proc.terminate()
            proc.wait(30)
    return banners


def test_a_plain_emulator_start_says_jobs_own_commands_do_not_run_and_how_to_allow_them():
    (plain,) = _banners(())
    assert "Jobs' own commands (--command, --workdir) do NOT run: such jobs fail at once. Start with " \
           "--run-user-commands" in plain


def test_the_banner_says_when_jobs_own_commands_run_or_cannot_for_want_of_bwrap(gcp, monkeypatch, capsys):
    # gcp is an emulator started as `emulator start --run-user-commands` starts it.
    monkeypatch.setattr(gcp.user_commands, "bwrap", "/usr/bin/bwrap")
    _announce(gcp, None)
    assert "Jobs' own commands (--command, --workdir) RUN on this machine, each in a bubblewrap sandbox" \
           in capsys.readouterr().err
    monkeypatch.setattr(gcp.user_commands, "bwrap", None)
    _announce(gcp, None)
    assert "Jobs' own commands (--command, --workdir) cannot run: this emulator cannot run users' commands here: " \
           "bubblewrap (bwrap) is not installed" in capsys.readouterr().err
    monkeypatch.setattr(gcp.user_commands, "allowed", False)
    _announce(gcp, None)
    assert "do NOT run" in capsys.readouterr().err


def test_faults_help_lists_every_key_the_emulator_accepts(monkeypatch):
    text = CliRunner().invoke(main, ["emulator", "faults", "--help"]).output
    section = text.split("Keys (--set KEY=VALUE, or in --file):", 1)[1]
    for key in Faults.keys():
        assert key in section, key
    assert {"preempt", "host_error", "error_rate", "capacity"} <= set(Faults.keys())
    # The list is read from the emulator's code, not written twice: a key added there shows here.
    monkeypatch.setattr(Faults, "keys", classmethod(lambda cls: ["a_key_added_later"]))
    assert "a_key_added_later" in CliRunner().invoke(main, ["emulator", "faults", "--help"]).output


def test_an_unknown_fault_key_is_refused_naming_the_keys(gcp):
    result = CliRunner().invoke(main, ["--emulator", gcp.address, "emulator", "faults", "--set", "eror_rate=0.5"])
    assert result.exit_code != 0
    assert "eror_rate" in result.output and "error_rate" in result.output


def test_the_grpc_port_can_be_chosen_and_emulator_info_shows_the_one_it_serves():
    import re
    import socket

    from helpers import free_port

    wanted = free_port()
    env = {**os.environ, "PYTHONPATH": str(Path(gcpgpu.__file__).parents[1])}
    proc = subprocess.Popen([sys.executable, "-c", "from gcpgpu.cli import main; main()", "emulator", "start",
                             "--port", "0", "--grpc-port", str(wanted)], stderr=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, stdin=subprocess.DEVNULL, env=env, text=True)
    guard = threading.Timer(120, proc.kill)
    guard.start()
    try:
        banner = ""
        for line in proc.stderr:
            banner += line
            if line.startswith("Stop with Ctrl-C"):
                break
        assert f"and 127.0.0.1:{wanted} (gRPC)" in banner, banner
        rest = re.search(r"listening on http://(127\.0\.0\.1:\d+)", banner).group(1)
        shown = CliRunner().invoke(main, ["--emulator", rest, "--format", "json", "emulator", "info"])
        assert shown.exit_code == 0, shown.output
        assert json.loads(shown.output)["grpc"] == f"127.0.0.1:{wanted}"
        with socket.create_connection(("127.0.0.1", wanted), timeout=10):
            pass  # something serves there: the emulator's gRPC server
    finally:
        guard.cancel()
        proc.terminate()
        proc.wait(30)


def test_a_bad_or_taken_port_is_refused_in_one_line_with_exit_2(tmp_path):
    import socket

    state = tmp_path / "state.json"
    for flags, says in ((["--port", "70000"], "--port 70000: a port is 1-65535 (0 picks a free one)"),
                        (["--port", "0", "--grpc-port", "-1"], "--grpc-port -1: a port is 1-65535 (0 picks a free one)")):
        result = CliRunner().invoke(main, ["emulator", "start", *flags])
        assert result.exit_code == 2, result.output
        assert result.output.strip().splitlines() == [f"Error: {says}"], result.output
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        for flags, flag in ((["--port", str(port)], "--port"), (["--port", "0", "--grpc-port", str(port)], "--grpc-port")):
            result = CliRunner().invoke(main, ["emulator", "start", *flags, "--state-file", str(state)])
            assert result.exit_code == 2, result.output
            assert result.output.strip().splitlines() == [
                f"Error: {flag} {port}: cannot listen on 127.0.0.1:{port} for {'REST' if flag == '--port' else 'gRPC'} "
                f"(Address already in use); choose another {flag} (0 picks a free one)"], result.output
    assert not state.exists()  # refused before anything was served or saved


def test_make_demo_takes_its_port_and_stops_in_one_line_when_it_is_taken(capsys):
    """`make demo PORT=N`: on a port another emulator holds, the demo must not drive that one."""
    import socket

    import pytest

    from gcpgpu.cli import demo

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(SystemExit) as stopped:
            demo.main(["--port", str(port)])
    assert stopped.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"Error: --port {port}: cannot listen on 127.0.0.1:{port} for REST (Address already in use); "
                   "choose another --port (0 picks a free one)"], err
    assert demo.ports(["--port", "8099", "--grpc-port", "8100"]) == (8099, 8100)
