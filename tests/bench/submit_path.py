"""Benchmark: what ONE `gcpgpu job submit` costs on each target: the API calls it makes, and how often its
call path comes back into the CLI.

    python tests/bench/submit_path.py [--slurm-wait 120]

On the emulator, in this process, as the tests run it (its own temporary gcloud configuration and state, no
network, no credentials), each target gets a fresh world (the emulator is reset between them) and one
submit without --wait:

  plain cluster           `cluster up NAME --nodes 2 --no-placement` (a2-highgpu-1g), then
                          `job submit --cluster NAME --image busybox` (the emulator simulates a busybox job)
  plain cluster --detach  the same on a fresh cluster, with --detach: the nodes' follower runs from the newest
                          gcpgpu image in the emulator's Artifact Registry (seeded), so no image is built; a
                          refusal asking for `container build` is printed as a skip
  slurm cluster           the same cluster made with --scheduler slurm; the submit comes once the cluster's
                          own agents poll (Slurm is up); one line says so where Slurm is not installed
  vertex                  `job submit --vertex --machine-type a2-highgpu-1g --region us-central1 --image busybox`

For each submit, from the emulator's own request log (marked before and after the submit):
  - Compute calls by method (instances.aggregatedList, projects.get, setCommonInstanceMetadata, ...) and the
    calls of every other service. Only the submit's own: each logged request is tagged with the process whose
    socket sent it (the client port looked up in /proc/net/tcp and this process's open sockets), so the calls
    the emulated nodes' own processes make meanwhile (a detached job's followers, Slurm's agents) are listed
    apart, below the table, not counted: how many of them fall within a submit depends on their timing.
  - CLI re-entries: while the submit runs (click's CliRunner, in this thread and the threads it starts), a
    profile hook (sys.setprofile / threading.setprofile) counts each call event whose callee is a function
    defined under gcpgpu/cli/ and whose caller is gcpgpu code outside gcpgpu/cli/ (the emulator's own code,
    gcpgpu/fakes/, aside). The caller is the nearest gcpgpu frame up the stack, so a callback handed through a
    library (functools, contextlib, a thread pool's worker in the same thread) still counts; a cli function
    entered on a worker thread whose stack holds no gcpgpu frame at all counts too, marked "worker thread".
    The click command itself (caller: click) and cli functions calling each other do not count.
  - Repeated reads: a GET sent more than once with the same path and query within the one submit, with the
    gcpgpu functions that sent each (seen from this process's HTTP client; names for reading, nothing here
    depends on them).

Everything goes through `gcpgpu.cli.main` and the emulator (gcpgpu.fakes), not the tool's internal modules,
so the figures stay comparable across refactors of the submit path. Not collected by pytest (no test_
prefix); everything runs under __main__ (the emulator's forkserver imports this file in every helper it
starts, so nothing may run at import).
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the suite's own wait_for
from helpers import wait_for  # noqa: E402

PROJECT = "bench-proj"
REGION = "us-central1"
ZONE = "us-central1-a"
MACHINE = "a2-highgpu-1g"
GLOBAL = ["--project", PROJECT, "--region", REGION]
UP = ["--machine-type", MACHINE, "--nodes", "2", "--zone", ZONE, "--no-placement", "--yes"]
# Settings a developer's shell may carry that would change what the CLI resolves (tests/helpers.py LEAKY_ENV).
LEAKY_ENV = ("GOOGLE_CLOUD_PROJECT", "CLOUDSDK_CORE_PROJECT", "CLOUDSDK_COMPUTE_REGION", "CLOUDSDK_COMPUTE_ZONE",
             "CLOUDSDK_ACTIVE_CONFIG_NAME", "GCPGPU_EMULATOR")
SLURM_BINARIES = ("slurmctld", "slurmd", "munged", "sbatch")


# -- which process sent a logged request ---------------------------------------------------------------
class Origins:
    """Tags every request the emulator logs with whether this process sent it (True), another process did
    (False), or it cannot be told (None: no /proc). Installed before the emulator starts serving."""

    def __init__(self, emu: Any) -> None:
        self.emu = emu
        self._tls = threading.local()
        self._inodes: dict[str, bool] = {}  # socket inode -> held by this process (an inode is one socket)
        self.proc = os.path.isdir("/proc/self/fd") and os.path.exists("/proc/net/tcp")
        if not hasattr(emu, "wsgi"):  # an emulator served otherwise: every request in a window counts as the submit's
            self.proc = False
            return
        serve = emu.wsgi

        def wsgi(environ: dict, start_response: Any) -> Any:  # the REST front end: one request per call
            self._tls.own = self.owned(environ.get("REMOTE_PORT"), self.emu.port)
            try:
                return serve(environ, start_response)
            finally:
                self._tls.own = None

        add = emu.requests.add

        def tagged(item: Any) -> None:
            own = getattr(self._tls, "own", None)
            if own is None:  # gRPC: the emulator's handler logs it, its `context` knows the peer
                context = sys._getframe(1).f_locals.get("context")
                peer = context.peer() if hasattr(context, "peer") else ""
                port = peer.rsplit(":", 1)[-1] if peer.startswith(("ipv4:", "ipv6:")) else None
                own = self.owned(port, self.emu.grpc_port)
            item.origin = own
            add(item)

        emu.wsgi = wsgi  # Emulator.start() serves self.wsgi
        emu.requests.add = tagged

    def owned(self, client_port: Any, server_port: int | None) -> bool | None:
        """Whether the TCP connection from 127.0.0.1:client_port to server_port is this process's."""
        if not self.proc or not client_port or not server_port:
            return None
        inode = None
        want_local, want_remote = f":{int(client_port):04X}", f":{int(server_port):04X}"
        for table in ("/proc/net/tcp", "/proc/net/tcp6"):
            try:
                with open(table) as f:
                    next(f)
                    for line in f:
                        parts = line.split()
                        if parts[1].endswith(want_local) and parts[2].endswith(want_remote):
                            inode = parts[9]
                            break
            except OSError:
                continue
            if inode:
                break
        if not inode:
            return None
        if inode not in self._inodes:
            mine = f"socket:[{inode}]"
            self._inodes[inode] = False
            for fd in os.listdir("/proc/self/fd"):
                try:
                    if os.readlink(f"/proc/self/fd/{fd}") == mine:
                        self._inodes[inode] = True
                        break
                except OSError:
                    continue
        return self._inodes[inode]


