"""Benchmark: `gcpgpu metrics tail` refresh time and API calls per refresh, 8 and 64 nodes of 8 GPUs.

The emulator runs in its own process (as Google's servers do), with a labelled a3-highgpu-8g
cluster of each size that has been running for 20 minutes; this process runs the tail's refresh
(one ListTimeSeries per metric type, all in parallel) and reports medians over repeated refreshes,
counting the calls from the emulator's request log.

    .venv/bin/python tests/bench/metrics.py [--repeats N]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
import urllib.request

SERVER = r"""
import json, sys
from gcpgpu.fakes.server import Emulator
from gcpgpu.fakes.monitoring.testing import emulated_cluster
emu = Emulator().start()
for n in (8, 64):
    emulated_cluster(emu, f"bench{n}", n, machine_type="a3-highgpu-8g", project="bench")
emu.monitoring.straggler("bench64-17", 0.5)
print(json.dumps({"address": emu.address}), flush=True)
sys.stdin.read()  # serve until the benchmark closes our stdin
emu.stop()
"""


def control(address: str, what: str, method: str = "GET") -> object:
    req = urllib.request.Request(f"http://{address}/_emulator/{what}", method=method)
    with urllib.request.urlopen(req, timeout=10) as r:  # noqa: S310 - loopback emulator
        return json.loads(r.read())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()

    from gcpgpu.gcp.clients import Clients
    from gcpgpu.metrics.tail import Tail

    server = subprocess.Popen([sys.executable, "-c", SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        address = json.loads(server.stdout.readline())["address"]  # type: ignore[union-attr]
        clients = Clients(emulator=address, project="bench")
        print(f"{'nodes':>5} {'GPUs':>5} {'view':>8} {'refresh median':>15} {'min':>8} {'max':>8} "
              f"{'API calls/refresh':>18} {'rows':>5}  stragglers")
        for nodes in (8, 64):
            for per_gpu in (False, True):
                tail = Tail(clients, "bench", "cluster", f"bench{nodes}", per_gpu=per_gpu)
                tail.refresh()  # discovery (one Compute list call) and warm-up, not timed
                times, calls = [], []
                for _ in range(args.repeats):
                    control(address, "requests", "DELETE")
                    t0 = time.perf_counter()
                    snap = tail.refresh()
                    times.append(time.perf_counter() - t0)
                    logged = control(address, "requests")
                    calls.append(len(logged))  # type: ignore[arg-type]
                print(f"{nodes:>5} {nodes * 8:>5} {'per-GPU' if per_gpu else 'per-node':>8} "
                      f"{statistics.median(times) * 1000:>12.0f} ms {min(times) * 1000:>5.0f} ms "
                      f"{max(times) * 1000:>5.0f} ms {statistics.median(calls):>18.0f} {len(snap.rows):>5}  "
                      f"{', '.join(n for n in snap.stragglers if '/' not in n) or '-'}")
    finally:
        if server.stdin:
            server.stdin.close()
        server.wait(timeout=30)


if __name__ == "__main__":
    main()
