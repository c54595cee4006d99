"""`python -m gcpgpu.trainer` ends without the interpreter's teardown (gcpgpu/trainer/__main__.py exit_now),
and still ends as a normal exit does: its code, threads joined, atexit handlers run, output flushed."""

from __future__ import annotations

import os
import subprocess
import sys

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
