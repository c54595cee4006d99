"""Compute emulator state shared by every resource family: projects, the lock, clock, ids and helpers.

Resources are stored as the JSON the real API returns (camelCase), plus private keys starting with
"_" that are stripped on the way out. Time-dependent state (operation status, instance status,
deletion) is derived from timestamps when read, so nothing runs in the background, a frozen clock
makes tests deterministic, and the whole state serializes to a file as it is.
"""

from __future__ import annotations

import copy
import functools
import re
import threading
from collections.abc import Callable
from typing import Any

from ..core import (
    ApiError,
    Clock,
    Faults,
    IdSource,
    invalid,
    not_found,
    stable_number,
)
from ..events import VmEvents
from ..world import World

BASE = "https://www.googleapis.com/compute/v1"
GPU_FREE_MIGRATION_ERROR = (
    "Instances with guest accelerators do not support live migration; "
    "set scheduling.onHostMaintenance to TERMINATE."
)
LABEL_KEY = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
LABEL_VALUE = re.compile(r"^[a-z0-9_-]{0,63}$")
MAX_PAGE = 500
FLEX_START_RANGE = (600, 604800)

# Zone-scoped, region-scoped and global collections this backend serves.
ZONAL = ("instances", "reservations", "disks")
REGIONAL = ("subnetworks", "resourcePolicies", "instanceTemplates", "routers")
GLOBAL = ("networks", "firewalls", "instanceTemplates", "addresses")


def last(link: str | None) -> str:
    """The name at the end of a resource link or partial path."""
    return (link or "").rstrip("/").rsplit("/", 1)[-1]


def public(resource: dict) -> dict:
    """The resource as the wire shows it: private bookkeeping keys removed, a copy the caller may change."""
    return {k: _clone(v) for k, v in resource.items() if not k.startswith("_")}


_ATOMS = (str, int, float, bool, type(None))


def _clone(value: Any) -> Any:
    """A deep copy of JSON-shaped data (what resources hold), ~3x quicker than copy.deepcopy on it: every
    read renders its resources, and an aggregatedList of 1,024 VMs renders all of them per page."""
    kind = type(value)
    if kind is dict:
        return {k: _clone(v) for k, v in value.items()}
    if kind is list:
        return [_clone(v) for v in value]
    return value if kind in _ATOMS else copy.deepcopy(value)


class Project:
    """One project's resources: collection path ("zones/us-central1-a/instances") -> name -> resource."""

    def __init__(self, name: str, number: str) -> None:
        self.name = name
        self.number = number
        self.collections: dict[str, dict[str, dict]] = {}
        self.operations: dict[str, dict[str, dict]] = {}  # scope ("zones/x", "global") -> name -> op
        self.request_ids: dict[str, str] = {}  # requestId -> operation selfLink
        self.next_ip: dict[str, int] = {}  # subnetwork link -> next host offset
        self.common_metadata: dict | None = None  # the project's commonInstanceMetadata (projects.py)

    def coll(self, path: str) -> dict[str, dict]:
        return self.collections.setdefault(path, {})

    def iter_kind(self, kind: str) -> list[tuple[str, dict]]:
        """Every resource of one kind across scopes, with its collection path."""
        out = []
        for path, items in self.collections.items():
            if path.rsplit("/", 1)[-1] == kind or path == f"global/{kind}":
                out.extend((path, r) for r in items.values())
        return out


