"""A node's shared file systems: the `gcpgpu-storage` instance metadata, resolved to folders of the emulator.

gcpgpu writes on every node a JSON list of what the node mounts (issue 41):

    {"kind": "filestore" | "lustre" | "hyperdisk-ml", "name": FULL_RESOURCE_NAME, "path": "/shared",
     "export": "IP:/SHARE" | "IP@tcp:/FSNAME" | null, "device": DEVICE_NAME | null, "ro": bool}

On Google the node's startup script mounts each (NFS, the Lustre client, the attached disk). Here each
Filestore or Lustre instance has one folder under the emulator's storage root (made on create, removed on
delete) and each Hyperdisk ML disk one too (made when first mounted, named by the disk's id, so a disk made
again under the same name starts empty); every user command the node runs has that folder bound at
"path" in its sandbox (read-only when "ro"; a Hyperdisk ML disk read-only unless the node has it attached
READ_WRITE in READ_WRITE_SINGLE mode, as the VM that fills it does), opened as sandbox.py opens a
bucket mount: one name at a time from the storage root, never through a link. So what node 0 writes at
/shared, node 1 reads at /shared.

An entry that names no instance, one not READY (ACTIVE for Lustre), a disk not attached to the node, a path
that is not absolute, is reserved or is given twice, or an export that is not the instance's, refuses the
node's job in one line (PathRefused), as a node whose mount failed would fail it.
"""

from __future__ import annotations

import json
import os
import posixpath
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..core import ApiError
from .sandbox import RESERVED, Mount
from .storage import PathRefused

KEY = "gcpgpu-storage"
KINDS = ("filestore", "lustre", "hyperdisk-ml")
_INSTANCE = re.compile(r"^projects/[^/]+/locations/[^/]+/instances/[^/]+$")
_DISK = re.compile(r"^projects/[^/]+/zones/[^/]+/disks/[^/]+$")


class SharedStorage:
    """Resolves `gcpgpu-storage` entries. The emulator plugs its services in: `services` maps a kind to a
    backend with state(name), export(name), folder_parts(name) and ready_state (fakes/managed.py), and
    `disk` resolves a Hyperdisk ML entry: (name, instance, device) -> (folder parts, writable), or raises
    PathRefused (disk_resolver below)."""

    def __init__(self) -> None:
        self.services: dict[str, Any] = {}
        self.disk: Callable[[str, dict, Any], tuple[tuple[str, ...], bool]] | None = None

    def mounts(self, inst: dict) -> list[Mount]:
        """The node's shared mounts (source: KIND NAME; parts: the folder under the storage root); [] when its
        metadata has none. PathRefused (one line) when an entry cannot be mounted."""
        items = {i.get("key"): i.get("value") or "" for i in (inst.get("metadata") or {}).get("items", [])}
        raw = items.get(KEY, "")
        if not raw.strip():
            return []
        try:
            entries = json.loads(raw)
        except ValueError:
            raise PathRefused(f"{KEY}: the metadata is not JSON") from None
        if not isinstance(entries, list):
            raise PathRefused(f"{KEY}: the metadata is not a JSON list of mounts")
        out: list[Mount] = []
        for entry in entries:
            mount = self._one(entry, inst)
            if any(m.target == mount.target for m in out):
                raise PathRefused(f"{KEY}: {mount.target} is mounted twice")
            out.append(mount)
        return out

    def _one(self, entry: Any, inst: dict) -> Mount:
        if not isinstance(entry, dict):
            raise PathRefused(f"{KEY}: {entry!r} is not an object with kind, name and path")
        kind, name, path = entry.get("kind"), entry.get("name"), entry.get("path")
        what = f"{KEY}: {kind} {name}"
        if kind not in KINDS:
            raise PathRefused(f"{KEY}: kind {kind!r} is not one of {', '.join(KINDS)}")
        if not isinstance(path, str) or not path.startswith("/") or path.startswith("//"):
            raise PathRefused(f"{what}: path {path!r} is not an absolute path")
        target = posixpath.normpath(path)
        if target == "/" or any(target == r or target.startswith(r.rstrip("/") + "/") for r in RESERVED if r != "/"):
            raise PathRefused(f"{what}: path {target} is reserved (it would cover {', '.join(RESERVED)})")
        if not isinstance(name, str):
            raise PathRefused(f"{what}: name is not a resource name")
        if kind == "hyperdisk-ml":
            if not _DISK.match(name) or self.disk is None:
                raise PathRefused(f"{what}: not a disk (projects/P/zones/Z/disks/N) this emulator has")
            parts, writable = self.disk(name, inst, entry.get("device"))
            return Mount(f"{kind} {name}", parts, target, bool(entry.get("ro")) or not writable)
        backend = self.services.get(kind)
        if not _INSTANCE.match(name) or backend is None:
            raise PathRefused(f"{what}: not an instance name (projects/P/locations/L/instances/N)")
        state = backend.state(name)
        if state is None:
            raise PathRefused(f"{what} on {target}: no such instance")
        if state != backend.ready_state:
            raise PathRefused(f"{what} on {target}: the instance is {state}, not {backend.ready_state}")
        export = entry.get("export")
        if export is not None and export != backend.export(name):
            raise PathRefused(f"{what} on {target}: export {export!r} is not the instance's ({backend.export(name)})")
        return Mount(f"{kind} {name}", backend.folder_parts(name), target, bool(entry.get("ro")))


