"""Launching 1..N trainer processes on CPU (gloo) the way torchrun would, and reading their JSON logs."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# Small and fast on 2 cores: the tiny model on byte tokens (vocab 256), 8 x 64 tokens per step.
TINY = ["--model", "tiny", "--batch-size", "8", "--seq-len", "64", "--lr", "1e-3", "--warmup-steps", "2",
        "--log-every", "1"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Proc:
    rank: int
    returncode: int
    stdout: str
    stderr: str


def base_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                        "CLUSTER_SPEC", "AIP_CHECKPOINT_DIR", "GCPGPU_TRAINER_ALLOW_CPU",
                        "GCPGPU_NPROC_PER_NODE", "GCPGPU_CKPT_LOCAL_DIR")
           and not k.startswith("GCPGPU_TRAINER_TEST_")}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env["OMP_NUM_THREADS"] = "1"  # 2 ranks on 2 cores; also the same thread count for every run compared
    env.update(extra or {})
    return env


def start(nproc: int, args: list[str], *, module: str = "gcpgpu.trainer", env: dict[str, str] | None = None,
          cwd: Path | None = None) -> list[subprocess.Popen]:
    """Start nproc ranks by hand (the variables torchrun would set), without waiting."""
    port = str(free_port())
    procs = []
    for rank in range(nproc):
        rank_env = base_env(env)
        if nproc > 1:
            rank_env.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(nproc),
                            LOCAL_WORLD_SIZE=str(nproc), MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
        procs.append(subprocess.Popen([sys.executable, "-m", module, *args], env=rank_env, cwd=cwd or REPO,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    return procs


# How long a launch may take before it counts as hung: generous, so that a loaded machine (two copies of
# the suite, other work) slows the tests down without failing them.
HUNG_S = 600


def wait(procs: list[subprocess.Popen], timeout: float = HUNG_S) -> list[Proc]:
    out = []
    for rank, p in enumerate(procs):
        try:
            stdout, stderr = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
        out.append(Proc(rank, p.returncode, stdout, stderr))
    return out


def run(nproc: int, args: list[str], *, module: str = "gcpgpu.trainer", env: dict[str, str] | None = None,
        timeout: float = HUNG_S, check: bool = True) -> list[Proc]:
    """Run nproc ranks to the end; with check, fail the test showing the output of any rank that failed."""
    procs = wait(start(nproc, args, module=module, env=env), timeout)
    if check:
        for p in procs:
            assert p.returncode == 0, f"rank {p.rank} exited {p.returncode}\n{p.stdout}\n{p.stderr}"
    return procs


def run_many(nproc: int, *runs: list[str], timeout: float = HUNG_S) -> list[Proc]:
    """One launch of nproc ranks that trains each trainer command line in turn, in one process group
    (_train_many.py): for tests that compare runs, torch's start-up paid once per rank, not once per run."""
    env = {"PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), str(REPO), os.environ.get("PYTHONPATH", "")])}
    args = [a for i, r in enumerate(runs) for a in ([] if i == 0 else ["--then"]) + r]
    return run(nproc, args, module="_train_many", env=env, timeout=timeout)


def read_log(path: Path, kind: str | None = None) -> list[dict]:
    """Per-step records of a --log-json file, or its records of one kind ("summary", "checkpoint")."""
    return [r for r in map(json.loads, path.read_text().splitlines()) if r.get("kind") == kind]


def losses(path: Path) -> dict[int, float]:
    return {r["step"]: r["loss"] for r in read_log(path)}
