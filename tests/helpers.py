"""Helpers the CLI and cluster tests share: the emulated project, a plan, what a cluster leaves behind.

Fixtures built on these (`cluster`) live in tests/conftest.py.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gcpgpu.cluster.plan import plan
from gcpgpu.cluster.spec import ClusterSpec
from gcpgpu.gcp.clients import Clients

PROJECT = "test-proj"


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


def wait_for(predicate: Callable[[], Any], timeout: float = 60.0, what: str = "condition", interval: float = 0.05) -> Any:
    """Poll `predicate` until it returns something truthy and return that; fail the test after `timeout` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {what}")


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
