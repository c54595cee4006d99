"""One attempt at changing a cluster: the seam between cluster/'s helpers and Compute.

`up`, `down`, `shrink` and a recovery's rebuild each open a Session: the clients, the project, the
reporter, the attempt id written on everything the attempt creates, and the lease it holds. The
helpers (flex-start placement, rank labels, fabric order, roll-back) take a Session and use its
verbs, never the `Cluster` object:

    own(body)        a copy of a resource that says which attempt creates it
    call             one mutation
    start / finish   start calls in parallel (first error raised) / wait for their operations
    batch            both: the one "start all, wait for all, raise the first error"
    delete           delete a set of one kind of resource, already-gone counting as deleted
    clean_zone       remove what this attempt left in a zone after a failed placement

Every mutating verb first checks the attempt's lease (Lease.check): a run that stalled past its
lease while another run took the cluster over stops there with LeaseLost and touches nothing more.
"""

from __future__ import annotations

import contextlib
import copy
import json
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from gcpgpu.errors import one_line
from gcpgpu.gcp.clients import Clients
from gcpgpu.gcp.operations import batch, call, finish_all, raise_first, start_all, wait

from .kinds import NODES, RESERVATIONS, Kind
from .lease import Lease, describe
from .names import LABEL_ATTEMPT, LABEL_CLUSTER, marker
from .observe import observe_nodes
from .teardown import delete_batch


class Reporter:
    """Progress of a long command. `step` marks each phase (tests interrupt there). Silent by default;
    the CLI's ConsoleReporter (gcpgpu/cli/progress.py) shows it."""

    def step(self, key: str, text: str) -> None:
        pass

    def note(self, text: str) -> None:
        pass

    @contextlib.contextmanager
    def waiting(self, text: str) -> Iterator[Any]:
        yield lambda _t: None


def new_attempt_id() -> str:
    """One `up` (or `down`) attempt: recorded on what it creates and as the lease's holder."""
    return uuid.uuid4().hex[:12]


def message(type_name: str, body: dict) -> Any:
    """A compute_v1 message (e.g. "Network") from the API's own JSON, as a plan keeps its resources."""
    from gcpgpu.gcp.compute import compute_types

    compute = compute_types()

    return getattr(compute, type_name).from_json(json.dumps(body))


@dataclass
class Session:
    clients: Clients
    project: str
    report: Reporter = field(default_factory=Reporter)
    attempt: str = field(default_factory=new_attempt_id)
    lease: Lease | None = None

    def client(self, name: str) -> Any:
        return self.clients.compute(name)

    def own(self, body: dict) -> dict:
        """A copy of a plan's resource that says which attempt creates it (label on VMs, description elsewhere)."""
        out = copy.deepcopy(body)
        # A bulkInsert (the VMs it makes) or one instance (a flex-start insert).
        props = out["instanceProperties"] if "instanceProperties" in out else out if "machineType" in out else None
        if props is not None:
            props["labels"] = {**props.get("labels", {}), LABEL_ATTEMPT: self.attempt}
            props["description"] = f"{marker(str(props['labels'].get(LABEL_CLUSTER)))} node attempt={self.attempt}"
        else:
            out["description"] = f"{out.get('description', '')} attempt={self.attempt}".strip()
        return out

    def owned(self, type_name: str, body: dict) -> Any:
        """own(body) as the compute_v1 message a client's insert takes."""
        return message(type_name, self.own(body))

    # -- mutations: each step first proves the attempt still holds its lease (the fence) -----------
    def call(self, fn: Callable[..., Any], request: dict[str, Any]) -> Any:
        """One mutation (gcp.operations.call), fenced right before it is sent: a check a whole batch
        earlier would let a run stopped between the check and its requests send them after it resumes."""
        self.check_lease()
        return call(fn, request)

    def start(self, fn: Callable[[Any], Any], items: Iterable[Any]) -> list[Any]:
        self.check_lease()
        return start_all(fn, items)

    def finish(self, ops: Iterable[Any]) -> None:
        finish_all(self.clients, self.project, ops)

    def batch(self, fn: Callable[[Any], Any], items: Iterable[Any]) -> list[Any]:
        self.check_lease()
        return batch(self.clients, self.project, fn, items)

    def wait(self, op: Any) -> None:
        wait(self.clients, self.project, op)

    # -- deleting ---------------------------------------------------------------------------------
    def delete(self, kind: Kind, items: list[tuple[str | None, str]]) -> None:
        """Delete (zone/region, name) items of one kind in parallel and wait; gone counts as deleted;
        the first error raised."""
        self.check_lease()
        raise_first(delete_batch(self.clients, self.project, kind, items, self.check_lease))

    def clean_zone(self, cluster: str, zone: str, names: list[str], reservation: str | None = None) -> None:
        """After a failed placement in `zone`, remove the VMs this attempt left there (bulkInsert may place
        some) and the reservation it made for them."""
        left = [n for n in observe_nodes(self.clients, self.project, cluster)
                if n.name in names and n.zone == zone and n.labels.get(LABEL_ATTEMPT) == self.attempt]
        if left:
            self.report.note(f"{zone}: removing {len(left)} VM(s) the failed attempt left")
            self.delete(NODES, [(zone, n.name) for n in left])
        if reservation:
            self.delete(RESERVATIONS, [(zone, reservation)])

    # -- the lease --------------------------------------------------------------------------------
    @contextlib.contextmanager
    def holding(self, cluster: str, op: str, wait_for_lease: bool,
                on_free: Callable[[], None] | None = None) -> Iterator[Lease]:
        """Hold cluster's lease for this attempt (waiting for another run's to end, or not); on_free as
        in Lease.try_acquire."""
        lease = Lease(self.clients, self.project, cluster, self.attempt, op)
        self.lease = lease
        with self.report.waiting(f"taking cluster {cluster}'s lease") as update:
            lease.acquire(wait_for_lease, lambda h: update(f"cluster {cluster} is busy: {describe(h)}"),
                          on_free=on_free)
        try:
            yield lease
        finally:
            try:
                lease.release()
            except Exception as e:  # an unreleased lease expires; never hide the real error, but say it stays
                self.report.note(f"cluster {cluster}'s lease stays in the project's metadata ({lease.key}) "
                                 f"until it lapses, within {lease.ttl:g} s: releasing it failed "
                                 f"({one_line(e)}); 'gcpgpu cluster down {cluster}' or a re-run takes it over")

    def check_lease(self) -> None:
        """Raise LeaseLost if this attempt no longer holds its lease (it stalled past the expiry and
        another run took over): called right before every mutating step."""
        if self.lease is not None:
            self.lease.check()
