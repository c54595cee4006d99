"""Multi-process jobs need no --parallel, and a failed job names its cause: the trainer's first error line.

Through the CLI against the emulator, which runs the real trainer (CPU, gloo) as Vertex replicas
and as cluster nodes. The two repros of issue 16: a --data file too short for one sequence, and
--data-dtype uint32 without --vocab-size; both pass submit (the file lives where the job runs).
"""

from __future__ import annotations

import json
import shutil

import pytest
from click.testing import CliRunner

from gcpgpu.cli import main
from gcpgpu.jobs.logs import first_error_line

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
