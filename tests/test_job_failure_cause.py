"""Multi-process jobs need no --parallel, and a failed job names its cause: the trainer's first error line.

Through the CLI against the emulator, which runs the real trainer (CPU, gloo) as Vertex replicas
and as cluster nodes. The two repros of issue 16: a --data file too short for one sequence, and
--data-dtype uint32 without --vocab-size; both pass submit (the file lives where the job runs).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import threading

import pytest
from click.testing import CliRunner
from helpers import wait_for

from gcpgpu.cli import main
from gcpgpu.fakes.host.procs import descendants
from gcpgpu.jobs.logs import first_error, first_error_line

GLOBAL = ["--project", "test-proj", "--region", "us-central1"]
SMALL = ["--model", "tiny", "--steps", "2", "--batch-size", "4", "--seq-len", "16", "--log-every", "1"]


def cli(*argv: str):
    return CliRunner().invoke(main, [*GLOBAL, *argv])


@pytest.fixture
def short_data(tmp_path) -> str:
    path = tmp_path / "short.bin"
    path.write_bytes(bytes(range(24)))  # 12 uint16 tokens: less than one sequence
    return str(path)


@pytest.fixture
def cluster(gcp) -> str:
    up = cli("cluster", "up", "c", "--machine-type", "a2-highgpu-1g", "--nodes", "2", "--zone", "us-central1-a",
             "--yes")
    assert up.exit_code == 0, up.output
    return "c"


# torchrun's report after a worker failed, around the worker's own words (torch 2.x shapes).
TORCHRUN_OUTPUT = """\
gcpgpu.trainer: CLUSTER_SPEC -> torchrun --nnodes 2 --nproc-per-node 1
W1123 05:00:00.000000 12 torch/distributed/run.py:766] Setting OMP_NUM_THREADS environment variable to 1
[rank0]: gcpgpu.trainer: error: --seq-len: 256 needs at least 257 tokens but /data/x.bin has 12
E1123 05:00:01.000000 12 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: 2)
Traceback (most recent call last):
  File "/usr/lib/python3.12/runpy.py", line 198, in _run_module_as_main
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
gcpgpu.trainer FAILED
------------------------------------------------------------
Root Cause (first observed failure):
gcpgpu.trainer: a worker failed: ChildFailedError
"""


def test_first_error_line_skips_the_launchers_report():
    assert first_error_line(TORCHRUN_OUTPUT.splitlines()) == (
        "gcpgpu.trainer: error: --seq-len: 256 needs at least 257 tokens but /data/x.bin has 12")


def test_first_error_line_takes_an_exception_and_prefers_it_to_a_peers_note():
    lines = ["step 1 | loss 5.1",
             "gcpgpu.trainer: rank 1: a collective failed: another rank has probably died or hung",
             "Traceback (most recent call last):", '  File "train.py", line 3, in <module>',
             "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"]
    assert first_error_line(lines) == "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    assert first_error_line(lines[:2]).startswith("gcpgpu.trainer: rank 1: a collective failed")
    assert first_error_line(["all good", "gcpgpu.trainer: a worker failed: ChildFailedError"]) is None


# Node c-1's worker killed for memory (torchrun's report of it), and node c-0's rank told by its collective.
KILLED = [
    ("c-0", "step      3 | loss 10.1 | lr 6.00e-06 | 196 tok/s/gpu | mfu n/a | 652.3 ms | data 2.3% | mem 571.6 MiB"),
    ("c-0", "gcpgpu.trainer: rank 0: a collective failed: another rank has probably died or hung (see its log)"),
    ("c-0", "RuntimeError: Connection closed by peer [127.0.0.1]:15245"),
    ("c-1", "E1127 22:25:19.434000 28669 torch/distributed/elastic/multiprocessing/api.py:1002] failed "
            "(exitcode: -9) local_rank: 0 (pid: 28750) of binary: /usr/bin/python"),
    ("c-1", "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:"),
    ("c-1", "======================================================"),
    ("c-1", "gcpgpu.trainer FAILED"),
    ("c-1", "Root Cause (first observed failure):"),
    ("c-1", "[0]:"),
    ("c-1", "  rank      : 1 (local_rank: 0)"),
    ("c-1", "  exitcode  : -9 (pid: 28750)  (SIGKILL)"),
    ("c-1", "  traceback : Signal 9 (SIGKILL) received by PID 28750"),
    ("c-1", "======================================================"),
]


def test_a_worker_killed_by_sigkill_is_the_cause_with_its_rank_and_node():
    """Issue 38: a rank killed for memory left CAUSE empty (it prints nothing; torchrun's report was all noise)
    while the errors its death set off on the other ranks came first."""
    assert first_error(KILLED) == "killed (out of memory?): rank 1 on c-1 got SIGKILL"
    assert first_error_line(text for _node, text in KILLED) == "killed (out of memory?): rank 1 got SIGKILL"
    # Without the kill, the peer's exception is what there is; the report's lines are never a cause.
    assert first_error(KILLED[:5]) == "RuntimeError: Connection closed by peer [127.0.0.1]:15245"
    assert first_error([p for p in KILLED if p[0] == "c-1" and "-9" not in p[1] and "Signal" not in p[1]]) is None


def test_a_nodes_message_is_never_a_banner_and_the_first_node_to_fail_is_the_error():
    from gcpgpu.jobs.logs import killed_node, launcher_noise

    for text in ("======", "gcpgpu.trainer FAILED", "Failures:", "<NO_OTHER_FAILURES>",
                 "E1127 22:25:19.434000 28669 api.py:1002] failed (exitcode: 1) local_rank: 0 (pid: 1) of binary: x"):
        assert launcher_noise(text), text
    rows = [{"node": "c-0", "rank": 0, "state": "FAILED", "message": "gcpgpu.trainer: rank 0: a collective failed"},
            {"node": "c-1", "rank": 1, "state": "FAILED", "message": "killed (out of memory?): SIGKILL"}]
    assert killed_node(rows) == "killed (out of memory?): SIGKILL on c-1 (rank 1)"
    assert killed_node(rows[:1]) is None


def test_the_error_names_the_node_that_failed_itself_over_a_peer_that_ended_in_the_same_second():
    """CI: rank 1 was killed and rank 0's collective failed within the same (whole) second; ERROR named c-0."""
    from gcpgpu.jobs.cluster.nodes import first_failed

    def row(node, rank, message, ended="2026-11-28T01:00:05Z", status="RUNNING", state="FAILED"):
        return {"node": node, "rank": rank, "state": state, "message": message, "ended": ended, "node_status": status}

    peer = row("c-0", 0, "gcpgpu.trainer: rank 0: a collective failed: another rank has probably died")
    killed = row("c-1", 1, "killed (out of memory?): rank 1 got SIGKILL")
    assert first_failed([peer, killed])["node"] == "c-1"
    # A peer error still names its node when nothing else failed, and a lost node comes before either.
    assert first_failed([peer, row("c-1", 1, None, ended=None, state="RUNNING")])["node"] == "c-0"
    lost = row("c-2", 2, "node is TERMINATED: lost while the job ran", ended=None, status="TERMINATED")
    assert first_failed([peer, killed, lost])["node"] == "c-2"
    # Otherwise the earliest end, then the lowest rank.
    early = row("c-1", 1, "RuntimeError: boom", ended="2026-11-28T01:00:01Z")
    assert first_failed([row("c-0", 0, "ValueError: x"), early])["node"] == "c-1"
    assert first_failed([row("c-1", 1, "ValueError: x"), row("c-0", 0, "ValueError: y")])["node"] == "c-0"


SETUP_OUTPUT = """\
gcpgpu-entrypoint: workdir: gs://b/gcpgpu-staging/workdir-0a.tar.gz unpacked into /workdir
gcpgpu-entrypoint: setup: pip install -r requirements.txt
Collecting torchx
ModuleNotFoundError: No module named 'setuptools'
ERROR: No matching distribution found for torchx
gcpgpu-entrypoint: setup failed (exit 1): ERROR: No matching distribution found for torchx
"""


def test_first_error_line_is_the_entrypoints_own_refusal_when_the_setup_or_its_inputs_fail():
    """Issue 25: a failed --setup is the job's CAUSE, even where its output held an exception line;
    so are the entrypoint's refusals of the job's code, mounts and secrets."""
    assert first_error_line(SETUP_OUTPUT.splitlines()) == (
        "gcpgpu-entrypoint: setup failed (exit 1): ERROR: No matching distribution found for torchx")
    for refusal in ("gcpgpu-entrypoint: GCPGPU_WORKDIR: gs://b/w.tar.gz is not there (/gcs/b/w.tar.gz is missing)",
                    "gcpgpu-entrypoint: GCPGPU_MOUNTS: gs://b/in on /data: nothing at gs://b/in to read",
                    "gcpgpu-entrypoint: secret HF_TOKEN (projects/p/secrets/hf/versions/latest): 403 denied",
                    "gcpgpu-entrypoint: cannot run trian.py: No such file or directory"):
        assert first_error_line(["gcpgpu-entrypoint: node 0 of 2, master h:1 (CLUSTER_SPEC), 1 processes",
                                 refusal]) == refusal
    # Its notes and warnings are not causes.
    assert first_error_line(["gcpgpu-entrypoint: setup: exit 1", "gcpgpu-entrypoint: warning: starting anyway",
                             "gcpgpu-entrypoint: mount /data -> gs://b/in (read-only)"]) is None


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap (bwrap) is not installed: the emulator "
                    "cannot sandbox users' commands")