def _mutation(sweep: bool = True) -> Callable[[Callable[..., dict]], Callable[..., dict]]:
    """What every mutating call does around its own work, written once.

    Under the lock: a retried call with a requestId already seen gets the first call's operation
    and no second effect; otherwise the project is made (and, with `sweep`, rid of finished
    deletions), the method runs with the Project where its callers pass the project id, and the
    operation it returns is remembered under the requestId. Callers pass request_id by keyword.
    """

    def wrap(fn: Callable[..., dict]) -> Callable[..., dict]:
        @functools.wraps(fn)
        def mutation(self: Any, project: str, *args: Any, request_id: str | None = None, **kw: Any) -> dict:
            with self._lock:
                replay = self._replay(project, request_id)
                if replay:
                    return self.render_op(replay)
                p = self.project(project)
                if sweep:
                    self._sweep(p)
                op = fn(self, p, *args, **kw)
                if request_id:
                    p.request_ids[request_id] = op["selfLink"]
                return op

        return mutation

    return wrap




class BackendBase:
    """The shared state every resource family's mixin reads and changes, under one lock."""

    def __init__(self, world: World, faults: Faults, clock: Clock | None = None, ids: IdSource | None = None,
                 events: VmEvents | None = None) -> None:
        self.world = world
        self.faults = faults
        self.clock = clock or Clock()
        self.ids = ids or IdSource()
        # Where this backend says that a VM's metadata changed or that a VM was lost (the job agent listens).
        self.events = events or VmEvents()
        self._lock = threading.RLock()
        self.projects: dict[str, Project] = {}

    # ------------------------------------------------------------------ state
    def reset(self) -> None:
        with self._lock:
            self.projects.clear()

    def snapshot(self) -> dict:
        """All state as plain JSON (for the server's --state-file)."""
        with self._lock:
            # A deep copy taken under the lock: the caller serializes it while other requests
            # go on mutating the live dicts.
            return copy.deepcopy({
                name: {
                    "number": p.number,
                    "collections": p.collections,
                    "operations": p.operations,
                    "request_ids": p.request_ids,
                    "next_ip": p.next_ip,
                    "common_metadata": p.common_metadata,
                }
                for name, p in self.projects.items()
            })

    def restore(self, data: dict) -> None:
        with self._lock:
            self.projects.clear()
            for name, d in data.items():
                p = Project(name, d["number"])
                p.collections = d["collections"]
                p.operations = d["operations"]
                p.request_ids = d.get("request_ids", {})
                p.next_ip = d.get("next_ip", {})
                p.common_metadata = d.get("common_metadata")
                self.projects[name] = p
            # Ids are unique per emulator: new resources must not reuse the loaded ones' ids.
            used = [int(r["id"]) for p in self.projects.values()
                    for coll in [*p.collections.values(), *p.operations.values()] for r in coll.values()
                    if str(r.get("id", "")).isdigit()]
            if used:
                self.ids.skip_past(max(used))

    def project(self, name: str) -> Project:
        """A project exists as soon as it is named, with a default network as real projects have."""
        check_project(name)
        # Under the lock: read-only calls (zones.list) reach here outside it, and two threads
        # creating the same project would each seed one and the loser's resources would vanish.
        with self._lock:
            p = self.projects.get(name)
            if p is None:
                p = Project(name, str(100000000000 + stable_number(name, 899999999999)))
                self.projects[name] = p
                self._seed_default_network(p)
            return p

    def project_ids(self, number: str) -> list[str]:
        """The ids of the projects here with project number `number` (APIs such as Vertex AI name a project by it)."""
        with self._lock:
            return [p.name for p in self.projects.values() if p.number == number]

    # ------------------------------------------------------------------ helpers
    def now(self) -> float:
        return self.clock.now()

    def _op_seconds(self) -> float:
        s = self.faults.operation_seconds
        return self.world.timings["operation_seconds"] if s is None else float(s)

    def link(self, project: str, path: str) -> str:
        return f"{BASE}/projects/{project}/{path}"

    # The real API refuses an unknown zone or region in a collection's path as a bad argument
    # ("Invalid value for field 'zone': 'x'. Unknown zone.", 400); only zones.get and regions.get
    # on it answer 404 notFound.
    def _check_zone(self, zone: str) -> str:
        region = self.world.region_of(zone)
        if region is None:
            raise invalid("zone", zone, "Unknown zone.")
        return region

    def _check_region(self, region: str) -> None:
        if region not in self.world.regions:
            raise invalid("region", region, "Unknown region.")

    def _get(self, project: str, path: str, name: str) -> dict:
        p = self.project(project)
        res = p.coll(path).get(name)
        if res is None:
            raise not_found(f"projects/{project}/{path}/{name}")
        return res

    def _sweep(self, p: Project) -> None:
        """Forget resources whose deletion has finished by now (derived, never scheduled)."""
        self._tick_flex(p)  # queued flex-start VMs take capacity that appeared, or expire
        self._tick_future(p)  # future reservations reach their window (compute/future.py)
        now = self.now()
        for items in p.collections.values():
            for name in [n for n, r in items.items() if r.get("_gone_at") is not None and r["_gone_at"] <= now]:
                del items[name]


