"""Managed file-system instances (projects/P/locations/L/instances/N) behind long-running operations: the
part Filestore and Managed Lustre share. A service module supplies its checks and its ready fields.

Lifecycle, read off the emulator's clock: CREATING until the create operation is done, then the service's
ready state (READY, ACTIVE); DELETING from delete until its operation is done, then gone. Each instance
has one folder under the emulator's storage (made on create, removed on delete): what emulated nodes
bind at the mount path their `gcpgpu-storage` metadata names (host/shared_mounts.py).
"""

from __future__ import annotations

import copy
import ipaddress
import re
import shutil
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .core import proto_timestamp
from .lro import GoogleError, Operations, invalid_argument, json_body, not_found, page

# Instance ids as Filestore and Lustre document them: a lowercase letter, then lowercase letters, digits
# or hyphens, 63 at most, not ending in a hyphen (read in Google's docs; the exact wording is unverified).
INSTANCE_ID = re.compile(r"^[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?$")
_PROJECT = re.compile(r"^[a-z0-9][-a-z0-9.:]{0,62}$")


class ManagedInstances:
    """One service's instances, operations and folders. Subclasses set the class attributes and `check`."""

    service = ""  # file, lustre: the folder under the storage root, and the REST prefix
    ready_state = "READY"
    instance_type = ""  # the @type of an operation's response
    location_kind = "zone"  # "zone", or "any" (a zone or a region, as the service's check decides)

    def __init__(self, world: Any, clock: Any, seconds: Callable[[], float], root: Callable[[], Path],
                 operations: Operations) -> None:
        self.world = world
        self.clock = clock
        self._seconds = seconds  # how long create and delete take (Faults.operation_seconds or the world's)
        self._root = root
        self.operations = operations
        self._items: dict[str, dict] = {}  # full name -> {"body", "ready_at", "gone_at", "ip"}
        self._next_ip = 0
        self._lock = threading.RLock()

    # -- hooks ---------------------------------------------------------------------------------------
    def check(self, project: str, location: str, body: dict) -> dict:
        """The instance as stored (output fields left out) after the service's checks; raises GoogleError."""
        raise NotImplementedError

    def ready_fields(self, body: dict, ip: str) -> dict:
        """Fields shown once the instance is ready (its addresses, its mount point)."""
        return {}

    # -- requests ------------------------------------------------------------------------------------
    def reset(self) -> None:
        with self._lock:
            for name in list(self._items):
                self._remove_folder(name)
            self._items.clear()
            self._next_ip = 0
        self.operations.reset()

    def snapshot(self) -> dict:
        """The instances as plain JSON (the server's --state-file); their folders are kept under the storage
        root beside that file already."""
        with self._lock:
            self._sweep()
            return copy.deepcopy({"items": self._items, "next_ip": self._next_ip})

    def restore(self, data: dict) -> None:
        with self._lock:
            self._items = copy.deepcopy(data.get("items", {}))
            self._next_ip = int(data.get("next_ip", 0))
            for name in self._items:
                self.folder_path(name).mkdir(parents=True, exist_ok=True)

    def create(self, project: str, location: str, instance_id: str, body: dict) -> dict:
        parent = self._parent(project, location, allow_any=False)
        if not instance_id:
            raise invalid_argument("instance_id must be specified.", "instance_id")
        if not INSTANCE_ID.match(instance_id):
            raise invalid_argument(
                f"instance_id '{instance_id}' must be 1 to 63 characters: a lowercase letter first, then lowercase "
                "letters, digits or hyphens, not ending with a hyphen.", "instance_id")
        stored = self.check(project, location, body)
        name = f"{parent}/instances/{instance_id}"
        with self._lock:
            self._sweep()
            if name in self._items:
                raise GoogleError("ALREADY_EXISTS", f"Resource '{name}' already exists")
            now = self.clock.now()
            seconds = self._seconds()
            self._next_ip += 1
            stored = {**stored, "name": name, "createTime": proto_timestamp(now)}
            self._items[name] = {"body": stored, "ready_at": now + seconds, "gone_at": None,
                                 "ip": self._address(self._next_ip)}
            self.folder_path(name).mkdir(parents=True, exist_ok=True)
        # Outside this lock: an operation read takes the operations' lock, then this one (its result).
        return self.operations.start(parent, name, "create", seconds, result=lambda: self._response(name, stored))

    def get(self, project: str, location: str, instance_id: str) -> dict:
        name = f"{self._parent(project, location, allow_any=False)}/instances/{instance_id}"
        with self._lock:
            self._sweep()
            if name not in self._items:
                raise not_found(name)
            return self._render(name)

    def list(self, project: str, location: str, args: Any) -> dict:
        parent = self._parent(project, location, allow_any=True)
        prefix = f"projects/{project}/locations/" if location == "-" else f"{parent}/instances/"
        with self._lock:
            self._sweep()
            items = [self._render(n) for n in sorted(self._items) if n.startswith(prefix)]
        return page(items, args, "instances")

    def delete(self, project: str, location: str, instance_id: str) -> dict:
        parent = self._parent(project, location, allow_any=False)
        name = f"{parent}/instances/{instance_id}"
        with self._lock:
            self._sweep()
            item = self._items.get(name)
            if item is None:
                raise not_found(name)
            if item["gone_at"] is not None:
                raise GoogleError("FAILED_PRECONDITION", f"Instance '{name}' is already being deleted.")
            seconds = self._seconds()
            item["gone_at"] = self.clock.now() + seconds
            self._remove_folder(name)  # the data goes with the request: no node mounts a DELETING instance
        return self.operations.start(parent, name, "delete", seconds)

    # -- what emulated nodes ask -----------------------------------------------------------------------
    def state(self, name: str) -> str | None:
        """The instance's state now, or None when there is none by that full name."""
        with self._lock:
            self._sweep()
            return self._state(self._items[name]) if name in self._items else None

    def folder_parts(self, name: str) -> tuple[str, ...]:
        """The instance's folder under the storage root, by its names: (SERVICE, PROJECT, LOCATION, NAME)."""
        parts = name.split("/")
        return (self.service, parts[1], parts[3], parts[5])

    def folder_path(self, name: str) -> Path:
        """The instance's folder (whether or not it exists): ROOT/SERVICE/PROJECT/LOCATION/NAME."""
        return self._root().joinpath(*self.folder_parts(name))

    def export(self, name: str) -> str | None:
        """What a node mounts (the service's ready field): IP:/SHARE or IP@tcp:/FSNAME; None unless ready."""
        with self._lock:
            self._sweep()
            item = self._items.get(name)
            if item is None or self._state(item) != self.ready_state:
                return None
            return self.export_of(item["body"], item["ip"])

    def export_of(self, body: dict, ip: str) -> str:
        raise NotImplementedError

    def uses_private_access(self, body: dict, project: str, network: str) -> bool:
        """Whether an instance needs `network`'s private service connection (the service says)."""
        return False

    def on_network(self, project: str, network: str) -> list[str]:
        """The instances (not yet gone) that need private service access on `network` of `project`."""
        with self._lock:
            self._sweep()
            return [n for n, i in sorted(self._items.items())
                    if n.split("/")[1] == project and self.uses_private_access(i["body"], project, network)]

    # -- inside ----------------------------------------------------------------------------------------
    def _parent(self, project: str, location: str, allow_any: bool) -> str:
        if not _PROJECT.match(project):
            raise invalid_argument(f"Invalid project '{project}'.", "parent")
        if location == "-" and allow_any:
            return f"projects/{project}/locations/-"
        if self.world.region_of(location) is None and (self.location_kind == "zone" or location not in self.world.regions):
            kind = "zone" if self.location_kind == "zone" else "zone or region"
            raise invalid_argument(f"Location '{location}' is not a {kind} this service is offered in.", "parent")
        return f"projects/{project}/locations/{location}"

    def _state(self, item: dict) -> str:
        if item["gone_at"] is not None:
            return "DELETING"
        return "CREATING" if self.clock.now() < item["ready_at"] else self.ready_state

    def _sweep(self) -> None:
        now = self.clock.now()
        for name in [n for n, i in self._items.items() if i["gone_at"] is not None and now >= i["gone_at"]]:
            del self._items[name]

    def _render(self, name: str) -> dict:
        item = self._items[name]
        state = self._state(item)
        out = {**item["body"], "state": state}
        if state == self.ready_state:
            out.update(self.ready_fields(item["body"], item["ip"]))
        return out

    def _response(self, name: str, stored: dict) -> dict:
        with self._lock:
            body = self._render(name) if name in self._items else {**stored, "state": self.ready_state}
        return {"@type": self.instance_type, **body}

    def _remove_folder(self, name: str) -> None:
        folder = self.folder_path(name)
        if folder.is_dir() and not folder.is_symlink():
            shutil.rmtree(folder, ignore_errors=True)

    def _address(self, n: int) -> str:
        """The n-th instance's address: 10.X.Y.2 in a /29 of its own (the emulator's private service range)."""
        base = int(ipaddress.ip_address(self.address_base)) + 8 * n
        return str(ipaddress.ip_address(base + 2))

    address_base = "10.100.0.0"


