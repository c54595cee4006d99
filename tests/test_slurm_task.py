"""A Slurm task on a node of Google Cloud runs the job's container as the node's job agent does: the same
script (templates/job_agent.sh.j2, through jobs/cluster/deliver.py's agent_script), with its rank and rendezvous
from Slurm's allocation, a requeued attempt resuming, and the container's exit code as the task's.

Run against test_node_scripts.py's stub docker and fake metadata server; bash -n and shellcheck as there.
"""

from __future__ import annotations

import json
import subprocess

import pytest
from test_node_scripts import docker_calls, lint, metadata, stubs

from gcpgpu.slurm.task import command

__all__ = ["metadata"]  # the fixture, imported for this module's tests
JOB = {"id": "train-abc123", "name": "train", "image": "us-central1-docker.pkg.dev/p/r/t:1", "command": [],
       "args": ["--steps", "3", "a b; rm -rf /", "--ckpt-dir", "gs://b/c"], "env": {"X": "$(id)"}, "mounts": [], "nnodes": 2,
       "machine_type": "a3-megagpu-8g", "bundled_trainer": True, "timeout": 0}
SLURM = {"SLURM_NODEID": "1", "SLURM_NNODES": "2", "SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "s-[0-1]",
         "SLURMD_NODENAME": "s-1"}


@pytest.fixture
def scontrol(tmp_path, monkeypatch):
    """scontrol show hostnames, as Slurm expands the allocation's node list."""
    bin_dir = tmp_path / "slurm-bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text("#!/bin/sh\nprintf 's-0\\ns-1\\n'\n")
    (bin_dir / "scontrol").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{__import__('os').environ['PATH']}")


def task_script(tmp_path, restarts: int) -> str:
    got = command({**JOB, "emulated": False}, {**SLURM, "SLURM_RESTART_COUNT": str(restarts)}, str(tmp_path / "x"))
    assert not isinstance(got, str), got
    argv, script = got
    # Run in the host's namespaces (the daemons run in gcpgpu's image), without a fork: Slurm signals the agent.
    assert argv == ["nsenter", "--target", "1", "--mount", "--uts", "--ipc", "--net", "--", "bash", str(tmp_path / "x")]
    return str(script)


def test_a_slurm_tasks_script_passes_bash_n_and_shellcheck(tmp_path, scontrol):
    lint(tmp_path, task_script(tmp_path, 0))


@pytest.mark.parametrize("code", [0, 3])
def test_a_slurm_task_runs_the_jobs_container_with_slurms_rendezvous_and_ends_with_its_code(tmp_path, scontrol,
                                                                                            metadata, code):
    script = tmp_path / "task.sh"
    script.write_text(task_script(tmp_path, 1))  # requeued once: attempt 1 resumes
    # The RxDM ready at its first look: its wait (2 s a look) is test_node_scripts.py's, not the task's.
    env = {**stubs(tmp_path, metadata), "STUB_EXIT": str(code), "STUB_RXDM": "ok", "STUB_RXDM_READY_AT": "1"}
    done = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == code, done.stderr
    run = next(c for c in docker_calls(tmp_path) if c[0] == "run" and "gcpgpu-job-train-abc123" in c)
    assert {"NODE_RANK=1", "NNODES=2", "MASTER_ADDR=s-0", "MASTER_PORT=29507", "GCPGPU_RESUME=1",
            "GCPGPU_RESTART=1", "X=$(id)"} <= set(run)
    # one argument each, never through a shell; resumed from its --ckpt-dir
    assert run[-6:] == ["--steps", "3", "a b; rm -rf /", "--ckpt-dir", "gs://b/c", "--resume"]
    assert metadata.guest["gcpgpu/job-id"] == "train-abc123-r1"
    assert json.dumps(metadata.guest["gcpgpu/state"]) == json.dumps("SUCCEEDED" if code == 0 else "FAILED")


def test_a_real_nodes_batch_script_hands_the_job_unchanged_to_every_node_with_sbcast(tmp_path):
    """Real nodes share no folder and the batch script runs on the allocation's first node: the script carries
    the job and sbcast copies it to the path every task reads (the emulator's nodes share one folder instead)."""
    from gcpgpu.resources import render

    job = {**JOB, "env": {"X": "$(id) `id` 'q' \"d\" \\ $HOME", "Y": "line\nGCPGPU_JOB\nend"}}
    dest = tmp_path / "jobs" / "train-abc123.json"
    text = render("slurm_job.sh.j2", job_id="train-abc123", python="/opt/venv/bin/python", job_file=str(dest),
                  job_json=json.dumps(job))
    lint(tmp_path, text)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sbcast").write_text('#!/bin/sh\n[ "$1" = --force ] && mkdir -p "$(dirname "$3")" && cp "$2" "$3"\n')
    (bin_dir / "srun").write_text(f'#!/bin/sh\necho "$@" > {tmp_path}/srun.args\n')
    for stub in ("sbcast", "srun"):
        (bin_dir / stub).chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path)}
    done = subprocess.run(["bash", "-c", text], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(dest.read_text()) == job
    assert (tmp_path / "srun.args").read_text().split()[-3:] == ["-m", "gcpgpu.slurm.task", str(dest)]
    emulated = render("slurm_job.sh.j2", job_id="j", python="python", job_file=str(dest), job_json="")
    assert "sbcast" not in emulated and "exec srun" in emulated
