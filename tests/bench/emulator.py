"""Benchmark: what the emulator adds per request, and requests/s on loopback.

    python tests/bench/emulator.py [--trials 3] [--seconds 0.8] [--threads 1,4,16] [--calls 200]

The emulator runs in its own process (as `gcpgpu emulator start` does), and so does a trivial WSGI
"echo" server on the same werkzeug stack that answers every request with a fixed JSON body; the
real google-cloud-compute client calls both from this process. So:

- median round trip (emulator) - median round trip (echo) = what the emulator's own routing,
  backend and JSON add per request;
- "server" = the median time the emulator itself logged per request (from /_emulator/requests);
- requests/s with N client threads, for get and insert, each the median over --trials trials.

With many client threads the client library (proto marshalling under one GIL) is as much the limit
as the server: the echo server's figures show that ceiling.
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import os
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from typing import Any

from google.cloud import compute_v1
from requests.adapters import HTTPAdapter

import gcpgpu
from gcpgpu.gcp.clients import Clients

# The emulator (and the CLI) run as `python -c`, whose sys.path starts with the working directory: they run
# in the tree this process takes gcpgpu from, so PYTHONPATH=ANOTHER_TREE measures that tree throughout.
TREE = os.path.dirname(os.path.dirname(os.path.abspath(gcpgpu.__file__)))

PROJECT = "bench-project"
ZONE = "us-central1-a"

_EMULATOR = """
import sys
from gcpgpu.fakes.server import Emulator
emu = Emulator().start()
print(emu.port, flush=True)
sys.stdin.read()  # serve until the parent closes our stdin
emu.stop()
"""

_ECHO = """
import json, sys
from werkzeug.serving import WSGIRequestHandler, make_server
from werkzeug.wrappers import Response
class Quiet(WSGIRequestHandler):  # like the emulator's handler: no per-request log line
    def log_request(self, *a, **k):
        pass
OP = json.dumps({"kind": "compute#operation", "name": "operation-echo", "status": "DONE", "progress": 100}).encode()
RES = json.dumps({"kind": "compute#instance", "name": "echo", "status": "RUNNING", "id": "1"}).encode()
def app(environ, start_response):
    environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
    body = OP if environ["REQUEST_METHOD"] == "POST" else RES
    return Response(body, mimetype="application/json")(environ, start_response)
