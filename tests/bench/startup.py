"""Benchmark: what a gcpgpu command costs from start to exit, against a started emulator.

    python tests/bench/startup.py [--runs 5] [--vs OTHER_TREE]

Each command runs as a user runs it (the `gcpgpu` console script, a fresh interpreter) against an
emulator in its own process that holds one 2-node cluster. Printed per command: the median wall
seconds and the median CPU seconds (user + system) of the finished process, over --runs runs. Most of
a short command is its start-up (imports), so the CPU figure is the steadier one on a shared machine.

--vs OTHER_TREE times the same commands with gcpgpu taken from another checkout (PYTHONPATH), the two
in turn, so both columns come from the same minutes.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

import gcpgpu

TREE = os.path.dirname(os.path.dirname(os.path.abspath(gcpgpu.__file__)))
GCPGPU = os.path.join(os.path.dirname(sys.executable), "gcpgpu")
PROJECT = "bench-project"

COMMANDS = {
    "--help": ["--help"],
    "cluster status": ["--project", PROJECT, "cluster", "status", "demo"],
    "cluster list": ["--project", PROJECT, "cluster", "list"],
    "job list": ["--project", PROJECT, "job", "list"],
    "emulator info": ["emulator", "info"],
}

_EMULATOR = """
import sys
from gcpgpu.fakes.server import Emulator
emu = Emulator().start()
print(emu.address, flush=True)
sys.stdin.read()  # serve until the parent closes our stdin
emu.stop()
"""


def _run(args: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall, cpu) seconds of one `gcpgpu ARGS` run; fails loudly if the command does."""
    start = time.monotonic()
    proc = subprocess.Popen([GCPGPU, *args], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode() if proc.stderr else ""
    if proc.returncode != 0:
        raise SystemExit(f"gcpgpu {' '.join(args)} exited {proc.returncode}: {err.strip()[-500:]}")
    return wall, usage.ru_utime + usage.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--vs", metavar="OTHER_TREE", help="a second checkout to time the same commands from")
    opts = ap.parse_args()

    emu = subprocess.Popen([sys.executable, "-c", _EMULATOR], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                           text=True, cwd=TREE)
    try:
        address = emu.stdout.readline().strip()
        env = {**os.environ, "GCPGPU_EMULATOR": address}
        env.pop("PYTHONPATH", None)
        _run(["--project", PROJECT, "cluster", "up", "demo", "--machine-type", "a2-highgpu-1g", "--nodes", "2",
              "--region", "us-central1", "--yes"], env)
        trees = {"this tree": env}
        if opts.vs:
            trees[opts.vs] = {**env, "PYTHONPATH": os.path.abspath(opts.vs)}
        print(f"gcpgpu from {TREE}; {opts.runs} runs of each command, median seconds (wall / cpu)")
        print(f"{'command':<16}" + "".join(f"{name[-24:]:>28}" for name in trees))
        for label, args in COMMANDS.items():
            times: dict[str, list[tuple[float, float]]] = {name: [] for name in trees}
            _run(args, env)  # warm the disk cache once, not counted
            for _ in range(opts.runs):
                for name, tree_env in trees.items():  # in turn, so a drift in the machine's speed hits both
                    times[name].append(_run(args, tree_env))
            cells = [f"{statistics.median(w for w, _ in t):>8.2f} / {statistics.median(c for _, c in t):.2f} s"
                     for t in times.values()]
            print(f"{label:<16}" + "".join(f"{c:>28}" for c in cells), flush=True)
    finally:
        emu.stdin.close()
        emu.wait(timeout=30)


if __name__ == "__main__":
    main()
