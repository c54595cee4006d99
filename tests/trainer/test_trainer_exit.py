"""`python -m gcpgpu.trainer` ends without the interpreter's teardown (gcpgpu/trainer/__main__.py exit_now),
and still ends as a normal exit does: its code, threads joined, atexit handlers run, output flushed."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

PROBE = """\
import atexit, sys, threading, time
from gcpgpu.trainer.__main__ import exit_now

class Last:
    def __del__(self):  # an object's finalizer: teardown would run it, exit_now does not
        print("torn down", flush=True)

keep = Last()
atexit.register(lambda: print("atexit ran"))
threading.Thread(target=lambda: (time.sleep(0.2), print("thread finished"))).start()
print("buffered", end=" ")  # a pipe is block-buffered: nothing written yet
exit_now(3)
"""


def test_exit_now_keeps_what_a_normal_exit_does_and_skips_the_teardown():
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}  # so stdout is block-buffered
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 3, done.stderr
    assert done.stdout.split() == ["buffered", "thread", "finished", "atexit", "ran"], done.stdout


TORCHRUN_PROBE = """\
import runpy, sys

class Last:
    def __del__(self):  # teardown would run it; gcpgpu.trainer.torchrun ends without one
        print("torn down", flush=True)

keep = Last()
sys.argv = ["torchrun", "--standalone", "--nproc-per-node", "1", sys.argv[1]]
runpy.run_module("gcpgpu.trainer.torchrun", run_name="__main__", alter_sys=True)
"""


@pytest.mark.parametrize(("worker_code", "expected"), [(0, 0), (3, 1)])
def test_the_emulators_torchrun_runs_torchruns_code_keeps_its_exit_code_and_skips_the_teardown(
        tmp_path, worker_code, expected):
    worker = tmp_path / "worker.py"
    worker.write_text(f"import os, sys\nprint('rank', os.environ['RANK'], flush=True)\nsys.exit({worker_code})\n")
    done = subprocess.run([sys.executable, "-c", TORCHRUN_PROBE, str(worker)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == expected, done.stderr
    assert "rank 0" in done.stdout  # torchrun started its worker
    assert "torn down" not in done.stdout
    if worker_code:  # torchrun's own failure report, as `python -m torch.distributed.run` prints it
        assert "ChildFailedError" in done.stderr and "exitcode  : 3" in done.stderr


def test_ctrl_c_stops_after_the_step_saves_and_says_so_in_lines_not_a_traceback(small_text, tmp_path):
    """Issue 51: Ctrl-C on the trainer printed a 20-line KeyboardInterrupt traceback and saved nothing. The first
    Ctrl-C now stops as a SIGTERM does (after the step, a checkpoint saved); a second stops at once."""
    import signal

    from _trainer_helpers import TINY, start

    (proc,) = start(1, [*TINY, "--data", str(small_text), "--steps", "100000", "--ckpt-dir", str(tmp_path / "ckpt")],
                    env={"PYTHONUNBUFFERED": "1"})
    try:
        for line in proc.stdout:  # the event: its first step line
            if "step" in line and "loss" in line:
                break
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=300)
    finally:
        proc.kill()
    assert proc.returncode == 143, err
    assert "Ctrl-C: stopping after this step and saving" in err and "Traceback" not in err, err
    assert "Ctrl-C: stopped after step" in out + err and "checkpoint saved" in out + err, (out, err)
    assert [p.name for p in (tmp_path / "ckpt").iterdir() if p.name.startswith("step_")], "no checkpoint saved"


def test_a_second_ctrl_c_is_one_line_and_exit_130(monkeypatch, capsys):
    import gcpgpu.trainer.train as train_module
    from gcpgpu.trainer.__main__ import main

    def interrupted(argv):
        raise KeyboardInterrupt

    monkeypatch.setattr(train_module, "main", interrupted)
    assert main(["--model", "tiny"]) == 130
    assert capsys.readouterr().err == "gcpgpu.trainer: Ctrl-C again: stopped at once, without saving\n"