# -- calls into gcpgpu/cli from the rest of gcpgpu ---------------------------------------------------------
class CliReentries:
    """A profile hook, for the length of a `with`: call events entering gcpgpu/cli from gcpgpu code outside it."""

    def __init__(self, package_dir: str) -> None:
        self.pkg = package_dir.rstrip(os.sep) + os.sep
        self.cli = self.pkg + "cli" + os.sep
        self.fakes = self.pkg + "fakes" + os.sep
        self.main_thread = threading.main_thread()
        self.events: list[tuple[str, str]] = []  # (cli function entered, gcpgpu function it was entered from)

    def name(self, code: Any) -> str:
        rel = os.path.relpath(code.co_filename, os.path.dirname(self.pkg.rstrip(os.sep)))
        module = rel[:-3].replace(os.sep, ".").removesuffix(".__init__") if rel.endswith(".py") else rel
        return f"{module}:{getattr(code, 'co_qualname', code.co_name)}"

    def hook(self, frame: Any, event: str, arg: Any) -> None:
        if event != "call" or not frame.f_code.co_filename.startswith(self.cli):
            return
        caller, through = frame.f_back, False
        while caller is not None and not caller.f_code.co_filename.startswith(self.pkg):
            caller, through = caller.f_back, True  # through library frames (functools, contextlib) to gcpgpu's
        if caller is None:
            if threading.current_thread() is not self.main_thread:  # a callback on a pool's worker thread
                self.events.append((self.name(frame.f_code), "(worker thread)"))
            return
        where = caller.f_code.co_filename
        if where.startswith(self.cli) or where.startswith(self.fakes):
            return
        self.events.append((self.name(frame.f_code), self.name(caller.f_code) + (" (through library frames)"
                                                                                 if through else "")))

    def __enter__(self) -> CliReentries:
        threading.setprofile(self.hook)
        sys.setprofile(self.hook)
        return self

    def __exit__(self, *exc: Any) -> None:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]