# ---------------------------------------------------------------------- module helpers
_HTTP_MESSAGES = {400: "BAD REQUEST", 403: "FORBIDDEN", 404: "NOT FOUND", 409: "CONFLICT", 503: "SERVICE UNAVAILABLE"}


def check_project(name: str) -> None:
    if not re.match(r"^[a-z][-a-z0-9]{4,28}[a-z0-9]$|^[a-z][-a-z0-9.:]{0,61}[a-z0-9]$", name or ""):
        raise invalid("project", name, "Must be a valid project id.")


def _kind_word(kind: str) -> str:
    return {"resourcePolicies": "resource policy", "subnetworks": "subnetwork", "networks": "network",
            "firewalls": "firewall", "reservations": "reservation", "instances": "instance",
            "instanceTemplates": "instance template", "routers": "router", "addresses": "address", "disks": "disk"}.get(kind, kind)


def _check_labels(labels: dict, field_name: str) -> None:
    if len(labels) > 64:
        raise invalid(field_name, len(labels), "At most 64 labels.")
    for k, v in labels.items():
        if not LABEL_KEY.match(str(k)):
            raise invalid(f"{field_name}.key", k, "Label keys start with a lowercase letter and hold at most 63 of [a-z0-9_-].")
        if not LABEL_VALUE.match(str(v)):
            raise invalid(f"{field_name}.value", v, "Label values hold at most 63 of [a-z0-9_-].")


def _names_from_pattern(pattern: str, n: int, taken: set[str]) -> list[str]:
    """namePattern 'node-####' -> node-0001, node-0002, ... skipping names already taken."""
    m = re.search(r"#+", pattern)
    assert m
    width = len(m.group(0))
    out, i = [], 1
    while len(out) < n:
        name = pattern[: m.start()] + str(i).zfill(width) + pattern[m.end():]
        if name not in taken:
            out.append(name)
        i += 1
    return out


def _stockout_error(zone: str, machine_type: str) -> ApiError:
    return ApiError(
        503,
        "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS",
        f"The zone 'projects/-/zones/{zone}' does not have enough resources available to fulfill the request.  "
        f"'(resource type:compute)'.",
        details=[
            {"resourceUnavailable": {"resourceType": "compute", "zone": zone, "machineType": machine_type}},
        ],
    )


def _quota_error(metric: str, limit: float, usage: float, region: str | None) -> ApiError:
    where = f"in region {region}" if region else "globally"
    details = [
        {"errorInfo": {"reason": "QUOTA_EXCEEDED", "domain": "compute.googleapis.com",
                       "metadatas": {"quota_limit": metric, "quota_metric": metric, "usage": str(usage)}}},
        {"quotaInfo": {"metricName": f"compute.googleapis.com/{metric.lower()}", "limitName": metric,
                       "dimensions": {"region": region} if region else {"global": "global"}, "limit": limit}},
    ]
    return ApiError(403, "QUOTA_EXCEEDED", f"Quota '{metric}' exceeded.  Limit: {limit} {where}.", details=details)
