"""One `up` or `down` at a time per cluster, across machines: a lease kept in the project itself.

The lease is one item of the project's commonInstanceMetadata, key `gcpgpu-lease-<cluster>`, value
JSON {holder, who, op, since, expires}. Every write sends the fingerprint that was read, so two
writers cannot both win: the loser's write (or its operation) ends in 412 CONDITION_NOT_MET and it
reads again. The holder renews the expiry from a background thread every TTL/4 and deletes the item
at the end; a holder that was killed stops renewing, and once `expires` has passed any run may take
the lease over (with the same compare-and-swap). Its times are gcpgpu.gcp.clock's: this machine's, or under
test the emulator's, so a test lets a lease lapse by setting that clock on. Why project metadata:
every run that can create a cluster can read and write it, it exists before any of the cluster's
resources does, and it is the one compute object with an optimistic lock over arbitrary keys.

A lease taken by a program on one of the cluster's nodes (its follower: on_node) names that VM, and
it ends with the VM: once Compute says the VM is no longer RUNNING (a Spot preemption's notice, a host
error, a stop or delete) another run takes the lease over at once instead of waiting out its expiry.
"""

from __future__ import annotations

import contextlib
import getpass
import json
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from typing import Any

from gcpgpu.errors import CloudError
from gcpgpu.gcp import clock
from gcpgpu.gcp.clients import Clients
from gcpgpu.gcp.operations import call, retrying, wait

KEY_PREFIX = "gcpgpu-lease-"
TTL_SECONDS = 120.0  # a killed holder blocks others for at most this long after its last renewal
POLL_SECONDS = 2.0