srv = make_server("127.0.0.1", 0, app, threaded=True, request_handler=Quiet)
print(srv.server_port, flush=True)
import threading
threading.Thread(target=srv.serve_forever, daemon=True).start()
sys.stdin.read()
"""


def _spawn(code: str) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            cwd=TREE)
    port = proc.stdout.readline().strip()
    if not port.isdigit():
        proc.kill()
        raise SystemExit(f"a benchmark server did not start (exit code {proc.wait()})")
    return proc, f"127.0.0.1:{port}"


def _clients(address: str, pool: int) -> tuple[Any, Any]:
    clients = Clients(emulator=address)
    insts, zones = clients.compute("InstancesClient"), clients.compute("ZonesClient")
    # requests keeps 10 connections a host by default; give every client thread its own.
    for c in (insts, zones):
        c._transport._session.mount("http://", HTTPAdapter(pool_connections=1, pool_maxsize=pool))
    return insts, zones


def _control(address: str, method: str, what: str) -> Any:
    req = urllib.request.Request(f"http://{address}/_emulator/{what}", method=method)
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


_names = itertools.count()


def _vm() -> compute_v1.Instance:
    return compute_v1.Instance(
        name=f"bench-{next(_names)}",
        machine_type=f"zones/{ZONE}/machineTypes/e2-standard-4",
        disks=[compute_v1.AttachedDisk(boot=True, initialize_params=compute_v1.AttachedDiskInitializeParams(
            source_image="projects/debian-cloud/global/images/family/debian-12"))],
        network_interfaces=[compute_v1.NetworkInterface(network="global/networks/default")],
    )


def _calls(insts: Any, zones: Any) -> dict[str, Callable[[], Any]]:
    return {
        "zones.get": lambda: zones.get(project=PROJECT, zone=ZONE),
        "instances.get": lambda: insts.get(project=PROJECT, zone=ZONE, instance="probe"),
        "instances.insert": lambda: insts.insert(project=PROJECT, zone=ZONE, instance_resource=_vm()),
    }


def _round_trips(a: Callable[[], Any], b: Callable[[], Any], n: int) -> tuple[float, float]:
    """Median seconds of one call of `a` and of `b`, over n calls of each, interleaved so that
    whatever else the machine is doing weighs on both alike."""
    ta, tb = [], []
    for _ in range(n):
        for call, times in ((a, ta), (b, tb)):
            t0 = time.perf_counter()
            call()
            times.append(time.perf_counter() - t0)
    return statistics.median(ta), statistics.median(tb)


def _rate(call: Callable[[], Any], threads: int, seconds: float) -> float:
    """Requests/s that `threads` threads sustain calling `call` back to back for `seconds`."""
    stop = threading.Event()
    counts = [0] * threads
    start = threading.Barrier(threads + 1)

    def worker(i: int) -> None:
        start.wait()
        while not stop.is_set():
            call()
            counts[i] += 1

    pool = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for t in pool:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    time.sleep(seconds)
    stop.set()
    for t in pool:
        t.join()
    return sum(counts) / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=0.8, help="length of each throughput run")
    ap.add_argument("--threads", default="1,4,16")
    ap.add_argument("--calls", type=int, default=200, help="sequential calls per latency trial")
    args = ap.parse_args()
    threads = [int(x) for x in args.threads.split(",")]
    logging.getLogger("urllib3").setLevel(logging.ERROR)

    emu_proc, emu = _spawn(_EMULATOR)
    echo_proc, echo = _spawn(_ECHO)
    try:
        e_insts, e_zones = _clients(emu, max(threads))
        o_insts, o_zones = _clients(echo, max(threads))
        e_calls, o_calls = _calls(e_insts, e_zones), _calls(o_insts, o_zones)

        def fresh() -> None:
            """An empty project with one VM to get, so every trial starts from the same state."""
            _control(emu, "POST", "reset")
            e_insts.insert(project=PROJECT, zone=ZONE, instance_resource=_vm()).result()
            probe = _vm()
            probe.name = "probe"
            e_insts.insert(project=PROJECT, zone=ZONE, instance_resource=probe).result()
            _control(emu, "DELETE", "requests")

        fresh()
        for call in (*e_calls.values(), *o_calls.values()):  # warm up connections and code paths
            call()

        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
        print(f"emulator benchmark: {args.trials} trials, loopback, google-cloud-compute client, "
              f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average {load:.1f} at start")
        print("\nper-request latency, ms (median of per-trial medians; added = emulator - echo round trip;")
        print("server = the emulator's own time per request, from its request log)")
        print(f"{'request':<18} {'emulator':>9} {'echo':>7} {'added':>7} {'server':>7}")
        for name in e_calls:
            emu_t, echo_t, server_t = [], [], []
            for _ in range(args.trials):
                fresh()
                e, o = _round_trips(e_calls[name], o_calls[name], args.calls)
                emu_t.append(e)
                echo_t.append(o)
                logged = _control(emu, "GET", "requests")
                server_t.append(statistics.median(r["seconds"] for r in logged))
            e, o, s = (statistics.median(x) * 1000 for x in (emu_t, echo_t, server_t))
            print(f"{name:<18} {e:9.3f} {o:7.3f} {e - o:7.3f} {s:7.3f}")

        print("\nrequests/s on loopback (median over trials)")
        print(f"{'request':<18} {'threads':>7} {'emulator':>9} {'echo':>7}")
        for name in ("instances.get", "instances.insert"):
            for n in threads:
                emu_r, echo_r = [], []
                for _ in range(args.trials):
                    fresh()
                    emu_r.append(_rate(e_calls[name], n, args.seconds))
                    echo_r.append(_rate(o_calls[name], n, args.seconds))
                print(f"{name:<18} {n:7d} {statistics.median(emu_r):9.0f} {statistics.median(echo_r):7.0f}")
    finally:
        for proc in (emu_proc, echo_proc):
            proc.stdin.close()
            proc.wait(timeout=10)


if __name__ == "__main__":
    main()
