"""A cluster's autostop as its nodes carry it: the metadata keys, and reading them (cluster/autostop.py acts).

Apart from autostop.py so that observe.py (which shows it in `cluster list`) needs nothing that needs it.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

from gcpgpu.image.name import STALE_TAG, image_uri, is_gcpgpu_image
from gcpgpu.times import format_duration

KEY = "gcpgpu-autostop"
AGENT_KEY = "gcpgpu-agent"  # a node with it runs the follower (its value: the image it runs from)
# The follower runs from the gcpgpu training image (gcpgpu/image/name.py) `container build` last pushed
# for the cluster (resolved at `cluster up --autostop`, `cluster autostop` and `job submit --detach` by
# gcpgpu/image/default.py; the spec keeps it as agent_image, a detached job's record as agent_image
# too), or from a detached job's own image when it is one. The :latest tag (stale_image) is left only
# for nodes and jobs an older gcpgpu wrote without agent_image.


def stale_image(region: str, project: str) -> str:
    """The follower image older gcpgpu versions wrote: a tag nothing pushes."""
    return image_uri(project, region, STALE_TAG)


def agent_image(job_image: str | None, region: str, project: str, *fallbacks: str | None) -> str:
    """The image a node's follower runs from: the job's, when it is a gcpgpu training image, else the
    first of `fallbacks` (what the node already runs its follower from; what `job submit --detach`
    resolved, kept in the job's record) that is not the stale tag."""
    stale = stale_image(region, project)
    if is_gcpgpu_image(job_image, region, project):
        return str(job_image)
    return next((f for f in fallbacks if f and f != stale), stale)


def shared_follower(nodes: list[Any], project: str) -> str | None:
    """The image every one of `nodes` already runs its follower from, when they share one that is not
    the stale tag; else None."""
    had = {n.metadata.get(AGENT_KEY) for n in nodes}
    if len(had) != 1 or not nodes:
        return None
    kept = had.pop()
    return kept if kept and kept != stale_image(nodes[0].region, project) else None


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
