"""`gcpgpu emulator` as its owner meets it: the start banner says whether jobs' own commands run on this
machine, and `emulator faults --help` lists the keys the emulator accepts (read from its own code)."""

from __future__ import annotations

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
