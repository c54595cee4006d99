"""`python -m _train_many ARGS [--then [--remove PATH]... ARGS]...`: one launch of N ranks trains several
trainer command lines, one after another, in one process group (the ranks' `train()` calls as
`python -m gcpgpu.trainer` makes them). Before a run, rank 0 removes the paths its --remove names (a
checkpoint a resume must not find), and every rank waits until it has.

For tests that compare runs with each other: torch's start-up (seconds of CPU per process) is paid once
per rank instead of once per run. Each run builds its model, data and optimizer afresh from its own seed.
"""

from __future__ import annotations

import os
import shutil
import sys

from gcpgpu.trainer.__main__ import exit_now
from gcpgpu.trainer.checkpoint import barrier
from gcpgpu.trainer.config import ALLOW_CPU_ENV, parse_args
from gcpgpu.trainer.dist import leave_process_group, read_env
from gcpgpu.trainer.launch_checks import check_runtime
from gcpgpu.trainer.train import _machine_facts, train

THEN, REMOVE = "--then", "--remove"


def split_runs(argv: list[str]) -> list[tuple[list[str], list[str]]]:
    """[(paths to remove first, trainer args)] for each run."""
    runs: list[tuple[list[str], list[str]]] = [([], [])]
    it = iter(argv)
    for arg in it:
        if arg == THEN:
            runs.append(([], []))
        elif arg == REMOVE:
            runs[-1][0].append(next(it))
        else:
            runs[-1][1].append(arg)
    return runs


def main(argv: list[str]) -> int:
    env = read_env()
    allow_cpu = os.environ.get(ALLOW_CPU_ENV, "") not in ("", "0")
    for remove, args in split_runs(argv):
        if remove:
            if env.rank == 0:
                for path in remove:
                    shutil.rmtree(path)
            barrier()
        cfg = parse_args(args)
        device_type = check_runtime(cfg, world_size=env.world_size, local_world_size=env.local_world_size,
                                    allow_cpu=allow_cpu, **_machine_facts())
        train(cfg, env, device_type)
    leave_process_group(env)
    return 0


if __name__ == "__main__":
    exit_now(main(sys.argv[1:]))  # as python -m gcpgpu.trainer ends: no interpreter teardown of torch
