"""A cluster's autostop as its nodes carry it: the metadata keys, and reading them (cluster/autostop.py acts).

Apart from autostop.py so that observe.py (which shows it in `cluster list`) needs nothing that needs it.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

from gcpgpu.image.name import AGENT_KEY
from gcpgpu.times import format_duration

KEY = "gcpgpu-autostop"
# A node with AGENT_KEY runs the follower, from the image it names: which one is image/follower.py's rule.
__all__ = ["AGENT_KEY", "KEY", "of", "public", "setting", "shown"]


def setting(idle_s: int | None, down: bool, notify: list[str] | None = None) -> dict[str, Any] | None:
    """What `gcpgpu-autostop` holds: {"idle_s", "down"}, and "notify" (the webhooks told AUTOSTOPPED) when given."""
    if idle_s is None:
        return None
    return {"idle_s": int(idle_s), "down": bool(down), **({"notify": list(notify)} if notify else {})}


def public(value: dict[str, Any] | None) -> dict[str, Any] | None:
    """The setting as `cluster status` and `cluster list` show it: how many webhooks, never their URLs
    (a URL may hold a token)."""
    if not value or not value.get("notify"):
        return value
    return {**value, "notify": len(value["notify"])}


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