@pytest.mark.parametrize("target", ["vertex", "cluster"])
def test_a_failed_setup_is_the_jobs_cause_on_both_targets(gcp, target):
    where = ["--vertex", "--machine-type", "a2-highgpu-1g", "--nodes", "2"]
    if target == "cluster":
        up = cli("cluster", "up", "c", "--machine-type", "a2-highgpu-1g", "--nodes", "2", "--zone", "us-central1-a",
                 "--yes")
        assert up.exit_code == 0, up.output
        where = ["--cluster", "c"]
    setup = "echo Collecting torchx; echo 'ERROR: No matching distribution found for torchx' >&2; exit 7"
    result = cli("job", "submit", *where, "--wait", "--setup", setup, "--command", "python -c pass")
    assert result.exit_code == 1, result.output
    cause = "gcpgpu-entrypoint: setup failed (exit 7): ERROR: No matching distribution found for torchx"
    assert cause in result.stderr.strip().splitlines()[-1], result.output
    job_id = result.stdout.splitlines()[0]
    assert json.loads(cli("--format", "json", "job", "status", job_id).stdout)["cause"] == cause
    assert "CAUSE" in cli("job", "status", job_id).stdout


def test_explicit_parallel_none_for_many_processes_is_refused_before_any_call(gcp):
    result = cli("job", "submit", "--vertex", "--machine-type", "a2-highgpu-1g", "--nodes", "2",
                 "--", "--model", "tiny", "--parallel", "none")
    assert result.exit_code == 2
    assert result.stderr.strip() == ("Error: trainer arguments: --parallel none runs one process but the job "
                                     "launches 2 (nodes x GPUs); drop --parallel (auto picks ddp) or use ddp or fsdp")
    assert gcp.requests.all() == []


