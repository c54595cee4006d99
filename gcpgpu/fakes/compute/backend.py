"""Compute Engine state and behaviour: the part of the emulator that knows what a VM is.

Resources are stored as the JSON the real API returns (camelCase), plus private keys starting with
"_" that are stripped on the way out. Time-dependent state (operation status, instance status,
deletion) is derived from timestamps when read, so nothing runs in the background, a frozen clock
makes tests deterministic, and the whole state serializes to a file as it is.
"""

from __future__ import annotations

import copy
import functools
import ipaddress
import re
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from ..core import (
    ApiError,
    Clock,
    Faults,
    IdSource,
    already_exists,
    check_name,
    fingerprint,
    invalid,
    not_found,
    required,
    rfc3339,
    stable_number,
)
from ..world import World
from . import filters

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
REGIONAL = ("subnetworks", "resourcePolicies")
GLOBAL = ("networks", "firewalls")


def last(link: str | None) -> str:
    """The name at the end of a resource link or partial path."""
    return (link or "").rstrip("/").rsplit("/", 1)[-1]


def public(resource: dict) -> dict:
    """The resource as the wire shows it: private bookkeeping keys removed."""
    return {k: copy.deepcopy(v) for k, v in resource.items() if not k.startswith("_")}


class Project:
    """One project's resources: collection path ("zones/us-central1-a/instances") -> name -> resource."""

    def __init__(self, name: str, number: str) -> None:
        self.name = name
        self.number = number
        self.collections: dict[str, dict[str, dict]] = {}
        self.operations: dict[str, dict[str, dict]] = {}  # scope ("zones/x", "global") -> name -> op
        self.request_ids: dict[str, str] = {}  # requestId -> operation selfLink
        self.next_ip: dict[str, int] = {}  # subnetwork link -> next host offset

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
        def mutation(self: ComputeBackend, project: str, *args: Any, request_id: str | None = None) -> dict:
            with self._lock:
                replay = self._replay(project, request_id)
                if replay:
                    return self.render_op(replay)
                p = self.project(project)
                if sweep:
                    self._sweep(p)
                op = fn(self, p, *args)
                if request_id:
                    p.request_ids[request_id] = op["selfLink"]
                return op

        return mutation

    return wrap


