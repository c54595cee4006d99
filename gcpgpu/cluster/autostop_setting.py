"""A cluster's autostop as its nodes carry it: the metadata keys, and reading them (cluster/autostop.py acts).

Apart from autostop.py so that observe.py (which shows it in `cluster list`) needs nothing that needs it.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

from .cost import format_duration

KEY = "gcpgpu-autostop"
AGENT_KEY = "gcpgpu-agent"  # a node with it runs the follower (its value: the image it runs from)
# The training image (jobs/spec.py DEFAULT_IMAGE: tests keep them equal) has gcpgpu in it.
AGENT_IMAGE = "{region}-docker.pkg.dev/{project}/gcpgpu/gcpgpu-trainer:latest"


def setting(idle_s: int | None, down: bool) -> dict[str, Any] | None:
    return None if idle_s is None else {"idle_s": int(idle_s), "down": bool(down)}


def of(nodes: list[Any]) -> dict[str, Any] | None:
    """The cluster's autostop as its nodes carry it (None: off)."""
    for node in nodes:
        raw = node.metadata.get(KEY)
        if raw:
            with contextlib.suppress(ValueError):
                value = json.loads(raw)
                if isinstance(value, dict) and value.get("idle_s"):
                    return value
    return None


def shown(value: dict[str, Any] | None) -> str:
    """'30m', '1h (down)', or '-' when off: the AUTOSTOP column."""
    if not value:
        return "-"
    return format_duration(int(value["idle_s"])) + (" (down)" if value.get("down") else "")