class LeaseHeld(CloudError):
    """Another run holds the cluster's lease (and the caller chose not to wait); `holder`: its lease."""

    def __init__(self, message: str, holder: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.holder = dict(holder or {})


class LeaseLost(CloudError):
    """This run's lease expired while it was stalled and another run may have worked since: it must
    touch nothing more (no roll-back either: a newer run may have adopted what it made)."""


_NODE: dict[str, str] | None = None  # the VM this process runs on, when it is a node's program (on_node)


def on_node(name: str, zone: str, instance_id: str) -> None:
    """Say that this process runs on the VM `name` (its id `instance_id`): the leases it takes name it, so
    they end when Compute says the VM is going (holder_gone)."""
    global _NODE
    _NODE = {"name": name, "zone": zone, "id": str(instance_id)}


def this_node() -> str | None:
    """The name of the VM this process runs on, when it is a node's program (on_node), else None."""
    return _NODE["name"] if _NODE else None


def holder_gone(clients: Clients, project: str, holder: dict[str, Any]) -> bool:
    """Whether the lease `holder` was taken on a VM that Compute says is no longer RUNNING (or is gone,
    or is another VM of the same name now). A holder not on a node, or a VM that cannot be read, is
    not gone: its lease lapses at its expiry."""
    node = holder.get("node")
    if not isinstance(node, dict) or not node.get("name") or not node.get("zone"):
        return False
    try:
        inst = clients.compute("InstancesClient").get(project=project, zone=node["zone"], instance=node["name"])
    except Exception as e:
        return getattr(e, "code", None) == 404  # deleted: gone; anything else says nothing
    return inst.status != "RUNNING" or (bool(node.get("id")) and str(inst.id) != str(node["id"]))


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _is_conflict(exc: BaseException) -> bool:
    return getattr(exc, "code", None) == 412


def describe(holder: dict[str, Any], now: float | None = None) -> str:
    """'up by ana@laptop pid 4242 since 10:02:11 UTC, lease expires in 95 s'."""
    left = float(holder.get("expires", 0)) - (clock.now() if now is None else now)
    return (f"{holder.get('op', 'a run')} by {holder.get('who', '?')} since {_iso(float(holder.get('since', 0)))}, "
            f"lease expires in {max(0, round(left))} s")


class Lease:
    """The lease on one cluster's name, for one run (holder id = the run's attempt id)."""

    def __init__(self, clients: Clients, project: str, cluster: str, holder: str, op: str,
                 ttl: float | None = None) -> None:
        self.clients, self.project, self.cluster = clients, project, cluster
        self.holder, self.op = holder, op
        self.ttl = float(ttl if ttl is not None else os.environ.get("GCPGPU_LEASE_TTL", TTL_SECONDS))
        self.key = f"{KEY_PREFIX}{cluster}"
        self.who = f"{getpass.getuser()}@{socket.gethostname()} pid {os.getpid()}"
        self.since = clock.now()
        self.held = False
        self.lost: str | None = None  # set when a renewal finds the lease taken
        self.expires = 0.0  # expiry this run last wrote (gcpgpu.gcp.clock's time, as the stored lease holds it)
        self._next_expires = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ the item, read and swapped
    def _read(self) -> tuple[str, list[dict[str, str]], dict[str, Any] | None]:
        proj = retrying()(self.clients.compute("ProjectsClient").get)(project=self.project)
        md = proj.common_instance_metadata
        items = [{"key": i.key, "value": i.value} for i in md.items]
        mine = next((i for i in items if i["key"] == self.key), None)
        current = None
        if mine is not None:
            try:
                current = json.loads(mine["value"])
            except ValueError:
                current = {"holder": "?", "who": "unreadable lease", "expires": 0}
        return md.fingerprint, items, current

    def _swap(self, change: Callable[[dict[str, Any] | None], dict[str, Any] | None | bool],
              confirm_by_read: bool = False) -> dict[str, Any] | None:
        """Read, decide, write under the fingerprint; retry on a lost race. Returns the lease read last.

        change(current) returns the new value, None to delete the item, or False to leave it alone.
        confirm_by_read: a read that already shows the write stands for its operation (see _landed).
        """
        from gcpgpu.gcp.compute import compute_types

        compute = compute_types()

        for _ in range(50):
            fp, items, current = self._read()
            new = change(current)
            if new is False:
                return current
            rest = [i for i in items if i["key"] != self.key]
            value = None if new is None else json.dumps(new, sort_keys=True)
            if value is not None:
                rest.append({"key": self.key, "value": value})
            elif len(rest) == len(items):
                return current  # nothing to delete
            body = compute.Metadata(fingerprint=fp, items=[compute.Items(**i) for i in rest])
            try:
                op = call(self.clients.compute("ProjectsClient").set_common_instance_metadata,
                          {"project": self.project, "metadata_resource": body})
                if not (confirm_by_read and self._landed(value)):
                    wait(self.clients, self.project, op)
                return current
            except Exception as e:
                if not _is_conflict(e):
                    raise
            time.sleep(0.05)
        raise CloudError(f"could not update the lease of cluster {self.cluster}: project metadata keeps changing")

    def _landed(self, value: str | None) -> bool:
        """True if a fresh read shows exactly what this run wrote (`value`, or the item gone for None).

        A write under a stale fingerprint never takes effect (it fails, at once or in its operation),
        and our value is unique (holder, since, expires), so seeing it proves the swap won: one read
        instead of waiting out the operation. If the read does not show it yet, the caller waits."""
        mine = next((i for i in self._read()[1] if i["key"] == self.key), None)
        return mine is None if value is None else mine is not None and mine["value"] == value

    def _value(self) -> dict[str, Any]:
        value = {"holder": self.holder, "who": self.who, "op": self.op, "since": self.since,
                 "expires": clock.now() + self.ttl, **({"node": dict(_NODE)} if _NODE else {})}
        self._next_expires = float(value["expires"])
        return value

    # ------------------------------------------------------------------ acquire / renew / release
    def try_acquire(self, on_free: Callable[[], None] | None = None) -> dict[str, Any] | None:
        """Take the lease if it is free, expired, ours or its holder's VM is going (holder_gone); else
        return who holds it.

        on_free() runs each time a read finds the lease free, right before the write that takes it: the
        last call is the one whose read the winning write was based on, so whatever on_free starts
        (`up` observes the cloud) sees no other run's changes in flight."""
        blocker: dict[str, Any] = {}

        def change(current: dict[str, Any] | None) -> Any:
            blocker.clear()
            if current and current.get("holder") != self.holder and float(current.get("expires", 0)) > clock.now() \
                    and not holder_gone(self.clients, self.project, current):
                blocker.update(current)
                return False
            if on_free is not None:
                on_free()
            return self._value()

        self._swap(change, confirm_by_read=True)
        if blocker:
            return blocker
        self.held = True
        self.expires = self._next_expires
        return None

    def acquire(self, wait_for_it: bool = True, on_wait: Callable[[dict[str, Any]], None] | None = None,
                timeout: float = 3600.0, on_free: Callable[[], None] | None = None) -> None:
        """Take the lease, waiting (calling on_wait with the holder each round) or raising LeaseHeld."""
        deadline = clock.monotonic() + timeout
        while True:
            holder = self.try_acquire(on_free)
            if holder is None:
                self._start_renewing()
                return
            if not wait_for_it or clock.monotonic() > deadline:
                raise LeaseHeld(f"cluster {self.cluster} is busy: {describe(holder)}; try again later, or wait "
                                "without --no-wait", holder)
            if on_wait:
                on_wait(holder)
            clock.sleep(POLL_SECONDS)

    def renew(self) -> bool:
        """Push the expiry forward if the lease is still ours; False (and `lost` set) if it is not.

        Ours means the stored lease still names this run, expired or not: nobody took it over, so
        nothing changed under it. Gone means another run took it over and has released it since."""
        if self.lost:
            return False
        taken: dict[str, Any] = {}

        def change(current: dict[str, Any] | None) -> Any:
            if current is None or current.get("holder") != self.holder:
                taken.update(current or {"who": "another run (it has ended)", "op": "a run", "since": 0, "expires": 0})
                return False
            return self._value()

        self._swap(change)
        if taken:
            self.lost = describe(taken) if taken.get("since") else str(taken["who"])
            return False
        self.expires = self._next_expires
        return True

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if not self.held:
            return
        self.held = False
        # Confirmed by a read, not by waiting out the operation: the release is off the critical path.
        self._swap(lambda current: None if current and current.get("holder") == self.holder else False,
                   confirm_by_read=True)

    def _start_renewing(self) -> None:
        def loop() -> None:
            while not clock.wait(self._stop, self.ttl / 4):
                with contextlib.suppress(Exception):  # a failed renewal is retried next round
                    if not self.renew():
                        return

        self._thread = threading.Thread(target=loop, name=f"lease-{self.cluster}", daemon=True)
        self._thread.start()

    def check(self) -> None:
        """The fence before every mutating step: raise LeaseLost unless this run still holds the lease.

        Within the first half of the lease's life since the last renewal this asks nothing (the
        renewer keeps it fresh); later (the run stalled: Ctrl-Z, a sleeping laptop, a slow network)
        it renews now, and a lease that another run took over in the meantime stops the run."""
        if self.held and not self.lost and clock.now() > self.expires - self.ttl / 2:
            self.renew()
            # A renewal written before a stall and acknowledged after it proves nothing about now:
            # renew once more, which finds the other run's lease (or none) if one came meanwhile.
            if not self.lost and clock.now() >= self.expires:
                self.renew()
            if not self.lost and clock.now() >= self.expires:
                self.lost = "no run: this run's own renewals expire before they are acknowledged"
        if self.lost:
            raise LeaseLost(f"lost the lease of cluster {self.cluster} to {self.lost} while this run was "
                            "stalled; stopping without touching anything more (run the command again)")


@contextlib.contextmanager
def holding(lease: Lease, wait_for_it: bool, on_wait: Callable[[dict[str, Any]], None] | None = None
            ) -> Iterator[Lease]:
    lease.acquire(wait_for_it, on_wait)
    try:
        yield lease
    finally:
        with contextlib.suppress(Exception):  # an expired lease is taken over; never hide the real error
            lease.release()


def current(clients: Clients, project: str, cluster: str) -> dict[str, Any] | None:
    """Who holds the cluster's lease now (None if nobody, it expired, or its holder's VM is going)."""
    got = Lease(clients, project, cluster, holder="-", op="status")._read()[2]
    if got and float(got.get("expires", 0)) > clock.now() and not holder_gone(clients, project, got):
        return got
    return None
