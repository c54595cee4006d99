"""A user's own command (issue 50): run as written (a line with shell syntax under `sh -c`), heard while it is
followed (its lines under `--wait` and `job follow`, by rank), and its death by SIGKILL told as such."""

from __future__ import annotations

import json
import re
import shutil
import time

import pytest
from click.testing import CliRunner
from helpers import wait_for

from gcpgpu.cli import main
from gcpgpu.errors import UsageProblem
from gcpgpu.fakes.guest.slurm import slurm_installed
from gcpgpu.jobs.usercode import command_words
from gcpgpu.times import parse_timestamp

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


# A user's training loop: its own step lines (README "Goodput"'s pattern), one rank's after the other's.
STEPS = "python -c 'import os\nfor i in range(3): print(f\"step {i} loss {1 / (i + 1):.3f}\", flush=True)'"


@pytest.mark.slow
@needs_bwrap
@pytest.mark.parametrize("scheduler", ["agent", "slurm", "vertex"])
def test_a_user_commands_lines_stream_under_wait_after_their_rank(gcp, scheduler):
    """Issue 50: `job submit --wait` printed only state lines for a --command job (cluster or Slurm); its
    `step N loss X` lines were in `job logs` only, while the bundled trainer's streamed."""
    if scheduler == "slurm" and slurm_installed() is not None:
        pytest.skip(str(slurm_installed()))
    where = ["--vertex", "--machine-type", "a2-highgpu-1g", "--nodes", "2"]
    if scheduler != "vertex":
        up = cli("cluster", "up", "s", "--machine-type", "a2-highgpu-1g", "--nodes", "2", "--zone", "us-central1-a",
                 *(["--scheduler", "slurm"] if scheduler == "slurm" else []), "--yes")
        assert up.exit_code == 0, up.output
        where = ["--cluster", "s"]
    result = cli("job", "submit", *where, "--wait", "--command", STEPS)
    assert result.exit_code == 0, result.output
    job_id = result.stdout.splitlines()[0]
    err = result.stderr
    # Each node's lines, after its rank (a Slurm job whose nodes its state does not name: after the node).
    for writer in ("rank 0|s-0", "rank 1|s-1") if scheduler == "slurm" else ("rank 0", "rank 1"):
        for i, loss in enumerate(("1.000", "0.500", "0.333")):
            assert re.search(rf"^\d\d:\d\d:\d\d {job_id}: \[(?:{writer})\] step {i} loss {loss}$", err, re.M), err
    assert err.index(f"{job_id}: [") < err.index(f"{job_id}: SUCCEEDED")
    assert "gcpgpu-entrypoint:" not in err and "gcpgpu emulator:" not in err  # gcpgpu's own notes are not its output


@pytest.mark.slow
@needs_bwrap
def test_job_follow_joining_late_shows_the_backlog_at_its_own_times(cluster):
    """Issue 50: a user's lines stream under `job follow` too; those written before it joined keep their times."""
    submitted = cli("job", "submit", "--cluster", cluster, "--command", "echo step 7 loss 0.125")
    assert submitted.exit_code == 0, submitted.output
    job_id = submitted.stdout.splitlines()[0]
    wait_for(lambda: json.loads(cli("--format", "json", "job", "status", job_id).stdout)["state"] == "SUCCEEDED",
             60, "the job's end")
    written = [json.loads(line) for line in cli("--format", "json", "job", "logs", job_id).stdout.splitlines()]
    at = {e["task"]: parse_timestamp(e["time"]) for e in written if e["message"] == "step 7 loss 0.125"}
    assert set(at) == {"c-0", "c-1"}, written
    stamp = {task: time.strftime("%H:%M:%S", time.localtime(t)) for task, t in at.items()}
    wait_for(lambda: time.strftime("%H:%M:%S") not in stamp.values(), 5, "the clock past the lines' second")
    followed = cli("job", "follow", job_id)
    assert followed.exit_code == 0, followed.output
    for rank, task in ((0, "c-0"), (1, "c-1")):
        assert f"{stamp[task]} {job_id}: [rank {rank}] step 7 loss 0.125" in followed.stderr, followed.stderr


def test_arguments_after_dashes_for_a_line_run_by_a_shell_are_refused_before_any_call():
    """sh -c would take them as $0, $1 ...: the command would never see them."""
    result = cli("job", "submit", "--vertex", "--machine-type", "a2-highgpu-1g", "--command",
                 "cd /workdir && python train.py", "--", "--lr", "3e-4")
    assert result.exit_code == 2, result.output
    assert "--command runs under sh -c" in result.output
    assert "--command 'cd /workdir && python train.py --lr 3e-4'" in result.output


@pytest.mark.parametrize("line", [
    "gcpgpu-entrypoint: setup failed (exit 3): pip install -r requirements.txt",
    "gcpgpu-entrypoint: GCPGPU_WORKDIR: cannot unpack gs://b/w.tgz",
    "gcpgpu-entrypoint: secret HF_TOKEN (projects/p/secrets/hf): permission denied",
    "gcpgpu-entrypoint: cannot run train.sh: No such file or directory",
    "gcpgpu-entrypoint: checkpoints (GCPGPU_CKPT_DIR): no output directory",
    "gcpgpu-entrypoint: a2-highgpu-1g (metadata): NCCL profile none on gce (metadata server)",
])
def test_the_emulator_and_the_tool_read_the_entrypoints_refusals_alike(line):
    """fakes/ imports nothing of the tool: lastwords.py says jobs/logs.py's refusal pattern again; they agree."""
    from gcpgpu.fakes.host.lastwords import banner
    from gcpgpu.jobs.logs import entrypoint_refusal

    assert banner(line) is not entrypoint_refusal(line)  # a refusal is last words; a note never is
