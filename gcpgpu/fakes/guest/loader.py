"""The copy a Hyperdisk ML loader VM's startup script makes (gcpgpu/storage/hyperdisk.py), done here.

The emulator runs no VM's startup script. A RUNNING VM whose metadata carries `gcpgpu-loader`
({"source": "gs://BUCKET/PREFIX", "device": DEVICE}) has, the first time its guest attributes are read,
the emulator's bucket folder ROOT/gcs/BUCKET/PREFIX copied into the folder of the disk it has attached
as DEVICE (host/shared_mounts.disk_resolver: the folder every node's job sees at the mount path), and reports
gcpgpu-loader/done = "ok", or "error: ..." as the real script does when the copy cannot be made (a disk
not attached read-write, a prefix with no objects).
"""

from __future__ import annotations

import json
import shutil
import threading
from collections.abc import Callable
from pathlib import Path

from ..host.shared_mounts import SharedStorage
from ..host.storage import PathRefused

KEY = "gcpgpu-loader"


class DiskLoader:
    def __init__(self, shared: SharedStorage, root: Callable[[], Path]) -> None:
        self.shared, self.root = shared, root
        self._done: dict[str, str] = {}  # instance id -> how its copy ended
        self._lock = threading.Lock()

    def attributes(self, inst: dict) -> dict[str, str]:
        items = {i.get("key"): i.get("value") or "" for i in (inst.get("metadata") or {}).get("items", [])}
        if KEY not in items or inst.get("status") != "RUNNING":
            return {}
        with self._lock:
            if str(inst["id"]) not in self._done:
                self._done[str(inst["id"])] = self._copy(items[KEY], inst)
            return {f"{KEY}/done": self._done[str(inst["id"])]}

    def _copy(self, raw: str, inst: dict) -> str:
        try:
            spec = json.loads(raw)
            source, device = str(spec["source"]), str(spec["device"])
        except (ValueError, KeyError, TypeError):
            return f"error: metadata {KEY} is not {{source, device}}"
        disk = next((d for d in inst.get("disks", []) if d.get("deviceName") == device), None)
        if disk is None or self.shared.disk is None:
            return f"error: no disk attached as {device}"
        name = str(disk.get("source", "")).split("/compute/v1/", 1)[-1]
        try:
            parts, writable = self.shared.disk(name, inst, device)
        except PathRefused as e:
            return f"error: {e}"
        if not writable:
            return f"error: {name} is not attached READ_WRITE in READ_WRITE_SINGLE mode"
        rel = source[len("gs://"):].strip("/").split("/")
        if not source.startswith("gs://") or any(p in ("", ".", "..") for p in rel):
            return f"error: {source} is not gs://BUCKET/PREFIX"
        src = self.root().joinpath("gcs", *rel)
        if not src.is_dir() or src.is_symlink():
            return f"error: no objects under {source}"
        shutil.copytree(src, self.root().joinpath(*parts), symlinks=True, dirs_exist_ok=True)
        return "ok"
