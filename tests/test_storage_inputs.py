"""Storage inputs that cannot overflow or reach a shell (issue 49, Low): each bad one is one line naming the
field and the range, before any API call; the loader VM's script reads a prefix as data."""

from __future__ import annotations

import os
import subprocess

import pytest
from click.testing import CliRunner
from helpers import PROJECT, refused

from gcpgpu.cli import main
from gcpgpu.storage.hyperdisk import loader_script

UP = ["--project", PROJECT, "cluster", "up", "c", "--machine-type", "a2-highgpu-1g", "--zone", "us-central1-a",
      "--yes"]
PLAN = ["--project", PROJECT, "plan", "storage", "--tokens-per-second", "400000", "--bytes-per-token", "2",
        "--save-time", "2m"]


def test_a_share_over_the_nodes_local_ssd_mount_is_refused(gcp):
    line = refused(gcp, *UP, "--mount", "filestore:fs1:/mnt/localssd")
    assert "--mount" in line and "/mnt/localssd is reserved" in line, line
    assert "/mnt/localssd" in refused(gcp, *UP, "--mount", "lustre:l1:/mnt/localssd/ckpt")


@pytest.mark.parametrize("source", ["gs://bkt/$(touch /tmp/x)", "gs://bkt/a`id`", 'gs://bkt/a"b', "gs://bkt/a'b",
                                    "gs://bkt/a\nb", "gs://bkt\n/a", "gs://bkt/a\\b"])
def test_a_hyperdisk_prefix_a_shell_would_read_is_refused(gcp, source):
    line = refused(gcp, *UP, "--hyperdisk-ml", source)
    assert line.startswith("Error: --hyperdisk-ml"), line


def test_the_loader_script_reads_the_prefix_as_data_even_in_its_error_line(tmp_path):
    """The script must not run what a prefix holds, even one that got past the flag's check (a spec file
    written by something else): its failure line used to put the quoted prefix inside double quotes."""
    stubs = tmp_path / "bin"
    stubs.mkdir()
    said = tmp_path / "said"
    for name, body in {"sleep": "exit 0", "mkfs.ext4": "exit 0", "mkdir": "exit 0", "mount": "exit 0",
                       "umount": "exit 0", "sync": "exit 0", "gcloud": "exit 1",
                       "curl": f'printf "%s\\n" "$*" >> {said}'}.items():
        (stubs / name).write_text(f"#!/bin/bash\n{body}\n")
        (stubs / name).chmod(0o755)
    pwned = tmp_path / "pwned"
    script = tmp_path / "loader.sh"
    script.write_text(loader_script(f"gs://bkt/data/$(touch {pwned})/x`touch {pwned}`"))
    subprocess.run(["bash", str(script)], env={**os.environ, "PATH": f"{stubs}:/usr/bin:/bin"}, timeout=60,
                   capture_output=True, check=False)
    assert not pwned.exists()
    assert f"rsync from gs://bkt/data/$(touch {pwned})/x`touch {pwned}`/ failed" in said.read_text()


@pytest.mark.parametrize("size", ["9" * 400, "9" * 400 + "TiB", "1" + "0" * 30 + ".5GiB"])
def test_a_huge_filestore_size_is_one_line_naming_the_flag_and_the_range(gcp, size):
    line = refused(gcp, *UP, "--filestore", size)
    assert line.startswith("Error: --filestore") and "at most 104,857,600 GiB" in line, line


def test_tb_is_refused_with_its_binary_figure_not_read_as_tib(gcp):
    line = refused(gcp, *UP, "--filestore", "1TB")
    assert "TB is 10^12 bytes (931.3 GiB)" in line and "write GiB or TiB, e.g. 1TiB" in line, line
    assert "10^9 bytes" in refused(gcp, *UP, "--lustre", "9000GB")


@pytest.mark.parametrize("args, field", [
    (["--tokens-per-second", "inf"], "--tokens-per-second"),
    (["--tokens-per-second", "1e400"], "--tokens-per-second"),
    (["--tokens-per-second", "nan"], "--tokens-per-second"),
    (["--bytes-per-token", "nan"], "--bytes-per-token"),
    (["--bytes-per-token", "0"], "--bytes-per-token"),
    (["--checkpoint-size", "9" * 400], "--checkpoint-size"),
    (["--checkpoint-size", "0GiB"], "--checkpoint-size"),
    (["--keep", str(10**30)], "--keep"),
    (["--keep", "0"], "--keep"),
    (["--data-size", "1e400"], "--data-size"),
])
def test_plan_storage_refuses_what_cannot_be_planned_in_one_line(gcp, args, field):
    given = dict(zip(args[::2], args[1::2], strict=True))
    argv = [*PLAN]
    for flag, value in given.items():
        if flag in argv:
            argv[argv.index(flag) + 1] = value
        else:
            argv += [flag, value]
    if "--checkpoint-size" not in given:
        argv += ["--checkpoint-size", "100GiB"]
    line = refused(gcp, *argv)
    assert line.startswith(f"Error: {field}") and ("range" in line or "at most" in line or " to " in line), line


def test_plan_storage_reads_gb_as_decimal():
    result = CliRunner().invoke(main, [*PLAN[2:], "--checkpoint-size", "1000GB", "--keep", "1"])
    assert result.exit_code == 0, result.output
    assert "931 GiB" in result.output, result.output  # 10^12 bytes is 931.3 GiB, not 1,000 GiB