# -- who in this process sent each REST request -------------------------------------------------------------
class Senders:
    """For the length of a `with`: the gcpgpu functions behind each HTTP request this process sends through
    `requests` (Google's REST clients and gcpgpu's own sessions), by (method, path?query)."""

    def __init__(self, package_dir: str) -> None:
        self.pkg = package_dir.rstrip(os.sep) + os.sep
        self.skip = tuple(self.pkg + d + os.sep for d in ("fakes", "gcp"))  # the emulator; the client helpers
        self.namer = CliReentries(package_dir)
        self.sent: dict[tuple[str, str], list[tuple[tuple, str]]] = collections.defaultdict(list)

    def __enter__(self) -> Senders:
        import requests

        self._cls = requests.Session
        self._request = original = requests.Session.request
        senders = self

        def request(session: Any, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
            senders.note(method, url, kwargs.get("params"))
            return original(session, method, url, *args, **kwargs)

        requests.Session.request = request  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: Any) -> None:
        self._cls.request = self._request  # type: ignore[method-assign]

    def note(self, method: str, url: str, params: Any) -> None:
        from urllib.parse import urlencode, urlsplit

        parts = urlsplit(url)
        query = "&".join(q for q in (parts.query, urlencode(params) if isinstance(params, (dict, list, tuple))
                                     else "") if q)
        chain: list[list[str]] = []  # [module, function, its caller in that module, ...], innermost first
        frame = sys._getframe(2)
        while frame is not None and len(chain) <= 3:
            where = frame.f_code.co_filename
            if where.startswith(self.pkg) and not where.startswith(self.skip):
                module, _, function = self.namer.name(frame.f_code).partition(":")
                if chain and chain[-1][0] == module:
                    chain[-1].append(function)
                else:
                    chain.append([module, function])
            frame = frame.f_back
        said = " < ".join(f"{m}:{' < '.join(fs)}" for m, *fs in chain[:3])
        self.sent[(method.upper(), parts.path)].append((same_query(query), said or "?"))

    def of(self, method: str, path: str, query: str) -> list[str]:
        """Who sent METHOD path?query: the senders of that very query, else of any query of that path."""
        sent = self.sent.get((method, path), [])
        return [chain for q, chain in sent if q == same_query(query)] or [chain for _q, chain in sent]


def same_query(query: str) -> tuple:
    """A query string as a sorted list of its parameters, so two encodings of one query compare equal."""
    from urllib.parse import parse_qsl

    return tuple(sorted(parse_qsl(query, keep_blank_values=True)))


# -- naming logged requests ---------------------------------------------------------------------------------
COMPUTE = re.compile(r"^/compute/(v1|beta)/projects/[^/]+/?(.*)$")
GRPC = re.compile(r"^/google\.(?:cloud\.|devtools\.)?([a-z_]+)\.(?:v\w+\.)?(\w+)/(\w+)$")
VERBS = {("GET", 1): "list", ("POST", 1): "insert", ("GET", 2): "get", ("DELETE", 2): "delete",
         ("PATCH", 2): "patch", ("PUT", 2): "update"}
SCOPED = {"zones": "zone", "regions": "region", "global": "global"}


def compute_method(http: str, path: str) -> str:
    """Compute's method for a REST path: instances.aggregatedList, projects.get, zoneOperations.wait, ..."""
    rest = [p for p in COMPUTE.match(path).group(2).split("/") if p]  # type: ignore[union-attr]
    if not rest:
        return "projects.get" if http == "GET" else f"projects.{http}"
    if rest[0] == "aggregated" and len(rest) > 1:
        return f"{rest[1]}.aggregatedList"
    scope = None
    if rest[0] in ("zones", "regions") and len(rest) > 2:
        scope, rest = SCOPED[rest[0]], rest[2:]
    elif rest[0] == "global":
        scope, rest = "global", rest[1:]
    if scope is None and len(rest) == 1:  # a project's own method: setCommonInstanceMetadata, ...
        return f"projects.{rest[0]}"
    if not rest:
        return f"{scope}.{http}"
    collection = rest[0]
    if collection == "operations":
        collection = f"{scope}Operations"
    if len(rest) >= 3:
        return f"{collection}.{rest[2]}"
    return f"{collection}.{VERBS.get((http, len(rest)), http)}"


