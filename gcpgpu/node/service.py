"""What every long-running program of a cluster node shares (the follower, gcpgpu/node/agent.py, and the Slurm
daemons' supervisor, gcpgpu/slurm/node.py): the arguments that say which node of which cluster it serves,
its clients (Google's, or an emulator's), its log lines, and SIGTERM as the node going.

On a real node each runs as a systemd service, which stops it with SIGTERM when the VM shuts down (a Spot
preemption's notice included); in the emulator, as a process that lives and dies with its VM. Either way
SIGTERM raises `going` in the main thread, so the program unwinds and hands over what it holds.
"""

from __future__ import annotations

import argparse
import os
import signal
import time
from collections.abc import Callable

from gcpgpu.gcp.clients import Clients


def parser(module: str, description: str) -> argparse.ArgumentParser:
    """The program's command line: --project, --cluster, --node; --emulator comes last (add_emulator)."""
    out = argparse.ArgumentParser(prog=f"python -m {module}", description=description)
    out.add_argument("--project", required=True)
    out.add_argument("--cluster", required=True)
    out.add_argument("--node", required=True, help="this node's name")
    return out


def emulator_of(args: argparse.Namespace) -> str | None:
    """HOST:PORT of the emulator the node is one of (--emulator, else $GCPGPU_EMULATOR), None on Google Cloud."""
    return args.emulator or os.environ.get("GCPGPU_EMULATOR") or None


def start(args: argparse.Namespace, who: str, going: type[BaseException]) -> tuple[Clients, Callable[[str], None]]:
    """The program's clients and its `say` (a timestamped line naming `who` and the node); from now on a
    SIGTERM raises `going`."""
    def say(text: str) -> None:
        print(f"{time.strftime('%H:%M:%S')} gcpgpu {who} on {args.node}: {text}", flush=True)

    def stop(_signum: int, _frame: object) -> None:  # systemd stops the service: the node shuts down
        raise going

    signal.signal(signal.SIGTERM, stop)
    return Clients(emulator=emulator_of(args), project=args.project), say


def add_emulator(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    p.add_argument("--emulator", help="HOST:PORT of a gcpgpu emulator ($GCPGPU_EMULATOR)")
    return p