@pytest.mark.slow
def test_two_replicas_without_parallel_train_with_ddp(gcp):
    """The issue's line: `job submit --vertex --nodes 2 --wait -- --model tiny` (no --parallel) succeeds."""
    result = cli("job", "submit", "--vertex", "--machine-type", "a2-highgpu-1g", "--nodes", "2", "--wait",
                 "--", *SMALL)
    assert result.exit_code == 0, result.output
    job_id = result.stdout.splitlines()[0]
    assert "ddp x 2 on cpu" in cli("job", "logs", job_id).output


@pytest.mark.slow
def test_vertex_job_with_too_short_data_names_the_trainers_error(gcp, short_data):
    result = cli("job", "submit", "--vertex", "--machine-type", "a2-highgpu-1g", "--nodes", "2", "--wait",
                 "--", "--model", "tiny", "--data", short_data)
    assert result.exit_code == 1, result.output
    final = result.stderr.strip().splitlines()[-1]
    assert "ended FAILED: gcpgpu.trainer: error: --seq-len: 256 needs at least 257 tokens" in final, final
    assert "ChildFailedError" not in final
    status = json.loads(cli("--format", "json", "job", "status", result.stdout.splitlines()[0]).stdout)
    assert status["cause"].startswith("gcpgpu.trainer: error: --seq-len: 256 needs at least 257 tokens")
    assert short_data in status["cause"]


@pytest.mark.slow
def test_cluster_job_with_too_short_data_names_the_trainers_error(cluster, short_data):
    result = cli("job", "submit", "--cluster", cluster, "--wait", "--", "--model", "tiny", "--data", short_data)
    assert result.exit_code == 1, result.output
    final = result.stderr.strip().splitlines()[-1]
    assert "ended FAILED: gcpgpu.trainer: error: --seq-len: 256 needs at least 257 tokens" in final, final
    job_id = result.stdout.splitlines()[0]
    table = cli("job", "status", job_id)
    assert "CAUSE" in table.stdout and "needs at least 257 tokens" in table.stdout


@pytest.mark.slow
def test_cluster_job_with_uint32_data_and_no_vocab_size_names_the_option(cluster, short_data):
    result = cli("job", "submit", "--cluster", cluster, "--wait",
                 "--", "--model", "tiny", "--data", short_data, "--data-dtype", "uint32")
    assert result.exit_code == 1, result.output
    final = result.stderr.strip().splitlines()[-1]
    assert ("ended FAILED: gcpgpu.trainer: error: --vocab-size: required with --data-dtype uint32" in final), final
    status = json.loads(cli("--format", "json", "job", "status", result.stdout.splitlines()[0]).stdout)
    assert status["cause"].startswith("gcpgpu.trainer: error: --vocab-size: required with --data-dtype uint32")
    # The ERROR column names the node and its status, never torchrun's closing banner as if it were the error.
    assert status["error"].startswith("node ") and "====" not in status["error"], status["error"]