def service_of(item: Any) -> tuple[str, str]:
    """(service, method) of a logged request."""
    path = item.path
    if COMPUTE.match(path):
        return "compute", compute_method(item.method, path)
    grpc = GRPC.match(path)
    if grpc:
        return grpc.group(1), f"{grpc.group(2)}.{grpc.group(3)}"
    for pattern, service in ((r"/locations/[^/]+/(customJobs|operations)", "aiplatform"),
                             (r"^/v2/entries", "logging"), (r"^/monitoring/", "monitoring"),
                             (r"^/((resumable/)?upload/|download/)?storage/", "storage"),
                             (r"^/v1/projects/[^/]+/secrets", "secretmanager"),
                             (r"/repositories/", "artifactregistry"), (r"^/filestore/", "filestore"),
                             (r"^/lustre/", "lustre"), (r"^/servicenetworking/", "servicenetworking")):
        if re.search(pattern, path):
            tail = path.rstrip("/").rsplit("/", 1)[-1]
            return service, f"{item.method} .../{tail}"
    return item.api or "?", f"{item.method} {path}"


# -- one target ---------------------------------------------------------------------------------------------
@dataclass
class Row:
    label: str
    calls: collections.Counter = field(default_factory=collections.Counter)  # (service, method) -> n
    failed: int = 0  # answers other than 2xx
    unknown_origin: int = 0  # counted, but the sender could not be told (no /proc)
    background: collections.Counter = field(default_factory=collections.Counter)
    reentries: list[tuple[str, str]] = field(default_factory=list)
    repeated: list[tuple[str, int, collections.Counter]] = field(default_factory=list)
    output: str = ""

    @property
    def compute(self) -> int:
        return sum(n for (s, _m), n in self.calls.items() if s == "compute")

    @property
    def other(self) -> int:
        return sum(n for (s, _m), n in self.calls.items() if s != "compute")


class Bench:
    def __init__(self, emu: Any, origins: Origins, package_dir: str) -> None:
        self.emu, self.origins, self.package_dir = emu, origins, package_dir

    def cli(self, *argv: str) -> Any:
        from click.testing import CliRunner

        from gcpgpu.cli import main

        return CliRunner().invoke(main, [*GLOBAL, *argv])

    def must(self, *argv: str) -> Any:
        result = self.cli(*argv)
        if result.exit_code != 0:
            sys.exit(f"`gcpgpu {' '.join(argv)}` failed (exit {result.exit_code}):\n{result.output[-3000:]}")
        return result

    def submit(self, label: str, *argv: str) -> tuple[Row, Any]:
        """One `job submit ARGV`, measured."""
        row = Row(label)
        before = len(self.emu.requests)
        with Senders(self.package_dir) as senders, CliReentries(self.package_dir) as hook:
            result = self.cli("job", "submit", *argv)
        window = self.emu.requests.all()[before:]  # complete: the CLI has had every answer it asked for
        row.output = result.output
        said = (result.stdout.strip().splitlines() or ["(nothing on stdout)"])[0]
        print(f"{label}: exit {result.exit_code}, {said}", flush=True)
        row.reentries = hook.events
        mine = []
        for item in window:
            own = getattr(item, "origin", None)
            if own is False:
                row.background[service_of(item)] += 1
                continue
            mine.append(item)
            row.unknown_origin += own is None
            row.calls[service_of(item)] += 1
            row.failed += not 200 <= item.status < 300
        reads = collections.Counter((r.method, r.path, r.query) for r in mine if r.method == "GET")
        for (method, path, query), n in sorted(reads.items()):
            if n > 1:
                name = service_of(next(r for r in mine if (r.method, r.path, r.query) == (method, path, query)))
                row.repeated.append((f"{name[0]} {name[1]}", n, collections.Counter(senders.of(method, path, query))))
        return row, result

    def background_seen(self, since: int) -> bool:
        return any(getattr(r, "origin", None) is False for r in self.emu.requests.all()[since:])


