"""A lost host loses everything on it (issue 23, item 3): torchrun starts its workers in sessions of
their own, and a host error must end them too, as a dead machine would."""

from __future__ import annotations

import os
import sys

import pytest
from helpers import wait_for

from gcpgpu.fakes.host.runner import ReplicaSpec, Runner

# A replica shaped like torchrun: it starts a worker in a session of its own, says the worker's pid,
# and waits. The worker (like a trainer busy in a collective) ignores SIGTERM and would go on for a minute.
LAUNCHER = """
import subprocess, sys, time
worker = subprocess.Popen([sys.executable, "-c",
                           "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"],
                          start_new_session=True)
print(worker.pid, flush=True)
time.sleep(60)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie (dead, not yet reaped by its new parent) is gone too
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"


def _worker(run) -> int:
    """The pid the launcher printed once it started its worker (waits for that line)."""
    wait_for(lambda: any(line.text.strip().isdigit() for line in run.log_lines()), 30, "the worker's pid")
    return int(next(line.text for line in run.log_lines() if line.text.strip().isdigit()))


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads the process tree from /proc")
@pytest.mark.parametrize("grace_s", [0.0, 0.5], ids=["host-error", "preemption-notice"])
def test_a_lost_host_kills_workers_that_left_the_replicas_session(tmp_path, grace_s):
    """A host error kills at once; a preemption sends SIGTERM (the launcher dies, its worker is orphaned)
    and SIGKILL after the notice, which must still reach the orphan."""
    runner = Runner(root=tmp_path)
    try:
        run = runner.start("job-1", [ReplicaSpec("node-0", [sys.executable, "-c", LAUNCHER], {})])
        worker = _worker(run)
        assert _alive(worker)
        assert os.getsid(worker) != os.getsid(run.replicas[0].popen.pid)  # out of the replica's session

        runner.lose("job-1", grace_s, "lost")
        run.wait(30)
        wait_for(lambda: not _alive(worker), 10, "the worker gone with its host")
        assert run.state == "failed"
    finally:
        runner.reset()


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads the process tree from /proc")
def test_a_replica_whose_first_process_dies_takes_its_workers_with_it(tmp_path):
    """Issue 38: torchrun killed (SIGKILL, as the OOM killer does) left its worker training on in a session of
    its own, and the job's other nodes with it, for as long as the job lasted. A container ends with its first
    process: whatever it started is killed then."""
    runner = Runner(root=tmp_path)
    try:
        run = runner.start("job-1", [ReplicaSpec("node-0", [sys.executable, "-c", LAUNCHER], {})])
        worker = _worker(run)
        # The runner lists a replica's processes every half second: until it has seen it.
        wait_for(lambda: worker in {pid for pid, _start in run.replicas[0].family}, 30, "the runner seeing the worker")
        os.kill(run.replicas[0].popen.pid, 9)
        assert run.wait(30) and run.state == "failed" and run.failure[1] == -9
        wait_for(lambda: not _alive(worker), 10, "the worker gone with its launcher")
    finally:
        runner.reset()
