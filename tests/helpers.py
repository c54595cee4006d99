"""Helpers the CLI and cluster tests share: the emulated project, a plan, what a cluster leaves behind.

Fixtures built on these (`cluster`) live in tests/conftest.py.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from gcpgpu.cluster.plan import plan
from gcpgpu.cluster.spec import ClusterSpec
from gcpgpu.gcp.clients import Clients

PROJECT = "test-proj"

# Settings the developer's shell may carry that would change what a test resolves (tests/conftest.py
# removes them for every test; a session-wide fixture removes them itself).
LEAKY_ENV = (
    "GOOGLE_CLOUD_PROJECT",
    "CLOUDSDK_CORE_PROJECT",
    "CLOUDSDK_COMPUTE_REGION",
    "CLOUDSDK_COMPUTE_ZONE",
    "CLOUDSDK_ACTIVE_CONFIG_NAME",
    "GCPGPU_EMULATOR",
)


def clients(gcp: Any) -> Clients:
    """gcpgpu's own Clients aimed at the running emulator `gcp`."""
    return Clients(emulator=gcp.address)


def make_plan(**kw: Any):
    """The plan of a cluster spec: 2 nodes of a3-highgpu-8g named "c" in us-central1 unless kw says otherwise."""
    kw.setdefault("name", "c")
    kw.setdefault("nodes", 2)
    kw.setdefault("machine_type", "a3-highgpu-8g")
    return plan(ClusterSpec(**kw).validate(default_region="us-central1"), PROJECT)


def leftovers(gcp: Any) -> dict[str, list[str]]:
    """Everything in the emulated project that a fresh project does not have."""
    p = gcp.compute.project(PROJECT)
    gcp.compute._sweep(p)
    out: dict[str, list[str]] = {}
    for path, items in p.collections.items():
        kind = path.rsplit("/", 1)[-1]
        for name in items:
            default = (kind in ("networks", "subnetworks") and name == "default") or name.startswith("default-")
            if not default:
                out.setdefault(kind, []).append(name)
    return out


def refused(gcp: Any, *argv: str) -> str:
    """The one line a bad input gets from `gcpgpu ARGV`: asserts exit 2, one line, and that nothing reached
    the emulator `gcp`."""
    from click.testing import CliRunner

    from gcpgpu.cli import main

    gcp.requests.clear()
    result = CliRunner().invoke(main, list(argv))
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2, result.output
    assert len(lines) == 1, result.output
    assert gcp.requests.all() == [], [r.path for r in gcp.requests.all()]
    return lines[0]


def job_logs_of(script: str, cluster: str = "c", project: str = PROJECT, region: str = "us-central1") -> str:
    """Runs `script` as a busybox job on every node of `cluster` (job submit --wait, which must succeed) and
    returns the job's logs, each line prefixed with its node as `job logs` prints them."""
    from click.testing import CliRunner

    from gcpgpu.cli import main

    def cli(*argv: str):
        return CliRunner().invoke(main, ["--project", project, "--region", region, *argv])

    job = cli("job", "submit", "--cluster", cluster, "--image", "busybox", "--wait", "--command", script)
    assert job.exit_code == 0, job.output
    logs = cli("job", "logs", job.stdout.splitlines()[0])
    assert logs.exit_code == 0, logs.output
    return logs.output


def wait_for(predicate: Callable[[], Any], timeout: float = 60.0, what: str = "condition", interval: float = 0.05,
             explain: Callable[[], str] | None = None, most: float = 0.5) -> Any:
    """Poll `predicate` until it returns something truthy and return that; fail the test after `timeout` s,
    saying what `explain()` (when given) says of the state things were left in. The pause starts at
    `interval` and grows by half each time up to `most` (or `interval`, if larger): a predicate is often a
    whole CLI call, and polling one every 50 ms for minutes takes a core from what the test waits on."""
    deadline = time.monotonic() + timeout
    pause, most = interval, max(most, interval)
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(pause)
        pause = min(pause * 1.5, most)
    raise AssertionError(f"timed out waiting for {what}" + (f"\n{explain()}" if explain else ""))


def emulator_threads(*names: str) -> str:
    """The stacks of this process's threads whose names start with one of `names` (what a watcher is stuck in)."""
    import sys
    import traceback

    frames = sys._current_frames()
    out = []
    for t in threading.enumerate():
        if t.name.startswith(names) and t.ident in frames:
            out.append(f"thread {t.name}:\n" + "".join(traceback.format_stack(frames[t.ident])))
    return "\n".join(out) or f"no thread named {', '.join(names)}"


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def alive(pid: int) -> bool:
    """Whether process `pid` is running: a zombie (exited, not yet reaped) is not."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


class Webhook:
    """What a webhook receiver on 127.0.0.1 was sent: `got` the JSON bodies kept, `calls` every POST."""

    def __init__(self, fail_first: bool) -> None:
        self.got: list[dict] = []
        self.calls = 0
        self.fail_first = fail_first


@contextmanager
def webhook_server(*, fail_first: bool, query: str = "") -> Iterator[tuple[str, Webhook]]:
    """(url, Webhook) of a receiver on 127.0.0.1; with fail_first its first delivery gets a 503, so a
    sender's retry is exercised, and the rest are kept."""
    hook = Webhook(fail_first)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            hook.calls += 1
            if hook.fail_first and hook.calls == 1:
                self.send_response(503)
            else:
                hook.got.append(body)
                self.send_response(204)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/hooks/gcpgpu{query}", hook
    finally:
        server.shutdown()


def followers_log(gcp: Any) -> str:
    """What every node's follower printed (shown when a test fails)."""
    return "\n".join(f"{run.id.split('/')[2]}: {line.text}" for run in gcp.jobs.runner.all_runs()
                     if run.id.startswith("agent/") for line in run.log_lines())
