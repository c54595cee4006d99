"""`python -m gcpgpu.trainer`: train directly, or on Vertex AI start torchrun from CLUSTER_SPEC first."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from typing import NoReturn

from gcpgpu.trainer.argv import DIE_WITH_PARENT

_PR_SET_PDEATHSIG = 1


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if os.environ.get(DIE_WITH_PARENT) == "1":
        die_with_parent()
    if "CLUSTER_SPEC" in os.environ and "LOCAL_RANK" not in os.environ:
        return _launch_from_cluster_spec(argv)
    from gcpgpu.trainer.config import parse_args

    parse_args(argv)  # bad options fail here, in a fraction of a second, before torch is imported
    import warnings

    # torch warns at import when numpy is missing; the trainer needs numpy only for multi-rank
    # checkpoints, and says so itself when they are asked for.
    warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
    from gcpgpu.trainer.train import main as train_main

    try:
        return train_main(argv)
    except KeyboardInterrupt:  # a second Ctrl-C (the first stops after the step and saves): one line, not a trace
        print("gcpgpu.trainer: Ctrl-C again: stopped at once, without saving", file=sys.stderr, flush=True)
        return 130


def _launch_from_cluster_spec(argv: list[str]) -> int:
    """On a Vertex node: one process per GPU via torchrun, rendezvous at the chief from CLUSTER_SPEC."""
    from gcpgpu.trainer.config import fail, parse_args
    from gcpgpu.trainer.dist import torchrun_args_from_cluster_spec

    parse_args(argv)  # reject bad options once, here, rather than in every worker
    try:
        flags = torchrun_args_from_cluster_spec(os.environ["CLUSTER_SPEC"], _nproc_per_node())
    except ValueError as e:
        fail(str(e))
    from torch.distributed.run import main as torchrun

    print(f"gcpgpu.trainer: CLUSTER_SPEC -> torchrun {' '.join(flags)}", flush=True)
    try:
        torchrun([*flags, "-m", "gcpgpu.trainer", *argv])
    except SystemExit as e:  # torchrun exits non-zero (ChildFailedError) when a worker failed
        return int(e.code or 0) if not isinstance(e.code, str) else 1
    except Exception as e:  # noqa: BLE001 - torchrun raises ChildFailedError after printing its report
        print(f"gcpgpu.trainer: a worker failed: {type(e).__name__}", file=sys.stderr, flush=True)
        return 1
    return 0


def die_with_parent() -> None:
    """SIGKILL this process when the one that started it ends (Linux), as $GCPGPU_DIE_WITH_PARENT asks: torchrun
    killed outright cannot stop its workers, and a worker left behind would train on for nothing."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    parent = os.getppid()
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # it ended before the request took hold
        os._exit(1)


def exit_now(code: int) -> NoReturn:
    """Exit with `code` as a normal exit would, less the interpreter's teardown of every module and object,
    which after a run with torch loaded takes about 1 s of CPU (5 s on a busy machine) and holds the job's
    end back by as much. What a normal exit does that matters still happens, in its order: threads that
    are not daemons are joined, atexit handlers run (logging's flush among them), stdout and stderr flushed."""
    import atexit
    import threading

    for thread in threading.enumerate():
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a closed or broken pipe: nothing more can be said there
            stream.flush()
    os._exit(code)


def _nproc_per_node() -> int:
    """GCPGPU_NPROC_PER_NODE if set, else one process per visible GPU, else one."""
    if os.environ.get("GCPGPU_NPROC_PER_NODE"):
        return int(os.environ["GCPGPU_NPROC_PER_NODE"])
    import torch

    return torch.cuda.device_count() or 1


if __name__ == "__main__":
    exit_now(main() or 0)
