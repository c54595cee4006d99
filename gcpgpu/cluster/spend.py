"""A cluster's spend cap (`cluster up --max-spend USD`) as its nodes carry it; the cluster's own follower
enforces it (gcpgpu/jobs/cluster/spendcap.py while it follows a job, gcpgpu/node/agent.py otherwise).

The setting lives on the nodes (metadata `gcpgpu-max-spend`: {"usd": N} and, with --notify,
"notify": [URL, ...]; and in the spec each node carries, so a recovery's replacement nodes get it too),
beside the follower's image (AGENT_KEY), as autostop's does. The cluster's cost is its COST SO FAR
(cost.py: its nodes' current runs at the catalog's price): at 80 % its leader tells the webhooks
SPEND_WARNING, at the cap it stops the job (checkpoint first) and then the cluster (instances.stop:
disks stay, GPUs are no longer billed). `cluster up` starts it again: a new run, counted from zero.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

from . import cost

KEY = "gcpgpu-max-spend"
WARN_AT = 0.8


def setting(usd: float | None, notify: list[str] | None = None) -> dict[str, Any] | None:
    if usd is None:
        return None
    return {"usd": float(usd), **({"notify": list(notify)} if notify else {})}


def of(nodes: list[Any]) -> dict[str, Any] | None:
    """The cluster's spend cap as its nodes carry it (None: none)."""
    for node in nodes:
        raw = node.metadata.get(KEY)
        if raw:
            with contextlib.suppress(ValueError):
                value = json.loads(raw)
                if isinstance(value, dict) and value.get("usd"):
                    return value
    return None


def items(usd: float | None, notify: list[str] | None) -> list[dict[str, str]]:
    """The node's metadata item for its cap (none without one)."""
    value = setting(usd, notify)
    return [] if value is None else [{"key": KEY, "value": json.dumps(value, sort_keys=True)}]


def level(nodes: list[Any], cap: dict[str, Any] | None, now: float | None = None) -> tuple[str | None, float | None]:
    """("warn" at 80 % of the cap, "stop" at it, else None; the cluster's cost so far, None without a price)."""
    if not cap:
        return None, None
    usd = cost.summary(nodes, now)["cost_usd"]
    if usd is None:
        return None, None
    if usd >= float(cap["usd"]):
        return "stop", usd
    return ("warn" if usd >= WARN_AT * float(cap["usd"]) else None), usd


def put_on(clients: Any, project: str, cluster: str, usd: float, notify: list[str], image: str | None,
           fence: Any = lambda: None) -> list[str]:
    """Write the cap on each node of `cluster` that does not carry it yet (a re-run `cluster up --max-spend` on a
    cluster made without it, or with another), in its metadata and in the spec it carries, with the
    follower's image where the node has none. The nodes written."""
    from gcpgpu.gcp.compute import compute_types
    from gcpgpu.gcp.operations import batch, call
    from gcpgpu.image.name import stale_image

    from .autostop_setting import AGENT_KEY
    from .observe import observe_nodes

    compute = compute_types()
    value = json.dumps(setting(usd, notify), sort_keys=True)
    todo = [n for n in observe_nodes(clients, project, cluster) if n.metadata.get(KEY) != value]

    def put(node: Any) -> Any:
        items = {**node.metadata, KEY: value}
        items.setdefault(AGENT_KEY, image or stale_image(node.region, project))
        if items.get("gcpgpu-spec"):
            with contextlib.suppress(ValueError):
                spec = json.loads(items["gcpgpu-spec"])
                spec.update(max_spend=usd, autostop_notify=list(notify or spec.get("autostop_notify") or []))
                items["gcpgpu-spec"] = json.dumps(spec, sort_keys=True)
        fence()
        body = compute.Metadata(fingerprint=node.metadata_fingerprint,
                                items=[compute.Items(key=k, value=v) for k, v in items.items()])
        return call(clients.compute("InstancesClient").set_metadata,
                    {"project": project, "zone": node.zone, "instance": node.name, "metadata_resource": body})

    if todo:
        batch(clients, project, put, todo)
    return [n.name for n in todo]