class ComputeBackend:
    """The Compute Engine v1 API's behaviour over in-memory state, one lock for all of it."""

    def __init__(self, world: World, faults: Faults, clock: Clock | None = None, ids: IdSource | None = None) -> None:
        self.world = world
        self.faults = faults
        self.clock = clock or Clock()
        self.ids = ids or IdSource()
        self._lock = threading.RLock()
        self.projects: dict[str, Project] = {}
        # Called as f(project, zone, name) after an instance's metadata changes (the emulated job agent).
        self.metadata_observers: list[Callable[[str, str, str], None]] = []

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
        now = self.now()
        for items in p.collections.values():
            for name in [n for n, r in items.items() if r.get("_gone_at") is not None and r["_gone_at"] <= now]:
                del items[name]

    # ------------------------------------------------------------------ operations
    def _new_op(
        self,
        project: str,
        scope: str,
        op_type: str,
        target_link: str,
        target_id: str | None = None,
        error: ApiError | None = None,
    ) -> dict:
        p = self.project(project)
        now = self.now()
        dur = self._op_seconds()
        name = f"operation-{int(now * 1000)}-{uuid.uuid4().hex[:13]}-{uuid.uuid4().hex[:8]}"
        op: dict[str, Any] = {
            "kind": "compute#operation",
            "id": self.ids.next(),
            "name": name,
            "operationType": op_type,
            "targetLink": target_link,
            "user": "emulator@gcpgpu.local",
            "insertTime": rfc3339(now),
            "selfLink": self.link(project, f"{scope}/operations/{name}"),
            "_t0": now,
            "_pending_s": dur * self.world.timings.get("pending_share", 0.2),
            "_done_at": now + dur,
        }
        if target_id:
            op["targetId"] = target_id
        if scope.startswith("zones/"):
            op["zone"] = self.link(project, scope)
        elif scope.startswith("regions/"):
            op["region"] = self.link(project, scope)
        if error is not None:
            op["_error"] = {
                "errors": [
                    {"code": error.reason, "message": error.message, **({"errorDetails": error.details} if error.details else {})}
                ]
            }
            op["_http"] = [error.code, _HTTP_MESSAGES.get(error.code, "ERROR")]
        p.operations.setdefault(scope, {})[name] = op
        return op

    def render_op(self, op: dict) -> dict:
        now = self.now()
        out = public(op)
        if now < op["_t0"] + op["_pending_s"] and now < op["_done_at"]:
            out.update(status="PENDING", progress=0)
        elif now < op["_done_at"]:
            span = max(op["_done_at"] - op["_t0"], 1e-9)
            out.update(status="RUNNING", progress=int(100 * (now - op["_t0"]) / span), startTime=rfc3339(op["_t0"]))
        else:
            out.update(status="DONE", progress=100, startTime=rfc3339(op["_t0"]), endTime=rfc3339(op["_done_at"]))
            if "_error" in op:
                out["error"] = copy.deepcopy(op["_error"])
                out["httpErrorStatusCode"], out["httpErrorMessage"] = op["_http"]
        return out

    def _replay(self, project: str, request_id: str | None) -> dict | None:
        """A retried mutation with the same requestId gets the first one's operation, not a second effect."""
        if not request_id:
            return None
        link = self.project(project).request_ids.get(request_id)
        if link is None:
            return None
        scope, name = link.split(f"/projects/{project}/", 1)[1].split("/operations/")
        return self.project(project).operations.get(scope, {}).get(name)

    def get_operation(self, project: str, scope: str, name: str) -> dict:
        with self._lock:
            op = self.project(project).operations.get(scope, {}).get(name)
            if op is None:
                raise not_found(f"projects/{project}/{scope}/operations/{name}")
            return self.render_op(op)

    def wait_operation(self, project: str, scope: str, name: str, timeout: float = 120.0) -> dict:
        """operations.wait: returns when DONE or after `timeout` seconds of wall time, like the real one."""
        deadline = time.monotonic() + timeout
        while True:
            op = self.get_operation(project, scope, name)
            # A frozen clock only moves when a test advances it: answer at once, as the real wait
            # does when its deadline passes, instead of holding the client for two minutes.
            if op["status"] == "DONE" or time.monotonic() >= deadline or self.clock.frozen:
                return op
            with self._lock:
                remaining = self.project(project).operations[scope][name]["_done_at"] - self.now()
            time.sleep(min(max(remaining, 0.005), 0.25, max(deadline - time.monotonic(), 0)))

    def delete_operation(self, project: str, scope: str, name: str) -> None:
        with self._lock:
            ops = self.project(project).operations.get(scope, {})
            if name not in ops:
                raise not_found(f"projects/{project}/{scope}/operations/{name}")
            del ops[name]

    def list_operations(self, project: str, scope: str, flt: str | None) -> list[dict]:
        with self._lock:
            ops = [self.render_op(o) for o in self.project(project).operations.get(scope, {}).values()]
        pred = filters.parse(flt)
        return [o for o in ops if pred(o)]

    def aggregated_operations(self, project: str) -> dict[str, list[dict]]:
        with self._lock:
            p = self.project(project)
            return {scope: [self.render_op(o) for o in ops.values()] for scope, ops in p.operations.items()}

    # ------------------------------------------------------------------ read-only catalog
    def project_resource(self, project: str) -> dict:
        with self._lock:
            p = self.project(project)
            gpus = self._global_gpu_usage(p)
            return {
                "kind": "compute#project",
                "id": p.number,
                "name": project,
                "creationTimestamp": rfc3339(0),
                "selfLink": f"{BASE}/projects/{project}",
                "defaultServiceAccount": f"{p.number}-compute@developer.gserviceaccount.com",
                "commonInstanceMetadata": {"kind": "compute#metadata", "fingerprint": fingerprint([]), "items": []},
                "quotas": [
                    {"metric": m, "limit": self._limit(None, m), "usage": gpus if m == "GPUS_ALL_REGIONS" else 0.0}
                    for m in self.world.global_quotas
                ],
                "xpnProjectStatus": "UNSPECIFIED_XPN_PROJECT_STATUS",
                "defaultNetworkTier": "PREMIUM",
                "vmDnsSetting": "ZONAL_ONLY",
            }

    def zones(self, project: str) -> list[dict]:
        self.project(project)
        return [self.zone(project, z) for zones in self.world.regions.values() for z in zones]

    def zone(self, project: str, zone: str) -> dict:
        region = self.world.region_of(zone)
        if region is None:
            raise not_found(f"projects/{project}/zones/{zone}")
        return {
            "kind": "compute#zone",
            "id": str(2000 + sorted(self.world.zone_machine_types).index(zone)),
            "name": zone,
            "description": zone,
            "status": "UP",
            "region": self.link(project, f"regions/{region}"),
            "selfLink": self.link(project, f"zones/{zone}"),
            "availableCpuPlatforms": ["Intel Sapphire Rapids", "Intel Cascade Lake", "AMD Genoa"],
            "supportsPzs": False,
        }

    def regions(self, project: str) -> list[dict]:
        return [self.region(project, r) for r in self.world.regions]

    def region(self, project: str, region: str) -> dict:
        if region not in self.world.regions:
            raise not_found(f"projects/{project}/regions/{region}")
        with self._lock:
            p = self.project(project)
            self._sweep(p)
            usage = self._region_usage(p, region)
            return {
                "kind": "compute#region",
                "id": str(1000 + list(self.world.regions).index(region)),
                "name": region,
                "description": region,
                "status": "UP",
                "zones": [self.link(project, f"zones/{z}") for z in self.world.regions[region]],
                "quotas": [
                    {"metric": m, "limit": self._limit(region, m), "usage": usage.get(m, 0.0)}
                    for m in sorted(set(self.world.region_quotas) | set(self.faults.quotas.get(region, {})))
                ],
                "selfLink": self.link(project, f"regions/{region}"),
                "supportsPzs": False,
            }

    def machine_types(self, project: str, zone: str) -> list[dict]:
        self._check_zone(zone)
        return [self._machine_type(project, zone, m) for m in self.world.zone_machine_types[zone]]

    def machine_type(self, project: str, zone: str, name: str) -> dict:
        self._check_zone(zone)
        if name not in self.world.zone_machine_types[zone]:
            raise not_found(f"projects/{project}/zones/{zone}/machineTypes/{name}")
        return self._machine_type(project, zone, name)

    def _machine_type(self, project: str, zone: str, name: str) -> dict:
        info = self.world.machine_types[name]
        out = {
            "kind": "compute#machineType",
            "id": str(stable_number(name, 10**12)),
            "name": name,
            "description": f"{info.vcpus} vCPUs, {info.memory_mb // 1024} GB RAM"
            + (f", {info.gpu_count} {info.gpu}" if info.gpu else ""),
            "guestCpus": info.vcpus,
            "memoryMb": info.memory_mb,
            "maximumPersistentDisks": 128,
            "maximumPersistentDisksSizeGb": "263168",
            "zone": zone,
            "isSharedCpu": False,
            "selfLink": self.link(project, f"zones/{zone}/machineTypes/{name}"),
        }
        if info.gpu:
            out["accelerators"] = [{"guestAcceleratorType": info.gpu, "guestAcceleratorCount": info.gpu_count}]
        return out

    def accelerator_types(self, project: str, zone: str) -> list[dict]:
        self._check_zone(zone)
        return [self._accelerator_type(project, zone, a) for a in self.world.accelerators_in_zone(zone)]

    def accelerator_type(self, project: str, zone: str, name: str) -> dict:
        self._check_zone(zone)
        if name not in self.world.accelerators_in_zone(zone):
            raise not_found(f"projects/{project}/zones/{zone}/acceleratorTypes/{name}")
        return self._accelerator_type(project, zone, name)

    def _accelerator_type(self, project: str, zone: str, name: str) -> dict:
        per_vm = max(
            (self.world.machine_types[m].gpu_count for m in self.world.zone_machine_types[zone]
             if self.world.machine_types[m].gpu == name),
            default=8,
        )
        return {
            "kind": "compute#acceleratorType",
            "id": str(stable_number(name, 10**9)),
            "name": name,
            "description": self.world.gpus[name]["model"],
            "zone": self.link(project, f"zones/{zone}"),
            "maximumCardsPerInstance": per_vm,
            "selfLink": self.link(project, f"zones/{zone}/acceleratorTypes/{name}"),
        }

    def image(self, image_project: str, name: str | None = None, family: str | None = None) -> dict:
        families = self.world.images.get(image_project, {})
        if family is not None:
            if family not in families:
                raise not_found(f"projects/{image_project}/global/images/family/{family}")
            name = families[family]
        else:
            family = next((f for f, n in families.items() if n == name), None)
            if family is None:
                raise not_found(f"projects/{image_project}/global/images/{name}")
        return {
            "kind": "compute#image",
            "id": str(stable_number(name, 10**15)),
            "name": name,
            "family": family,
            "status": "READY",
            "diskSizeGb": "10",
            "archiveSizeBytes": "1000000000",
            "architecture": "X86_64",
            "guestOsFeatures": [{"type": "GVNIC"}, {"type": "UEFI_COMPATIBLE"}, {"type": "VIRTIO_SCSI_MULTIQUEUE"}],
            "licenses": [],
            "selfLink": f"{BASE}/projects/{image_project}/global/images/{name}",
            "sourceType": "RAW",
            "creationTimestamp": rfc3339(0),
        }

    def images(self, image_project: str) -> list[dict]:
        return [self.image(image_project, name=n) for n in self.world.images.get(image_project, {}).values()]

    def _resolve_image(self, project: str, source: str) -> dict:
        """sourceImage as users write it: full URL, projects/P/global/images[/family]/X, or global/images/X."""
        m = re.search(r"(?:projects/([^/]+)/)?(?:global/images/(family/)?|zones/[^/]+/(imageFamilyViews)/)([^/]+)$", source)
        if not m:
            raise invalid("resource.disks[0].initializeParams.sourceImage", source, "Must be an image path.")
        # gcloud names a family as projects/P/zones/-/imageFamilyViews/F.
        image_project, is_family, name = m.group(1) or project, m.group(2) or m.group(3), m.group(4)
        if is_family:
            return self.image(image_project, family=name)
        return self.image(image_project, name=name)

    # ------------------------------------------------------------------ quotas and capacity
    def _limit(self, region: str | None, metric: str) -> float:
        if region is None:
            return float(self.faults.quotas.get("global", {}).get(metric, self.world.global_quotas.get(metric, 0.0)))
        override = self.faults.quotas.get(region, {})
        if metric in override:
            return float(override[metric])
        return float(self.world.region_quotas.get(metric, 0.0))

    def _instance_usage(self, inst: dict) -> dict[str, float]:
        """Quota an instance holds while it exists and is not TERMINATED."""
        info = self.world.machine_types[inst["_machine_type"]]
        if self.instance_status(inst) == "TERMINATED":
            return {}
        usage = {"INSTANCES": 1.0}
        if inst.get("_reservation"):
            return usage  # the reservation already holds CPUs and GPUs
        usage["CPUS"] = float(info.vcpus)
        gpu = self._gpu_of(inst)
        if gpu:
            spot = inst.get("scheduling", {}).get("provisioningModel") == "SPOT"
            metric = self.world.gpus[gpu[0]]["spot_quota_metric" if spot else "quota_metric"]
            usage[metric] = usage.get(metric, 0.0) + gpu[1]
        return usage

    def _gpu_of(self, inst: dict) -> tuple[str, int] | None:
        accs = inst.get("guestAccelerators") or []
        if not accs:
            return None
        return last(accs[0]["acceleratorType"]), int(accs[0]["acceleratorCount"])

    def _region_usage(self, p: Project, region: str) -> dict[str, float]:
        usage: dict[str, float] = {}
        for path, inst in p.iter_kind("instances"):
            if self.world.region_of(path.split("/")[1]) == region:
                for k, v in self._instance_usage(inst).items():
                    usage[k] = usage.get(k, 0.0) + v
        for path, res in p.iter_kind("reservations"):
            if self.world.region_of(path.split("/")[1]) == region:
                for k, v in self._reservation_usage(res).items():
                    usage[k] = usage.get(k, 0.0) + v
        for kind, metric in (("resourcePolicies", "RESOURCE_POLICIES"), ("subnetworks", "SUBNETWORKS")):
            usage[metric] = float(len(p.coll(f"regions/{region}/{kind}")))
        return usage

    def _reservation_usage(self, res: dict) -> dict[str, float]:
        info = self.world.machine_types[res["_machine_type"]]
        count = float(res["specificReservation"]["count"])
        usage = {"CPUS": info.vcpus * count}
        if info.gpu:
            usage[self.world.gpus[info.gpu]["quota_metric"]] = info.gpu_count * count
        return usage

    def _global_gpu_usage(self, p: Project) -> float:
        total = 0.0
        for region in self.world.regions:
            usage = self._region_usage(p, region)
            total += sum(v for k, v in usage.items() if k.endswith("_GPUS"))
        return total

    def _check_quota(self, p: Project, region: str, extra: dict[str, float]) -> ApiError | None:
        usage = self._region_usage(p, region)
        for metric, amount in sorted(extra.items()):
            limit = self._limit(region, metric)
            if usage.get(metric, 0.0) + amount > limit:
                return _quota_error(metric, limit, usage.get(metric, 0.0), region)
        gpus = sum(v for k, v in extra.items() if k.endswith("_GPUS"))
        if gpus:
            limit = self._limit(None, "GPUS_ALL_REGIONS")
            used = self._global_gpu_usage(p)
            if used + gpus > limit:
                return _quota_error("GPUS_ALL_REGIONS", limit, used, None)
        return None

    # ------------------------------------------------------------------ generic CRUD
    def get(self, project: str, path: str, name: str) -> dict:
        with self._lock:
            p = self.project(project)
            self._sweep(p)
            return self._render(self._get(project, path, name))

    def list(self, project: str, path: str, flt: str | None = None) -> list[dict]:
        pred = filters.parse(flt)
        with self._lock:
            p = self.project(project)
            self._sweep(p)
            items = [self._render(r) for r in p.coll(path).values()]
        return [r for r in sorted(items, key=lambda r: r["name"]) if pred(r)]

    def aggregated(self, project: str, kind: str, flt: str | None = None) -> dict[str, list[dict]]:
        """{scope: [resources]} over every zone or region, as aggregatedList returns."""
        pred = filters.parse(flt)
        scopes = (
            [f"zones/{z}" for zones in self.world.regions.values() for z in zones]
            if kind in ZONAL
            else [f"regions/{r}" for r in self.world.regions]
            if kind in REGIONAL
            else ["global"]
        )
        with self._lock:
            p = self.project(project)
            self._sweep(p)
            out = {}
            for scope in scopes:
                items = [self._render(r) for r in p.coll(f"{scope}/{kind}").values()]
                out[scope] = [r for r in sorted(items, key=lambda r: r["name"]) if pred(r)]
            return out

    def _render(self, res: dict) -> dict:
        out = public(res)
        kind = res.get("kind")
        if kind == "compute#instance":
            out["status"] = self.instance_status(res)
        elif kind == "compute#reservation":
            out["specificReservation"]["inUseCount"] = str(self._reservation_in_use(res))
        return out

    def _insert(self, p: Project, path: str, scope: str, res: dict) -> dict:
        name = res["name"]
        if name in p.coll(path):
            raise already_exists(f"projects/{p.name}/{path}/{name}")
        now = self.now()
        res.setdefault("id", self.ids.next())
        res.setdefault("creationTimestamp", rfc3339(now))
        res["selfLink"] = self.link(p.name, f"{path}/{name}")
        p.coll(path)[name] = res
        return self.render_op(self._new_op(p.name, scope, "insert", res["selfLink"], res["id"]))

    @_mutation()
    def delete(self, p: Project, path: str, name: str) -> dict:
        """Delete a resource, refusing (as GCP does) while another resource uses it."""
        scope, kind = path.rsplit("/", 1)
        res = self._get(p.name, path, name)
        if res.get("_gone_at") is not None:
            return self.render_op(self._new_op(p.name, scope, "delete", res["selfLink"], res["id"]))
        user = self._used_by(p, res)
        if user:
            raise ApiError(
                400,
                "resourceInUseByAnotherResource",
                f"The {_kind_word(kind)} resource '{res['selfLink'].split('/compute/v1/')[1]}' "
                f"is already being used by '{user.split('/compute/v1/')[1]}'",
            )
        op = self._new_op(p.name, scope, "delete", res["selfLink"], res["id"])
        if kind == "instances":
            self._append_phase(res, "STOPPING")
            res["_gone_at"] = op["_done_at"]
        else:
            del p.coll(path)[name]
            if kind == "networks":
                self._delete_auto_subnets(p, res)
            elif kind == "subnetworks":
                net = p.coll("global/networks").get(last(res["network"]))
                if net is not None and res["selfLink"] in net.get("subnetworks", []):
                    net["subnetworks"].remove(res["selfLink"])  # the network lists only live subnets
        return self.render_op(op)

    def _used_by(self, p: Project, res: dict) -> str | None:
        link = res["selfLink"]
        for _path, other in p.iter_kind("instances"):
            if other.get("_gone_at") is not None and other["_gone_at"] <= self.now():
                continue
            refs = [*other.get("resourcePolicies", [])]
            for nic in other.get("networkInterfaces", []):
                refs += [nic.get("network"), nic.get("subnetwork")]
            if link in refs:
                return other["selfLink"]
        for kind in ("subnetworks", "firewalls", "reservations"):
            for _path, other in p.iter_kind(kind):
                if other is res:
                    continue
                if kind == "subnetworks" and other.get("_auto"):
                    continue  # auto-mode subnets go with their network
                refs = [other.get("network")] + list(other.get("resourcePolicies", {}).values())
                if link in refs:
                    return other["selfLink"]
        return None

    # ------------------------------------------------------------------ networks, subnets, firewalls
    def _seed_default_network(self, p: Project) -> None:
        net = {
            "kind": "compute#network",
            "name": "default",
            "description": "Default network for the project",
            "autoCreateSubnetworks": True,
            "mtu": 1460,
            "routingConfig": {"routingMode": "REGIONAL"},
            "networkFirewallPolicyEnforcementOrder": "AFTER_CLASSIC_FIREWALL",
            "subnetworks": [],
        }
        self._store_network(p, net)
        net_link = net["selfLink"]
        for name, rule in {
            "default-allow-internal": {
                "sourceRanges": ["10.128.0.0/9"],
                "allowed": [{"IPProtocol": "tcp", "ports": ["0-65535"]}, {"IPProtocol": "udp", "ports": ["0-65535"]},
                            {"IPProtocol": "icmp"}],
                "priority": 65534,
            },
            "default-allow-ssh": {"sourceRanges": ["0.0.0.0/0"], "allowed": [{"IPProtocol": "tcp", "ports": ["22"]}], "priority": 65534},
            "default-allow-rdp": {"sourceRanges": ["0.0.0.0/0"], "allowed": [{"IPProtocol": "tcp", "ports": ["3389"]}], "priority": 65534},
            "default-allow-icmp": {"sourceRanges": ["0.0.0.0/0"], "allowed": [{"IPProtocol": "icmp"}], "priority": 65534},
        }.items():
            fw = {"kind": "compute#firewall", "name": name, "network": net_link, "direction": "INGRESS",
                  "disabled": False, "logConfig": {"enable": False}, **rule}
            fw.update(id=self.ids.next(), creationTimestamp=rfc3339(self.now()),
                      selfLink=self.link(p.name, f"global/firewalls/{name}"))
            p.coll("global/firewalls")[name] = fw

    def _store_network(self, p: Project, net: dict) -> None:
        net.update(id=self.ids.next(), creationTimestamp=rfc3339(self.now()),
                   selfLink=self.link(p.name, f"global/networks/{net['name']}"))
        p.coll("global/networks")[net["name"]] = net
        if net.get("autoCreateSubnetworks"):
            base = ipaddress.ip_network("10.128.0.0/20")
            for i, region in enumerate(self.world.regions):
                cidr = ipaddress.ip_network((int(base.network_address) + i * 4096 * 16, 20))
                self._store_subnet(p, region, {
                    "kind": "compute#subnetwork", "name": net["name"], "network": net["selfLink"],
                    "ipCidrRange": str(cidr), "_auto": True,
                })

    def _store_subnet(self, p: Project, region: str, sub: dict) -> None:
        cidr = ipaddress.ip_network(sub["ipCidrRange"])
        sub.update(
            id=self.ids.next(), creationTimestamp=rfc3339(self.now()), region=self.link(p.name, f"regions/{region}"),
            gatewayAddress=str(cidr.network_address + 1), privateIpGoogleAccess=sub.get("privateIpGoogleAccess", False),
            stackType=sub.get("stackType", "IPV4_ONLY"), purpose=sub.get("purpose", "PRIVATE"),
            fingerprint=fingerprint(sub["ipCidrRange"]),
            selfLink=self.link(p.name, f"regions/{region}/subnetworks/{sub['name']}"),
        )
        p.coll(f"regions/{region}/subnetworks")[sub["name"]] = sub
        net = p.coll("global/networks").get(last(sub["network"]))
        if net is not None:
            net.setdefault("subnetworks", []).append(sub["selfLink"])

    def _delete_auto_subnets(self, p: Project, net: dict) -> None:
        for region in self.world.regions:
            subs = p.coll(f"regions/{region}/subnetworks")
            for name in [n for n, s in subs.items() if s.get("network") == net["selfLink"]]:
                del subs[name]

    @_mutation(sweep=False)
    def insert_network(self, p: Project, body: dict) -> dict:
        check_name("resource.name", body.get("name"))
        mtu = int(body.get("mtu", 1460))
        if not 1300 <= mtu <= 8896:
            raise invalid("resource.mtu", mtu, "Must be between 1300 and 8896.")
        if body["name"] in p.coll("global/networks"):
            raise already_exists(f"projects/{p.name}/global/networks/{body['name']}")
        net = {
            "kind": "compute#network",
            "autoCreateSubnetworks": bool(body.get("autoCreateSubnetworks", False)),
            "routingConfig": {"routingMode": "REGIONAL"},
            "networkFirewallPolicyEnforcementOrder": "AFTER_CLASSIC_FIREWALL",
            **body,
            "mtu": mtu,
            "subnetworks": [],
        }
        self._store_network(p, net)
        return self.render_op(self._new_op(p.name, "global", "insert", net["selfLink"], net["id"]))

    @_mutation(sweep=False)
    def insert_subnetwork(self, p: Project, region: str, body: dict) -> dict:
        self._check_region(region)
        check_name("resource.name", body.get("name"))
        if not body.get("network"):
            raise required("resource.network")
        if not body.get("ipCidrRange"):
            raise required("resource.ipCidrRange")
        try:
            cidr = ipaddress.ip_network(body["ipCidrRange"])
        except ValueError as e:
            raise invalid("resource.ipCidrRange", body["ipCidrRange"], "Must be a valid IPv4 CIDR range.") from e
        net = p.coll("global/networks").get(last(body["network"]))
        if net is None:
            raise not_found(f"projects/{p.name}/global/networks/{last(body['network'])}")
        if body["name"] in p.coll(f"regions/{region}/subnetworks"):
            raise already_exists(f"projects/{p.name}/regions/{region}/subnetworks/{body['name']}")
        for _path, other in p.iter_kind("subnetworks"):
            if other["network"] == net["selfLink"] and ipaddress.ip_network(other["ipCidrRange"]).overlaps(cidr):
                raise invalid(
                    "resource.ipCidrRange", body["ipCidrRange"],
                    f"Invalid IPCidrRange: {cidr} conflicts with existing subnetwork '{other['name']}' in region "
                    f"'{last(other['region'])}'.",
                )
        sub = {"kind": "compute#subnetwork", **body, "network": net["selfLink"], "ipCidrRange": str(cidr)}
        self._store_subnet(p, region, sub)
        return self.render_op(self._new_op(p.name, f"regions/{region}", "insert", sub["selfLink"], sub["id"]))

    @_mutation(sweep=False)
    def insert_firewall(self, p: Project, body: dict) -> dict:
        check_name("resource.name", body.get("name"))
        if not body.get("allowed") and not body.get("denied"):
            raise required("resource.allowed")
        for rng in body.get("sourceRanges", []) + body.get("destinationRanges", []):
            try:
                ipaddress.ip_network(rng)
            except ValueError as e:
                raise invalid("resource.sourceRanges", rng, "Must be a CIDR range.") from e
        net_name = last(body.get("network") or "global/networks/default")
        net = p.coll("global/networks").get(net_name)
        if net is None:
            raise not_found(f"projects/{p.name}/global/networks/{net_name}")
        fw = {
            "kind": "compute#firewall", "direction": "INGRESS", "priority": 1000, "disabled": False,
            "logConfig": {"enable": False}, **body, "network": net["selfLink"],
        }
        if fw["direction"] == "INGRESS" and not any(fw.get(k) for k in ("sourceRanges", "sourceTags", "sourceServiceAccounts")):
            fw["sourceRanges"] = ["0.0.0.0/0"]  # the real API's default, which is why we always set ranges
        return self._insert(p, "global/firewalls", "global", fw)

    # ------------------------------------------------------------------ placement policies
    @_mutation(sweep=False)
    def insert_resource_policy(self, p: Project, region: str, body: dict) -> dict:
        self._check_region(region)
        check_name("resource.name", body.get("name"))
        gpp = body.get("groupPlacementPolicy")
        if gpp is not None:
            coll = gpp.get("collocation", "UNSPECIFIED_COLLOCATION")
            if coll not in ("COLLOCATED", "UNSPECIFIED_COLLOCATION"):
                raise invalid("resource.groupPlacementPolicy.collocation", coll, "Must be COLLOCATED or UNSPECIFIED_COLLOCATION.")
            if "vmCount" in gpp and int(gpp["vmCount"]) < 1:
                raise invalid("resource.groupPlacementPolicy.vmCount", gpp["vmCount"], "Must be at least 1.")
            if "maxDistance" in gpp:
                raise ApiError(400, "invalid", "Invalid JSON payload received. Unknown name \"maxDistance\" at "
                               "'resource.group_placement_policy': the field is in the beta API only.")
        res = {"kind": "compute#resourcePolicy", **body, "region": self.link(p.name, f"regions/{region}"), "status": "READY"}
        return self._insert(p, f"regions/{region}/resourcePolicies", f"regions/{region}", res)

    # ------------------------------------------------------------------ reservations
    @_mutation()
    def insert_reservation(self, p: Project, zone: str, body: dict) -> dict:
        region = self._check_zone(zone)
        check_name("resource.name", body.get("name"))
        spec = body.get("specificReservation") or {}
        if not spec:
            raise required("resource.specificReservation")
        count = int(spec.get("count", 0))
        if count < 1:
            raise invalid("resource.specificReservation.count", spec.get("count"), "Must be at least 1.")
        mt = last((spec.get("instanceProperties") or {}).get("machineType"))
        if not mt:
            raise required("resource.specificReservation.instanceProperties.machineType")
        if mt not in self.world.zone_machine_types[zone]:
            raise invalid("resource.specificReservation.instanceProperties.machineType", mt,
                          f"Machine type with name '{mt}' does not exist in zone '{zone}'.")
        path = f"zones/{zone}/reservations"
        if body["name"] in p.coll(path):
            raise already_exists(f"projects/{p.name}/{path}/{body['name']}")
        policies = {}
        for key, link in (body.get("resourcePolicies") or {}).items():
            pol = self._policy_for(p, region, link, "resource.resourcePolicies")
            policies[key] = pol["selfLink"]
        res = {
            "kind": "compute#reservation",
            "specificReservationRequired": False,
            **body,
            "zone": self.link(p.name, f"zones/{zone}"),
            "status": "READY",
            "specificReservation": {**spec, "count": str(count), "inUseCount": "0"},
            "_machine_type": mt,
        }
        if policies:
            res["resourcePolicies"] = policies
        err = self._check_quota(p, region, self._reservation_usage(res))
        if err is None and self.faults.take_capacity(zone, mt, count) < count:
            err = _stockout_error(zone, mt)
        if err is not None:
            op = self._new_op(p.name, f"zones/{zone}", "insert", self.link(p.name, f"{path}/{body['name']}"), error=err)
            return self.render_op(op)
        return self._insert(p, path, f"zones/{zone}", res)

    def _reservation_in_use(self, res: dict) -> int:
        p = self.projects[res["selfLink"].split("/projects/")[1].split("/")[0]]
        return sum(
            1
            for _path, inst in p.iter_kind("instances")
            if inst.get("_reservation") == res["selfLink"] and self.instance_status(inst) != "TERMINATED"
            and not (inst.get("_gone_at") is not None and inst["_gone_at"] <= self.now())
        )

    def _policy_for(self, p: Project, region: str, link: str, field_name: str) -> dict:
        return self._in_region(p, region, "resourcePolicies", link, field_name,
                               f"Resource policy must be in region '{region}' of the resource.")

    def _in_region(self, p: Project, region: str, kind: str, link: str, field_name: str, elsewhere: str) -> dict:
        """The regional `kind` resource that `link` (a path or bare name) names, which must be in `region`."""
        m = re.search(rf"regions/([^/]+)/{kind}/([^/]+)$", link)
        ref_region, name = (m.group(1), m.group(2)) if m else (region, last(link))
        if ref_region != region:
            raise invalid(field_name, link, elsewhere)
        res = p.coll(f"regions/{region}/{kind}").get(name)
        if res is None:
            raise not_found(f"projects/{p.name}/regions/{region}/{kind}/{name}")
        return res

    # ------------------------------------------------------------------ instances
    def instance_status(self, inst: dict) -> str:
        now = self.now()
        status = inst["_phases"][0][1]
        for t, s in inst["_phases"]:
            if t <= now:
                status = s
        return status

    def _append_phase(self, inst: dict, *steps: str) -> None:
        """Cut the planned future short and schedule `steps` over one operation's duration."""
        now = self.now()
        inst["_phases"] = [ph for ph in inst["_phases"] if ph[0] <= now]
        dur = self._op_seconds()
        for i, s in enumerate(steps):
            inst["_phases"].append([now + dur * i / max(len(steps) - 1, 1) if len(steps) > 1 else now, s])

    def _prepare_instance(self, p: Project, project: str, zone: str, region: str, body: dict, field: str) -> dict:
        """Validate an instance body the way the real API does and return the stored resource."""
        check_name(f"{field}.name", body.get("name"))
        mt = last(body.get("machineType"))
        if not mt:
            raise required(f"{field}.machineType")
        if mt not in self.world.zone_machine_types[zone]:
            raise invalid(f"{field}.machineType", body["machineType"],
                          f"Machine type with name '{mt}' does not exist in zone '{zone}'.")
        info = self.world.machine_types[mt]
        _check_labels(body.get("labels") or {}, f"{field}.labels")

        accs = []
        for i, acc in enumerate(body.get("guestAccelerators") or []):
            at = last(acc.get("acceleratorType"))
            if at not in self.world.accelerators_in_zone(zone):
                raise invalid(f"{field}.guestAccelerators[{i}].acceleratorType", acc.get("acceleratorType"),
                              f"Accelerator type '{at}' does not exist in zone '{zone}'.")
            accs.append({"acceleratorType": self.link(project, f"zones/{zone}/acceleratorTypes/{at}"),
                         "acceleratorCount": int(acc.get("acceleratorCount", 1))})
        if info.gpu and not accs:
            # A2/A3/A4/G2 come with their GPUs attached; the API reports them on the instance.
            accs = [{"acceleratorType": self.link(project, f"zones/{zone}/acceleratorTypes/{info.gpu}"),
                     "acceleratorCount": info.gpu_count}]

        given = body.get("scheduling") or {}
        # The API's own words: "For standard instances, the default behavior is MIGRATE. For
        # preemptible instances, the default and only possible behavior is TERMINATE." Spot (and
        # flex-start) VMs are preemptible in that sense, so gcloud's --provisioning-model=SPOT
        # without --maintenance-policy works on a GPU VM.
        preemptible = bool(given.get("preemptible")) or given.get("provisioningModel") in ("SPOT", "FLEX_START")
        sched = {"onHostMaintenance": "TERMINATE" if preemptible else "MIGRATE", "automaticRestart": not preemptible,
                 "preemptible": False, "provisioningModel": "STANDARD", **given}
        model = sched["provisioningModel"]
        if model not in ("STANDARD", "SPOT", "FLEX_START", "RESERVATION_BOUND"):
            raise invalid(f"{field}.scheduling.provisioningModel", model, "Must be STANDARD, SPOT, FLEX_START or RESERVATION_BOUND.")
        if preemptible and sched["onHostMaintenance"] != "TERMINATE":
            raise invalid(f"{field}.scheduling.onHostMaintenance", sched["onHostMaintenance"],
                          "Preemptible and Spot instances can only use TERMINATE.")
        if accs and sched["onHostMaintenance"] != "TERMINATE":
            raise ApiError(400, "invalid", GPU_FREE_MIGRATION_ERROR)
        if model in ("SPOT", "FLEX_START") and sched.get("automaticRestart"):
            sched["automaticRestart"] = False
        if model == "FLEX_START":
            secs = int((sched.get("maxRunDuration") or {}).get("seconds", 0))
            if not FLEX_START_RANGE[0] <= secs <= FLEX_START_RANGE[1]:
                raise invalid(f"{field}.scheduling.maxRunDuration.seconds", secs,
                              f"Must be between {FLEX_START_RANGE[0]} and {FLEX_START_RANGE[1]} for FLEX_START.")
            if sched.get("instanceTerminationAction") != "DELETE":
                raise invalid(f"{field}.scheduling.instanceTerminationAction", sched.get("instanceTerminationAction"),
                              "FLEX_START VMs must use DELETE.")

        disks = body.get("disks") or []
        if not disks:
            raise required(f"{field}.disks")
        stored_disks = []
        for i, d in enumerate(disks):
            init = d.get("initializeParams") or {}
            if d.get("boot", i == 0) and not d.get("source"):
                if not init.get("sourceImage"):
                    raise required(f"{field}.disks[{i}].initializeParams.sourceImage")
                img = self._resolve_image(project, init["sourceImage"])
                init = {**init, "sourceImage": img["selfLink"]}
            disk_name = init.get("diskName") or (body["name"] if i == 0 else f"{body['name']}-{i}")
            stored_disks.append({
                "kind": "compute#attachedDisk", "type": d.get("type", "PERSISTENT"), "mode": d.get("mode", "READ_WRITE"),
                "boot": bool(d.get("boot", i == 0)), "autoDelete": bool(d.get("autoDelete", True)), "index": i,
                "deviceName": d.get("deviceName") or (f"persistent-disk-{i}"),
                "diskSizeGb": str(init.get("diskSizeGb", 10)), "interface": d.get("interface", "SCSI"),
                "source": self.link(project, f"zones/{zone}/disks/{disk_name}"),
            })

        nics = body.get("networkInterfaces") or []
        if not nics:
            raise required(f"{field}.networkInterfaces")
        stored_nics = []
        for i, nic in enumerate(nics):
            stored_nics.append(self._prepare_nic(p, project, region, nic, i, f"{field}.networkInterfaces[{i}]"))

        policies = []
        for link in body.get("resourcePolicies") or []:
            policies.append(self._policy_for(p, region, link, f"{field}.resourcePolicies")["selfLink"])
        if policies and model == "FLEX_START":
            raise ApiError(400, "UNSUPPORTED_OPERATION",
                           "Placement policies are not supported with FLEX_START provisioning.")

        affinity = body.get("reservationAffinity") or {"consumeReservationType": "ANY_RESERVATION"}
        meta_items = (body.get("metadata") or {}).get("items") or []
        labels = body.get("labels") or {}
        return {
            "kind": "compute#instance",
            "name": body["name"],
            "description": body.get("description", ""),
            "machineType": self.link(project, f"zones/{zone}/machineTypes/{mt}"),
            "zone": self.link(project, f"zones/{zone}"),
            "canIpForward": bool(body.get("canIpForward", False)),
            "networkInterfaces": stored_nics,
            "disks": stored_disks,
            "metadata": {"kind": "compute#metadata", "fingerprint": fingerprint(meta_items), "items": meta_items},
            "serviceAccounts": body.get("serviceAccounts") or [],
            "scheduling": sched,
            "guestAccelerators": accs,
            "labels": labels,
            "labelFingerprint": fingerprint(labels),
            "tags": {**(body.get("tags") or {}), "fingerprint": fingerprint((body.get("tags") or {}).get("items", []))},
            "resourcePolicies": policies,
            "reservationAffinity": affinity,
            "cpuPlatform": "Intel Sapphire Rapids" if mt.startswith("a3") else "Intel Cascade Lake",
            "deletionProtection": bool(body.get("deletionProtection", False)),
            "startRestricted": False,
            "shieldedInstanceConfig": body.get("shieldedInstanceConfig")
            or {"enableSecureBoot": False, "enableVtpm": True, "enableIntegrityMonitoring": True},
            "fingerprint": fingerprint(body["name"]),
            "_machine_type": mt,
        }

    def _prepare_nic(self, p: Project, project: str, region: str, nic: dict, i: int, field: str) -> dict:
        net_link, sub_link = nic.get("network"), nic.get("subnetwork")
        sub = None
        if sub_link:
            sub = self._in_region(p, region, "subnetworks", sub_link, f"{field}.subnetwork",
                                  f"Subnetwork must be in region '{region}'.")
            net = p.coll("global/networks").get(last(sub["network"]))
            if net_link and last(net_link) != net["name"]:
                raise invalid(f"{field}.network", net_link, "Subnetwork does not belong to this network.")
        else:
            net_name = last(net_link or "global/networks/default")
            net = p.coll("global/networks").get(net_name)
            if net is None:
                raise not_found(f"projects/{project}/global/networks/{net_name}")
            sub = next((s for s in p.coll(f"regions/{region}/subnetworks").values() if s["network"] == net["selfLink"]), None)
            if sub is None:
                raise ApiError(400, "SUBNET_NOT_FOUND_FOR_VPC",
                               f"Network '{net_name}' has no subnetwork in region '{region}'; specify a subnetwork.")
        nic_type = nic.get("nicType")
        if nic_type and nic_type not in ("GVNIC", "VIRTIO_NET", "MRDMA", "IRDMA", "UNSPECIFIED_NIC_TYPE"):
            raise invalid(f"{field}.nicType", nic_type, "Must be GVNIC, VIRTIO_NET or MRDMA.")
        cidr = ipaddress.ip_network(sub["ipCidrRange"])
        offset = p.next_ip.get(sub["selfLink"], 2)
        p.next_ip[sub["selfLink"]] = offset + 1
        out = {
            "kind": "compute#networkInterface",
            "name": f"nic{i}",
            "network": net["selfLink"],
            "subnetwork": sub["selfLink"],
            "networkIP": str(cidr.network_address + offset),
            "stackType": nic.get("stackType", "IPV4_ONLY"),
            "fingerprint": fingerprint([sub["selfLink"], offset]),
        }
        if nic_type:
            out["nicType"] = nic_type
        if nic.get("accessConfigs"):
            # External addresses come from TEST-NET-2: the emulator owns no real public IPs.
            out["accessConfigs"] = [
                {"kind": "compute#accessConfig", "type": "ONE_TO_ONE_NAT", "name": ac.get("name", "External NAT"),
                 "natIP": f"198.51.100.{(offset % 250) + 1}", "networkTier": ac.get("networkTier", "PREMIUM")}
                for ac in nic["accessConfigs"]
            ]
        return out

    def _admit(self, p: Project, project: str, zone: str, region: str, insts: list[dict], min_count: int) -> tuple[int, ApiError | None]:
        """How many of `insts` the zone takes now (reservations, placement, quota, capacity), or the error."""
        first = insts[0]
        mt = first["_machine_type"]
        aff = first["reservationAffinity"]
        kind = aff.get("consumeReservationType", "ANY_RESERVATION")
        reservation = None
        if kind == "SPECIFIC_RESERVATION":
            values = aff.get("values") or []
            if aff.get("key") != "compute.googleapis.com/reservation-name" or not values:
                raise invalid("resource.reservationAffinity", aff,
                              "SPECIFIC_RESERVATION needs key 'compute.googleapis.com/reservation-name' and the reservation name in values.")
            res_name = last(values[0])
            reservation = p.coll(f"zones/{zone}/reservations").get(res_name)
            if reservation is None:
                raise not_found(f"projects/{project}/zones/{zone}/reservations/{res_name}")
            if reservation["_machine_type"] != mt:
                raise invalid("resource.machineType", mt,
                              f"Reservation '{res_name}' holds {reservation['_machine_type']}, not {mt}.")
            free = int(reservation["specificReservation"]["count"]) - self._reservation_in_use(reservation)
            if free < len(insts):
                return 0, ApiError(
                    400, "RESERVATION_CAPACITY_EXCEEDED",
                    f"Specified reservation '{res_name}' does not have available resources for the request: "
                    f"{free} of {reservation['specificReservation']['count']} free, {len(insts)} asked.",
                )
        elif kind == "ANY_RESERVATION":
            for res in p.coll(f"zones/{zone}/reservations").values():
                if (res["_machine_type"] == mt and not res.get("specificReservationRequired")
                        and int(res["specificReservation"]["count"]) - self._reservation_in_use(res) >= len(insts)):
                    reservation = res
                    break
        if reservation is not None:
            for inst in insts:
                inst["_reservation"] = reservation["selfLink"]
            # A reservation's own placement policy applies to what consumes it.
            for link in (reservation.get("resourcePolicies") or {}).values():
                for inst in insts:
                    if link not in inst["resourcePolicies"]:
                        inst["resourcePolicies"].append(link)

        for link in first["resourcePolicies"]:
            pol = p.coll(f"regions/{region}/resourcePolicies")[last(link)]
            gpp = pol.get("groupPlacementPolicy") or {}
            if "vmCount" in gpp:
                used = sum(1 for _pth, o in p.iter_kind("instances")
                           if link in o.get("resourcePolicies", []) and o.get("_gone_at") is None)
                if used + len(insts) > int(gpp["vmCount"]):
                    raise invalid("resource.resourcePolicies", link,
                                  f"Resource policy '{pol['name']}' has vmCount {gpp['vmCount']} and {used} VMs already use it; "
                                  f"{len(insts)} more do not fit.")

        extra: dict[str, float] = {}
        for inst in insts:
            for k, v in self._instance_usage({**inst, "_phases": [[0, "PROVISIONING"]]}).items():
                extra[k] = extra.get(k, 0.0) + v
        err = self._check_quota(p, region, extra)
        if err is not None:
            return 0, err
        if reservation is None:
            got = self.faults.take_capacity(zone, mt, len(insts))
            if got < min_count:
                self.faults.give_back(zone, mt, got)
                return 0, _stockout_error(zone, mt)
            return got, None
        return len(insts), None

    def _place(self, p: Project, project: str, zone: str, inst: dict) -> None:
        now = self.now()
        dur = self._op_seconds()
        inst.update(id=self.ids.next(), creationTimestamp=rfc3339(now), lastStartTimestamp=rfc3339(now + dur),
                    selfLink=self.link(project, f"zones/{zone}/instances/{inst['name']}"),
                    _phases=[[now, "PROVISIONING"], [now + 0.5 * dur, "STAGING"], [now + dur, "RUNNING"]])
        p.coll(f"zones/{zone}/instances")[inst["name"]] = inst

    @_mutation()
    def insert_instance(self, p: Project, zone: str, body: dict) -> dict:
        region = self._check_zone(zone)
        inst = self._prepare_instance(p, p.name, zone, region, body, "resource")
        path = f"zones/{zone}/instances"
        if inst["name"] in p.coll(path):
            raise already_exists(f"projects/{p.name}/{path}/{inst['name']}")
        link = self.link(p.name, f"{path}/{inst['name']}")
        _, err = self._admit(p, p.name, zone, region, [inst], 1)
        if err is not None:
            return self.render_op(self._new_op(p.name, f"zones/{zone}", "insert", link, error=err))
        self._place(p, p.name, zone, inst)
        return self.render_op(self._new_op(p.name, f"zones/{zone}", "insert", link, inst["id"]))

    @_mutation()
    def bulk_insert(self, p: Project, zone: str, body: dict) -> dict:
        """instances.bulkInsert: N VMs from one set of properties, all or at least minCount, one operation."""
        region = self._check_zone(zone)
        props = body.get("instanceProperties")
        if body.get("sourceInstanceTemplate"):
            raise ApiError(400, "invalid", "sourceInstanceTemplate is not supported by the emulator; use instanceProperties.")
        if not props:
            raise required("bulkInsertInstanceResource.instanceProperties")
        per = body.get("perInstanceProperties") or {}
        count = int(body.get("count") or len(per))
        if count < 1:
            raise invalid("bulkInsertInstanceResource.count", body.get("count"), "Must be at least 1.")
        min_count = int(body.get("minCount") or count)
        if min_count > count:
            raise invalid("bulkInsertInstanceResource.minCount", min_count, "Must not exceed count.")
        path = f"zones/{zone}/instances"
        names = list(per)
        if len(names) < count:
            pattern = body.get("namePattern")
            if not pattern or "#" not in pattern:
                raise invalid("bulkInsertInstanceResource.namePattern", pattern,
                              "Give perInstanceProperties for every VM or a namePattern with #s.")
            names += _names_from_pattern(pattern, count - len(names), set(p.coll(path)) | set(names))
        for name in names:
            if name in p.coll(path):
                raise already_exists(f"projects/{p.name}/{path}/{name}")
        insts = []
        for name in names:
            # InstanceProperties name machine types and policies bare; the instance stores links.
            inst_body = {**props, "name": name,
                         "machineType": f"zones/{zone}/machineTypes/{last(props.get('machineType'))}",
                         "resourcePolicies": [f"regions/{region}/resourcePolicies/{last(x)}"
                                              for x in props.get("resourcePolicies") or []]}
            insts.append(self._prepare_instance(p, p.name, zone, region, inst_body, "bulkInsertInstanceResource.instanceProperties"))
        link = self.link(p.name, path)
        got, err = self._admit(p, p.name, zone, region, insts, min_count)
        if err is not None:
            return self.render_op(self._new_op(p.name, f"zones/{zone}", "bulkInsert", link, error=err))
        for inst in insts[:got]:
            self._place(p, p.name, zone, inst)
        return self.render_op(self._new_op(p.name, f"zones/{zone}", "bulkInsert", link))

    @_mutation()
    def _mutate_instance(self, p: Project, zone: str, name: str, op_type: str, change: Callable[[dict], None]) -> dict:
        self._check_zone(zone)
        inst = self._get(p.name, f"zones/{zone}/instances", name)
        change(inst)
        return self.render_op(self._new_op(p.name, f"zones/{zone}", op_type, inst["selfLink"], inst["id"]))

    def set_labels(self, project: str, zone: str, name: str, body: dict, request_id: str | None = None) -> dict:
        labels = body.get("labels") or {}
        _check_labels(labels, "labels")

        def change(inst: dict) -> None:
            if body.get("labelFingerprint") != inst["labelFingerprint"]:
                raise ApiError(412, "conditionNotMet",
                               "Labels fingerprint either invalid or resource labels have changed")
            inst["labels"] = labels
            inst["labelFingerprint"] = fingerprint(labels)

        return self._mutate_instance(project, zone, name, "setLabels", change, request_id=request_id)

    def set_metadata(self, project: str, zone: str, name: str, body: dict, request_id: str | None = None) -> dict:
        items = body.get("items") or []
        total = sum(len(i.get("value") or "") for i in items)
        if total > 512 * 1024:
            raise ApiError(400, "invalid", f"Metadata total size {total} exceeds the 512 KB limit.")

        def change(inst: dict) -> None:
            if body.get("fingerprint") != inst["metadata"]["fingerprint"]:
                raise ApiError(412, "conditionNotMet",
                               "Supplied fingerprint does not match current metadata fingerprint.")
            inst["metadata"] = {"kind": "compute#metadata", "fingerprint": fingerprint(items), "items": items}

        op = self._mutate_instance(project, zone, name, "setMetadata", change, request_id=request_id)
        for observe in self.metadata_observers:  # outside the lock: an observer may start processes
            observe(project, zone, name)
        return op

    def stop(self, project: str, zone: str, name: str, request_id: str | None = None) -> dict:
        def change(inst: dict) -> None:
            if self.instance_status(inst) not in ("TERMINATED", "STOPPING"):
                self._append_phase(inst, "STOPPING", "TERMINATED")

        return self._mutate_instance(project, zone, name, "stop", change, request_id=request_id)

    @_mutation()
    def start(self, p: Project, zone: str, name: str) -> dict:
        """instances.start: a stopped VM takes its quota and zone capacity again, and can fail to
        come back (inside the operation) when either has run out, as stopped GPU VMs often do."""
        region = self._check_zone(zone)
        inst = self._get(p.name, f"zones/{zone}/instances", name)
        err = None
        if self.instance_status(inst) == "TERMINATED":
            # Reservation-backed VMs come back on their reservation's capacity, unchecked here.
            need = self._instance_usage({**inst, "_phases": [[0, "PROVISIONING"]]})
            err = self._check_quota(p, region, need)
            if err is None and not inst.get("_reservation") \
                    and self.faults.take_capacity(zone, inst["_machine_type"], 1) < 1:
                err = _stockout_error(zone, inst["_machine_type"])
            if err is None:
                self._append_phase(inst, "STAGING", "RUNNING")
        return self.render_op(self._new_op(p.name, f"zones/{zone}", "start", inst["selfLink"], inst["id"], error=err))


# ---------------------------------------------------------------------- module helpers
_HTTP_MESSAGES = {400: "BAD REQUEST", 403: "FORBIDDEN", 404: "NOT FOUND", 409: "CONFLICT", 503: "SERVICE UNAVAILABLE"}


def check_project(name: str) -> None:
    if not re.match(r"^[a-z][-a-z0-9]{4,28}[a-z0-9]$|^[a-z][-a-z0-9.:]{0,61}[a-z0-9]$", name or ""):
        raise invalid("project", name, "Must be a valid project id.")


def _kind_word(kind: str) -> str:
    return {"resourcePolicies": "resource policy", "subnetworks": "subnetwork", "networks": "network",
            "firewalls": "firewall", "reservations": "reservation", "instances": "instance"}.get(kind, kind)


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