def _node_runs(gcp) -> dict[str, object]:
    """The emulated nodes' runs of the cluster's job, by node name."""
    return {r.id.rsplit("/", 1)[1]: r for r in gcp.jobs.runner.all_runs() if r.id.startswith("cluster/")}


@pytest.mark.slow
@pytest.mark.parametrize("victim", ["worker", "launcher"])
def test_a_rank_killed_by_sigkill_is_named_with_its_node(gcp, cluster, victim):
    """Issue 38: a rank killed for memory left CAUSE `-` and torchrun's "=====" banner as the MESSAGE. Killed here
    as the OOM killer kills: the worker (torchrun reports it), or torchrun itself (the container's first process)."""
    def kill_rank_1() -> None:
        wait_for(lambda: "c-0" in (runs := _node_runs(gcp)) and "c-1" in runs
                 and any(line.text.startswith("step") for line in runs["c-0"].log_lines()), 120, "training")
        launcher = _node_runs(gcp)["c-1"].replicas[0].popen.pid
        worker = wait_for(lambda: max((pid for pid, _ in descendants(launcher)), default=None), 30, "the worker")
        if victim == "launcher":  # once the runner knows the worker (it lists the processes every half second)
            wait_for(lambda: any(pid == worker for pid, _ in _node_runs(gcp)["c-1"].replicas[0].family), 30)
        os.kill(launcher if victim == "launcher" else worker, signal.SIGKILL)

    threading.Thread(target=kill_rank_1, daemon=True).start()
    result = cli("job", "submit", "--cluster", cluster, "--wait", "--env", "GCPGPU_METRICS=0", "--",
                 "--model", "tiny", "--data", "synthetic", "--steps", "100000", "--batch-size", "8", "--seq-len", "32",
                 "--log-every", "1")
    assert result.exit_code == 1, result.output
    cause = ("killed (out of memory?): rank 1 on c-1 got SIGKILL" if victim == "worker" else
             "killed (out of memory?): SIGKILL on c-1 (rank 1)")
    assert f"ended FAILED: {cause}" in result.stderr.strip().splitlines()[-1], result.output
    assert all(run.done for run in _node_runs(gcp).values())  # nothing of the job runs on
    status = json.loads(cli("--format", "json", "job", "status", result.stdout.splitlines()[0]).stdout)
    assert status["cause"] == cause and status["error"].startswith("node c-1 (rank 1) exited"), status
    said = {row["node"]: row["message"] for row in status["per_node"]}
    assert said["c-1"].startswith("killed (out of memory?)"), said
    assert not any("==" in (m or "") for m in said.values()), said


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap (bwrap) is not installed: the emulator "
                    "cannot sandbox users' commands")
def test_a_failed_rank_stops_the_others_at_once_and_cancel_says_what_it_stops(gcp, cluster):
    """Issue 38: the other ranks ran on after the job was FAILED, and `job cancel` then said it had ended. Rank 1
    fails at once here; rank 0 would wait ten minutes (as a rank blocked in a collective waits out its timeout)."""
    command = "bash -c 'if [ $NODE_RANK = 1 ]; then echo \"ValueError: rank 1 gave up\" >&2; exit 3; fi; sleep 600'"
    followed = cli("job", "submit", "--cluster", cluster, "--wait", "--command", command)
    assert followed.exit_code == 1, followed.output
    assert "ended FAILED: ValueError: rank 1 gave up" in followed.stderr.strip().splitlines()[-1], followed.output
    assert all(run.done for run in _node_runs(gcp).values()), "rank 0 ran on after the job had failed"
    status = json.loads(cli("--format", "json", "job", "status", followed.stdout.splitlines()[0]).stdout)
    assert [r["state"] for r in status["per_node"]] == ["CANCELLED", "FAILED"], status["per_node"]

    # Nobody follows this one: `job cancel` stops the rank still running, and says so.
    alone = cli("job", "submit", "--cluster", cluster, "--command", command)
    job_id = alone.stdout.splitlines()[0]
    wait_for(lambda: json.loads(cli("--format", "json", "job", "status", job_id).stdout)["state"] == "FAILED", 60)
    cancelled = cli("job", "cancel", job_id)
    assert cancelled.exit_code == 0, cancelled.output
    assert cancelled.stderr.strip() == f"Job {job_id} had already ended FAILED; stopping it on c-0, which still ran it."
    wait_for(lambda: all(run.done for run in _node_runs(gcp).values()), 60, "rank 0 to stop")