class ManagedRest:
    """REST for one ManagedInstances under /PREFIX/v1/projects/P/locations/L/(instances|operations)[/ID[:verb]]."""

    def __init__(self, backend: ManagedInstances, prefix: str) -> None:
        self.backend = backend
        self.prefix = prefix
        self._route = re.compile(
            rf"^/{re.escape(prefix)}/v1/projects/(?P<project>[^/:]+)/locations/(?P<location>[^/:]+)/"
            r"(?P<coll>instances|operations)(?:/(?P<id>[^/:]+)(?::(?P<verb>[A-Za-z]+))?)?/?$")

    def handle(self, request: Any) -> tuple[int, Any]:
        m = self._route.match(request.path)
        if m is None:
            raise GoogleError("NOT_FOUND", f"The emulator's {self.prefix} API serves no method at {request.path}.")
        project, location, coll, ident, verb = m.group("project", "location", "coll", "id", "verb")
        method, b = request.method, self.backend
        if coll == "operations":
            ops = b.operations
            name = f"projects/{project}/locations/{location}/operations/{ident}"
            if ident is None and method == "GET":
                return 200, ops.list(f"projects/{project}/locations/{location}", request.args)
            if ident is not None and verb is None and method == "GET":
                return 200, ops.get(name)
            if ident is not None and verb is None and method == "DELETE":
                return 200, ops.delete(name)
            if verb == "cancel" and method == "POST":
                return 200, ops.cancel(name)
        elif ident is None and method == "POST":
            return 200, b.create(project, location, request.args.get("instanceId", ""), json_body(request.get_data()))
        elif ident is None and method == "GET":
            return 200, b.list(project, location, request.args)
        elif verb is None and method == "GET":
            return 200, b.get(project, location, ident)
        elif verb is None and method == "DELETE":
            return 200, b.delete(project, location, ident)
        raise GoogleError("UNIMPLEMENTED", f"The emulator's {self.prefix} API does not serve {method} {request.path}.")
