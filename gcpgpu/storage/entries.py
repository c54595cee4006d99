"""The `gcpgpu-storage` instance metadata: what each node mounts, and where.

A JSON list, one entry per shared file system:
    {"kind": "filestore" | "lustre" | "hyperdisk-ml",
     "name": "projects/P/locations/L/instances/N" (or projects/P/zones/Z/disks/N for Hyperdisk ML),
     "path": "/shared", "export": "IP:/SHARE" | "IP@tcp:/FSNAME" | null, "device": DEVICE_NAME | null,
     "ro": bool}
The node's startup script mounts each entry at `path` before the agent starts (templates/startup.sh.j2),
a job's container gets each path bound at the same path (read-only when ro), and the emulator binds the
instance's folder there in every command it runs on that node.
"""

from __future__ import annotations

import json
from typing import Any

KEY = "gcpgpu-storage"


def entry(kind: str, name: str, path: str, export: str | None = None, device: str | None = None,
          ro: bool = False) -> dict[str, Any]:
    return {"kind": kind, "name": name, "path": path, "export": export, "device": device, "ro": ro}


def dumps(entries: list[dict[str, Any]]) -> str:
    return json.dumps(entries, sort_keys=True, separators=(",", ":"))


def loads(value: str | None) -> list[dict[str, Any]]:
    """A node's entries; [] for none or for a value that is not a list of entries."""
    try:
        data = json.loads(value or "[]")
    except ValueError:
        return []
    return [e for e in data if isinstance(e, dict) and isinstance(e.get("path"), str)] if isinstance(data, list) else []


def container_binds(entries: list[dict[str, Any]]) -> list[str]:
    """docker --volume arguments binding each mount into a job's container at the same path."""
    return [f"{e['path']}:{e['path']}{':ro' if e.get('ro') else ''}" for e in entries]