def disk_folder_parts(project: str, zone: str, name: str, disk_id: object) -> tuple[str, ...]:
    """A disk's folder under the emulator's storage root: its bytes, as a disk of its own (the id makes a disk
    deleted and made again under its name a new, empty one)."""
    return ("disks", project, zone, f"{name}-{disk_id}")


def disk_resolver(compute: Any, root: Callable[[], Path]) -> Callable[[str, dict, Any], tuple[tuple[str, ...], bool]]:
    """SharedStorage.disk over the emulator's Compute: the Hyperdisk ML disk `name` must exist and be attached to
    the node (as `device`, when given); its folder ROOT/disks/PROJECT/ZONE/NAME-ID is made here."""

    def resolve(name: str, inst: dict, device: Any) -> tuple[tuple[str, ...], bool]:
        _, project, _, zone, _, disk_name = name.split("/")
        what = f"{KEY}: hyperdisk-ml {name}"
        try:
            disk = compute.get(project, f"zones/{zone}/disks", disk_name)
        except ApiError:
            raise PathRefused(f"{what}: no such disk") from None
        if not str(disk.get("type", "")).endswith("/diskTypes/hyperdisk-ml"):
            raise PathRefused(f"{what}: a {str(disk.get('type', '')).rsplit('/', 1)[-1]} disk, not hyperdisk-ml")
        attached = [d for d in inst.get("disks", []) if str(d.get("source", "")).endswith("/" + name)]
        if not attached:
            raise PathRefused(f"{what}: not attached to {inst.get('name')}")
        if device is not None and attached[0].get("deviceName") != device:
            raise PathRefused(f"{what}: attached to {inst.get('name')} as {attached[0].get('deviceName')}, not {device}")
        parts = disk_folder_parts(project, zone, disk_name, disk["id"])
        root().joinpath(*parts).mkdir(parents=True, exist_ok=True)
        writable = attached[0].get("mode") == "READ_WRITE" and disk.get("accessMode") == "READ_WRITE_SINGLE"
        return parts, writable

    return resolve


PROBE_BYTES = 8 << 20  # what a node's diagnostics write and read on each mount here (the real script: 1 GiB)


def measure(mounts: list[Any], root: Path, node: str) -> str:
    """A node's diagnostics report on its shared mounts, "PATH=w:MIB_S,r:MIB_S;..." (gcpgpu/storage/rates.py):
    really timed on the emulator's folders, with a small probe file; a read-only mount is only read (what it
    holds, up to the probe's size; "-" when it holds nothing)."""
    import time

    out = []
    for m in mounts:
        folder = root.joinpath(*m.parts)
        w = r = "-"
        if not m.ro:
            probe = folder / f".gcpgpu-diag-{node}"
            start = time.perf_counter()
            with open(probe, "wb") as f:
                f.write(b"\0" * PROBE_BYTES)
                f.flush()
                os.fsync(f.fileno())
            w = f"{PROBE_BYTES / 2**20 / max(time.perf_counter() - start, 1e-6):.1f}"
            files = [probe]
        else:
            files = [p for p in sorted(folder.rglob("*")) if p.is_file() and not p.is_symlink()]
        start, got = time.perf_counter(), 0
        for p in files:
            with open(p, "rb") as f:
                got += len(f.read(PROBE_BYTES - got))
            if got >= PROBE_BYTES:
                break
        if got:
            r = f"{got / 2**20 / max(time.perf_counter() - start, 1e-6):.1f}"
        if not m.ro:
            probe.unlink(missing_ok=True)
        out.append(f"{m.target}=w:{w},r:{r}")
    return ";".join(out)