def plain(bench: Bench) -> list[Row | str]:
    bench.emu.jobs.agent.simulated_run_s = 0.5  # of the emulator's clock: the first job ends on its own
    bench.must("cluster", "up", "plain", *UP)
    row, result = bench.submit("plain cluster", "--cluster", "plain", "--image", "busybox")
    if result.exit_code != 0:
        sys.exit(f"job submit on the plain cluster failed (exit {result.exit_code}):\n{result.output[-3000:]}")
    # The cluster's next job: its nodes hold the first one's record, so the submit reads what their agents
    # reported (is a job still running? how did the one before end?) before it puts the new one there.
    first = result.stdout.strip().splitlines()[0]
    try:
        wait_for(lambda: '"SUCCEEDED"' in bench.cli("--format", "json", "job", "status", first).stdout, 60,
                 "the first job's end")
    except AssertionError:
        sys.exit(f"the first job on the plain cluster did not end: {bench.cli('job', 'status', first).output}")
    again, result = bench.submit("plain cluster, next job", "--cluster", "plain", "--image", "busybox")
    if result.exit_code != 0:
        sys.exit(f"the next job on the plain cluster failed (exit {result.exit_code}):\n{result.output[-3000:]}")
    bench.emu.reset()
    bench.must("cluster", "up", "detach", *UP)
    row2, result = bench.submit("plain cluster --detach", "--cluster", "detach", "--image", "busybox", "--detach")
    bench.emu.reset()
    if result.exit_code == 2 and "container build" in result.output:
        return [row, again, "plain cluster --detach: skipped: it needs a built gcpgpu image here ("
                     + result.output.strip().splitlines()[-1] + ")"]
    if result.exit_code != 0:
        sys.exit(f"job submit --detach failed (exit {result.exit_code}):\n{result.output[-3000:]}")
    return [row, again, row2]


def slurm(bench: Bench, wait_s: float) -> list[Row | str]:
    missing = [b for b in SLURM_BINARIES if shutil.which(b) is None]
    if missing:
        return [f"slurm cluster: skipped: {', '.join(missing)} not installed (Slurm and munge are needed)"]
    mark = len(bench.emu.requests)
    bench.must("cluster", "up", "queue", *UP, "--scheduler", "slurm")
    # A submit to a Slurm cluster users make once it is up: its nodes' daemons and node 0's queue agent run and
    # read the project (the agent's poll), as here once the first request of another process is logged.
    t0 = time.monotonic()
    try:
        wait_for(lambda: bench.background_seen(mark), wait_s, "the nodes' agents' first request")
    except AssertionError:
        bench.emu.reset()
        return [f"slurm cluster: skipped: its nodes' agents made no request within {wait_s:.0f} s of `cluster up`"]
    waited = time.monotonic() - t0
    # A round of their polling in (their next request after the first), so the submit meets them as a user's would.
    first = len(bench.emu.requests)
    wait_for(lambda: bench.background_seen(first), wait_s, "the nodes' agents' next request")
    row, result = bench.submit("slurm cluster", "--cluster", "queue", "--image", "busybox")
    row.label = "slurm cluster"
    bench.emu.reset()
    if result.exit_code != 0:
        sys.exit(f"job submit on the Slurm cluster failed (exit {result.exit_code}):\n{result.output[-3000:]}")
    print(f"(slurm: the cluster's agents polled {waited:.1f} s after `cluster up` returned)", flush=True)
    return [row]


def vertex(bench: Bench) -> list[Row | str]:
    row, result = bench.submit("vertex", "--vertex", "--machine-type", MACHINE, "--region", REGION,
                               "--image", "busybox")
    bench.emu.reset()
    if result.exit_code != 0:
        sys.exit(f"job submit --vertex failed (exit {result.exit_code}):\n{result.output[-3000:]}")
    return [row]


