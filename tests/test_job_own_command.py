"""A user's own command (issue 50): run as written (a line with shell syntax under `sh -c`), heard while it is
followed (its lines under `--wait` and `job follow`, by rank), and its death by SIGKILL told as such."""

from __future__ import annotations

import json
import re
import shutil

import pytest
from click.testing import CliRunner

from gcpgpu.cli import main
from gcpgpu.errors import UsageProblem
from gcpgpu.jobs.usercode import command_words

GLOBAL = ["--project", "test-proj", "--region", "us-central1"]
needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap (bwrap) is not installed: the "
                                 "emulator cannot sandbox users' commands")


def cli(*argv: str):
    return CliRunner().invoke(main, [*GLOBAL, *argv])


@pytest.fixture
def cluster(gcp) -> str:
    up = cli("cluster", "up", "c", "--machine-type", "a2-highgpu-1g", "--nodes", "2", "--zone", "us-central1-a",
             "--yes")
    assert up.exit_code == 0, up.output
    return "c"


@pytest.mark.parametrize("line", ["ls -la /data; cat /data/d1.txt", "test 1 = 1 && echo ran", "false || echo ran",
                                  "ls | wc -l", "python train.py > out.txt 2>&1", "echo `id -u`", "ls /data/*.txt",
                                  "python train.py &", "echo ~", "torchrun --nnodes $NNODES train.py"])
def test_a_line_with_shell_syntax_runs_under_a_shell_as_written(line):
    """Issue 50: `ls -la /data; cat /data/d1.txt` was split into words: `ls` got `/data;`, `cat`, ... and failed."""
    assert command_words(line) == ["sh", "-c", line]


@pytest.mark.parametrize(("line", "words"), [
    ("python train.py --name 'run 1'", ["python", "train.py", "--name", "run 1"]),
    ("python -c 'import os; print(os.environ[\"$HOME\"])'", ["python", "-c", 'import os; print(os.environ["$HOME"])']),
    ("echo a\\;b \"x|y\"", ["echo", "a;b", "x|y"]),
    ("sh -c 'echo $HOME && ls'", ["sh", "-c", "echo $HOME && ls"]),
    ("python t.py --tag a#b", ["python", "t.py", "--tag", "a#b"]),
    ("python -m gcpgpu.trainer --ckpt-dir $AIP_CHECKPOINT_DIR", ["python", "-m", "gcpgpu.trainer", "--ckpt-dir",
                                                                 "$AIP_CHECKPOINT_DIR"]),
])
def test_a_line_whose_syntax_is_all_quoted_is_split_into_the_same_words(line, words):
    assert command_words(line) == words


def test_the_bundled_trainers_line_with_shell_syntax_is_refused_in_one_line():
    with pytest.raises(UsageProblem, match=r"^--command .*the bundled trainer's line holds shell syntax \('>'\)"):
        command_words("python -m gcpgpu.trainer --steps 3 > out.txt")


@pytest.mark.slow
@needs_bwrap
@pytest.mark.parametrize("target", ["vertex", "cluster"])
def test_a_command_with_and_runs_both_sides_where_the_job_runs(gcp, target):
    """Issue 50's test: `--command "test 1 = 1 && echo ran"` prints `ran` (split, `test` got five arguments)."""
    where = ["--vertex", "--machine-type", "a2-highgpu-1g"]
    if target == "cluster":
        up = cli("cluster", "up", "c", "--machine-type", "a2-highgpu-1g", "--nodes", "1", "--zone", "us-central1-a",
                 "--yes")
        assert up.exit_code == 0, up.output
        where = ["--cluster", "c"]
    result = cli("job", "submit", *where, "--wait", "--command", "test 1 = 1 && echo ran")
    assert result.exit_code == 0, result.output
    logs = cli("job", "logs", result.stdout.splitlines()[0])
    assert re.search(r"^\[\S+\] ran$", logs.stdout, re.M), logs.output


@pytest.mark.slow
@needs_bwrap
def test_a_sigkilled_commands_cause_says_killed_never_the_entrypoints_note(cluster):
    """Issue 50: a SIGKILLed rank's error quoted 'gcpgpu-entrypoint: checkpoints (GCPGPU_CKPT_DIR): no output
    directory ...' (the command said nothing; the sandbox's first process ended 137) instead of killed."""
    result = cli("job", "submit", "--cluster", cluster, "--wait", "--command",
                 "python -c 'import os, signal; os.kill(os.getpid(), signal.SIGKILL)'")
    assert result.exit_code == 1, result.output
    last = result.stderr.strip().splitlines()[-1]
    assert "ended FAILED: killed (out of memory?): SIGKILL on c-0 (rank 0)" in last, result.output
    status = json.loads(cli("--format", "json", "job", "status", result.stdout.splitlines()[0]).stdout)
    assert status["cause"].startswith("killed (out of memory?)"), status
    assert not any("gcpgpu-entrypoint" in (row["message"] or "") for row in status["per_node"]), status["per_node"]
    assert status["error"].startswith("node c-0 (rank 0) exited with status 137: killed"), status["error"]
