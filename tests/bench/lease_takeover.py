"""Benchmark: how long after `kill -9` of a `cluster up` another run may take the cluster's lease over.

    python tests/bench/lease_takeover.py [--ttl 20] [--runs 3]

A real `gcpgpu cluster up` process runs against the emulator (operations slowed so it is mid-way) and
is killed with SIGKILL once it holds the lease and has renewed it at least once; then a second run waits
for the lease. Prints the seconds from the kill to the takeover for each run and their median, next to
the bound the design gives (the TTL after the holder's last renewal, which comes every TTL/4). The
figure includes the taker's own metadata write, which waits for one emulated operation.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import statistics
import subprocess
import sys
import time

import gcpgpu
from gcpgpu.cluster import lease
from gcpgpu.fakes import Faults, mock_gcp
from gcpgpu.gcp.clients import Clients

# The emulator (and the CLI) run as `python -c`, whose sys.path starts with the working directory: they run
# in the tree this process takes gcpgpu from, so PYTHONPATH=ANOTHER_TREE measures that tree throughout.
TREE = os.path.dirname(os.path.dirname(os.path.abspath(gcpgpu.__file__)))

PROJECT = "bench-proj"


def one(gcp, ttl: float, i: int) -> float:
    name = f"lt{i}"
    env = {**os.environ, "GCPGPU_LEASE_TTL": str(ttl), "GCPGPU_EMULATOR": gcp.address}
    proc = subprocess.Popen([sys.executable, "-c", "from gcpgpu.cli import main; main()", "--project", PROJECT,
                             "cluster", "up", name, "--machine-type", "a2-highgpu-1g", "--nodes", "2",
                             "--zone", "us-central1-a", "--yes"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=TREE)
    clients = Clients(emulator=gcp.address)
    while lease.current(clients, PROJECT, name) is None:
        if proc.poll() is not None:
            raise SystemExit(f"the up process ended early (exit {proc.returncode})")
        time.sleep(0.1)
    time.sleep(ttl / 4 + random.uniform(0, ttl / 8))  # at least one renewal, then a random moment
    if proc.poll() is not None:
        raise SystemExit("the up process finished before the kill: slow the emulator down")
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    killed = time.monotonic()
    lease.POLL_SECONDS = 0.2
    taker = lease.Lease(clients, PROJECT, name, holder=f"bench{i}", op="up", ttl=ttl)
    taker.acquire(wait_for_it=True)
    took = time.monotonic() - killed
    taker.release()
    return took


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ttl", type=float, default=20.0)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--op-seconds", type=float, default=None,
                    help="how long each emulated operation takes (default max(4, TTL/10), so the up is still running)")
    args = ap.parse_args()
    random.seed(1)
    op_seconds = args.op_seconds if args.op_seconds is not None else max(4.0, args.ttl / 10)
    with mock_gcp(Faults(operation_seconds=op_seconds, latency_ms=150)) as gcp:
        times = [one(gcp, args.ttl, i) for i in range(args.runs)]
    print(f"lease TTL {args.ttl:g} s (renewed every {args.ttl / 4:g} s): takeover after kill -9 took "
          + ", ".join(f"{t:.1f}" for t in times) + f" s; median {statistics.median(times):.1f} s; "
          f"design bound {0.75 * args.ttl:g}-{args.ttl:g} s after the kill")


if __name__ == "__main__":
    main()