# -- the table ----------------------------------------------------------------------------------------------
def report(results: list[Row | str]) -> None:
    rows = [r for r in results if isinstance(r, Row)]
    width = max([34, *(len(f"{s} {m}") + 2 for r in rows for (s, m) in r.calls)])
    col = max(14, *(len(r.label) + 2 for r in rows)) if rows else 14
    print("\nAPI calls one `job submit` (no --wait) makes, by the emulator's request log; CLI re-entries "
          "by a profile hook")
    print(f"{'':<{width}}" + "".join(f"{r.label:>{col}}" for r in rows))
    methods = sorted({k for r in rows for k in r.calls}, key=lambda k: (k[0] != "compute", k[0], k[1]))
    for key in methods:
        print(f"{key[0] + ' ' + key[1]:<{width}}" + "".join(f"{r.calls.get(key, 0) or '-':>{col}}" for r in rows))
    for name, get in (("= Compute calls", lambda r: r.compute), ("= other services' calls", lambda r: r.other),
                      ("= all calls", lambda r: r.compute + r.other),
                      ("  of which answered non-2xx", lambda r: r.failed),
                      ("CLI re-entries (call events)", lambda r: len(r.reentries)),
                      ("CLI functions re-entered (distinct)", lambda r: len({c for c, _ in r.reentries}))):
        print(f"{name:<{width}}" + "".join(f"{get(r):>{col}}" for r in rows))
    for r in results:
        if isinstance(r, str):
            print(r)
    print("\nCLI functions re-entered (callee  x calls  <- the gcpgpu function it was entered from):")
    for r in rows:
        seen = collections.Counter(r.reentries)
        print(f"  {r.label}:" + (" none" if not seen else ""))
        for (callee, caller), n in sorted(seen.items()):
            print(f"    {callee}  x{n}  <- {caller}")
    print("\nGETs sent more than once with the same path and query within one submit (and who sent them):")
    for r in rows:
        print(f"  {r.label}:" + (" none" if not r.repeated else ""))
        for name, n, senders in r.repeated:
            print(f"    {name}  x{n}")
            for chain, k in senders.most_common():
                print(f"      {k} x {chain}")
    # Apart from the table: how many of the nodes' own requests fall within a submit depends on their timing.
    print("\nlogged during a submit but sent by other processes (the nodes' followers and agents; not counted):")
    for r in rows:
        print(f"  {r.label}: " + (", ".join(f"{s} {m} x{n}" for (s, m), n in sorted(r.background.items()))
                                  or "none"))
    if any(r.unknown_origin for r in rows):
        print("\nnote: without /proc the sender of a request cannot be told: every request logged during a submit "
              "was counted as the submit's own")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--slurm-wait", type=float, default=120.0,
                    help="at most this many seconds for a Slurm cluster's agents to start polling")
    args = ap.parse_args()

    import gcpgpu
    from gcpgpu.fakes import Emulator

    package_dir = os.path.dirname(os.path.abspath(gcpgpu.__file__))
    tmp = tempfile.mkdtemp(prefix="gcpgpu-bench-submit-")
    for name in LEAKY_ENV:
        os.environ.pop(name, None)
    for var, sub in (("CLOUDSDK_CONFIG", "gcloud"), ("XDG_STATE_HOME", "state"), ("XDG_CACHE_HOME", "cache")):
        os.environ[var] = os.path.join(tmp, sub)  # as tests/conftest.py: nothing of the developer's leaks in
    emu = Emulator(run_user_commands=True)  # as gcpgpu/fakes/pytest_plugin.py
    origins = Origins(emu)
    emu.start()
    try:
        emu.clock.publish(os.path.join(tmp, "clock.json"))
        os.environ["GCPGPU_EMULATOR"] = emu.address
        os.environ["GCPGPU_CLOCK"] = str(emu.clock.published)
        print(f"job submit's path on the emulator (in this process), python {sys.version.split()[0]}, "
              f"gcpgpu from {package_dir}", flush=True)
        bench = Bench(emu, origins, package_dir)
        results: list[Row | str] = []
        results += plain(bench)
        results += slurm(bench, args.slurm_wait)
        results += vertex(bench)
        report(results)
    finally:
        emu.reset()  # every process it started (node agents, Slurm daemons) is stopped
        emu.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
