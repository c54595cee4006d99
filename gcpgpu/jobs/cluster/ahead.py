"""Ends a follower can see coming: a node's run ending at a set time, or host maintenance scheduled on it.

Compute v1 discovery document: `resourceStatus.scheduling.terminationTimestamp` (when the VM's run
ends: a calendar-mode reservation's window for a reservation-bound VM, or its maxRunDuration) and
`resourceStatus.upcomingMaintenance` {windowStartTime, maintenanceStatus PENDING | ONGOING}. A GPU VM
cannot live-migrate (onHostMaintenance TERMINATE), so either end stops the training on that node.

When one is less than LEAD_S away the follower says so and stops the job on its nodes the way a
recovery does (nodes.cancel: each node's agent sends SIGTERM, and the trainer saves a
checkpoint before it exits), so the run can resume from that step rather than the last periodic one.
LEAD_S is gcpgpu's own choice: long enough for a large model's checkpoint to reach Cloud Storage.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from gcpgpu.gcp import clock as cloud_clock
from gcpgpu.times import parse_timestamp

LEAD_S = 600.0
clock: Callable[[], float] = cloud_clock.now  # the emulator's, under test (gcpgpu.gcp.clock)


@dataclass(frozen=True)
class Ahead:
    node: str
    what: str  # "its run ends" | "host maintenance starts"
    when: str  # RFC 3339
    left_s: float

    def line(self) -> str:
        return f"{self.what} on {self.node} at {self.when} (in {max(int(self.left_s // 60), 0)} min)"


def due(rows: list[dict], lead_s: float | None = None, now: float | None = None) -> Ahead | None:
    """The soonest known end among the job's RUNNING nodes (rows from nodes.status, with
    `ends_at` and `maintenance`) that is less than `lead_s` away, else None."""
    lead = LEAD_S if lead_s is None else lead_s
    now = clock() if now is None else now
    found: list[Ahead] = []
    for r in rows:
        if r.get("node_status") != "RUNNING":
            continue
        ends = parse_timestamp(r.get("ends_at"))
        if ends is not None:
            found.append(Ahead(r["node"], "its run ends", r["ends_at"], ends - now))
        m = r.get("maintenance") or {}
        start = parse_timestamp(m.get("window_start"))
        if start is not None:
            found.append(Ahead(r["node"], "host maintenance starts", m["window_start"], start - now))
    soon = [a for a in found if a.left_s <= lead]
    return min(soon, key=lambda a: a.left_s) if soon else None
