"""Autostop: a cluster that has run no job for a while stops itself (or, with --down, goes away).

The setting lives on the nodes (metadata `gcpgpu-autostop`: {"idle_s": N, "down": bool} and, with
--notify, "notify": [URL, ...]; and in the spec each node carries, so a recovery's replacement nodes get it too), where the follower every
node runs (gcpgpu/node/agent.py) reads it; the one that leads (jobs/cluster/follower.py) judges the cluster
idle (no job running, GPUs under the metrics' idle floor) and acts here, holding the cluster's
`up`/`down` lease like any other change. Nothing off the cluster is needed: close the laptop.

Stopping is instances.stop on every node (the judging node last): disks stay and are billed,
GPUs are not, `cluster up` starts them again. --down deletes what `cluster down` deletes, in its
order, except that the judging node goes last and what only its own deletion frees (a compact
placement policy it is in, a network it is on) cannot be deleted by it: Compute Engine refuses to
delete a resource a VM still uses. Those cost nothing and are said in the node's log;
`gcpgpu cluster down NAME` removes them. A cluster without its own placement policy or networks
(--no-placement, the default network) leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gcpgpu.gcp import clock
from gcpgpu.gcp.clients import Clients
from gcpgpu.gcp.operations import call
from gcpgpu.image.name import stale_image
from gcpgpu.times import format_timestamp, parse_duration

from .autostop_setting import AGENT_KEY, KEY, of, public, setting, shown
from .kinds import NODES
from .names import NoSuchCluster
from .observe import Node, observe, observe_nodes
from .session import Session
from .spend import KEY as SPEND_KEY

__all__ = ["AGENT_KEY", "KEY", "of", "public", "setting", "shown"]  # the setting, read where it is set

MIN_S, MAX_S = 60, 30 * 86400
# A test seam, as GCPGPU_METADATA_URL is the job agent's: idle time counts this many times faster.
SCALE_ENV = "GCPGPU_AUTOSTOP_SCALE"


def parse(value: Any, where: str = "--autostop") -> int:
    """'30m', '2h' -> seconds, between a minute and 30 days; one line naming `where` otherwise."""
    return parse_duration(value, where, at_least=MIN_S, at_most=MAX_S)


def metadata_items(idle_s: int | None, down: bool, region: str, project: str,
                   image: str | None = None, notify: list[str] | None = None,
                   max_spend: float | None = None) -> list[dict[str, str]]:
    """What a node carries for its autostop and its spend cap (spend.py; nothing when both are off);
    `image`: what its follower runs from; `notify`: the webhooks its leader tells AUTOSTOPPED and
    SPEND_WARNING."""
    from . import spend

    value = setting(idle_s, down, notify)
    capped = spend.items(max_spend, notify)
    if value is None and not capped:
        return []
    own = [{"key": KEY, "value": json.dumps(value, sort_keys=True)}] if value is not None else []
    return [*own, *capped, {"key": AGENT_KEY, "value": image or stale_image(region, project)}]


def set_on(clients: Clients, project: str, cluster: str, idle_s: int | None, down: bool,
           fence: Callable[[], None] = lambda: None, image: str | None = None,
           notify: list[str] | None = None) -> list[Node]:
    """Write the autostop (None: cancel it) on every node, in its metadata and in the spec it carries;
    `image` (the last `container build`) is what the nodes' follower runs from; `notify`, the webhooks
    told AUTOSTOPPED (the whole setting is written: none given, none kept)."""
    from gcpgpu.gcp.compute import compute_types

    compute = compute_types()

    from gcpgpu.gcp.operations import batch

    nodes = observe_nodes(clients, project, cluster)
    if not nodes:
        raise NoSuchCluster(project, cluster)  # the CLI adds "did you mean" (unknown.py: not imported here)

    def put(node: Node) -> Any:
        items = {k: v for k, v in node.metadata.items() if k not in (KEY, AGENT_KEY)}
        if idle_s is not None:
            items.update({i["key"]: i["value"] for i in metadata_items(idle_s, down, node.region, project, image,
                                                                       notify)})
        elif (node.metadata.get("gcpgpu-job") or node.metadata.get(SPEND_KEY)) and node.metadata.get(AGENT_KEY):
            items[AGENT_KEY] = node.metadata[AGENT_KEY]  # a detached job, or a spend cap, still needs its follower
        if items.get("gcpgpu-spec"):
            with contextlib.suppress(ValueError):
                spec = json.loads(items["gcpgpu-spec"])
                spec.update(autostop=idle_s, autostop_down=bool(down) if idle_s is not None else False,
                            autostop_notify=list(notify or []) if idle_s is not None else [])
                if image:
                    spec["agent_image"] = image  # a node a recovery re-creates runs the same follower
                items["gcpgpu-spec"] = json.dumps(spec, sort_keys=True)
        fence()
        body = compute.Metadata(fingerprint=node.metadata_fingerprint,
                                   items=[compute.Items(key=k, value=v) for k, v in items.items()])
        return call(clients.compute("InstancesClient").set_metadata,
                    {"project": project, "zone": node.zone, "instance": node.name, "metadata_resource": body})

    batch(clients, project, put, nodes)
    return nodes


@dataclass(frozen=True)
class Changed:
    """What `cluster autostop` left on a cluster: the setting (None: off) and the nodes that carry it."""

    value: dict[str, Any] | None
    nodes: list[Node]


def change(clients: Clients, project: str, cluster: str, idle_s: int | None, down: bool, notify: list[str],
           follower_image: Callable[[str, str], str]) -> Changed:
    """Set the cluster's whole autostop (idle_s None: cancel it), as `cluster autostop` does. Before any
    change: the webhooks checked (one line, before any request), the cluster found, and, unless
    cancelling, the image its followers run from resolved (`follower_image(region, machine_type)`, the
    rule in image/follower.py: none built stops here). Then, holding the cluster's lease (waiting for
    another up or down), the setting is written on every node, the lease checked before each write."""
    from gcpgpu.specfile import check_urls

    urls = check_urls(notify)  # as job submit --notify
    found = observe_nodes(clients, project, cluster)
    if not found:  # before the lease: nothing written
        raise NoSuchCluster(project, cluster)  # the CLI adds "did you mean" (unknown.py: not imported here)
    image = None if idle_s is None else follower_image(found[0].region, found[0].machine_type)
    s = Session(clients, project)
    with s.holding(cluster, "autostop", wait_for_lease=True):
        nodes = set_on(clients, project, cluster, idle_s, down, s.check_lease, image, urls)
    return Changed(setting(idle_s, down, urls), nodes)


class IdleClock:
    """Since when the leader has seen the cluster idle (its own observation: a new leader starts over,
    so a cluster is never stopped sooner than its setting says)."""

    def __init__(self) -> None:
        self.since: float | None = None
        self.since_wall: float | None = None  # the same moment by the wall clock, for AUTOSTOPPED's idle_since

    def reset(self) -> None:
        self.since = self.since_wall = None

    def idle_for(self, idle: bool) -> float:
        """Seconds idle so far (scaled for tests), 0 once not idle."""
        if not idle:
            self.reset()
            return 0.0
        now = clock.monotonic()
        if self.since is None:
            self.since, self.since_wall = now, clock.now()
        return (now - self.since) * float(os.environ.get(SCALE_ENV) or 1.0)

    def idle_since(self) -> str | None:
        """When this leader began seeing the cluster idle (RFC 3339, UTC), None when it does not."""
        if self.since_wall is None:
            return None
        return format_timestamp(self.since_wall)


def stop(s: Any, cluster: str, own: str, before_last: Callable[[], None]) -> list[str]:
    """Stop every RUNNING node, the judging node `own` last (its stop ends the judge; `before_last()`
    lets go of the leases right before it)."""
    nodes = [n for n in observe_nodes(s.clients, s.project, cluster) if n.status == "RUNNING"]
    others = [n for n in nodes if n.name != own]
    mine = [n for n in nodes if n.name == own]

    def halt(n: Node) -> Any:
        return s.call(s.client("InstancesClient").stop, {"project": s.project, "zone": n.zone, "instance": n.name})

    if others:
        s.batch(halt, others)
    before_last()
    for n in mine:
        call(s.client("InstancesClient").stop, {"project": s.project, "zone": n.zone, "instance": n.name})
    return [n.name for n in nodes]


def down(s: Any, cluster: str, own: str, say: Callable[[str], None], before_last: Callable[[], None]) -> list[str]:
    """Delete the cluster as `cluster down` does, the judging node `own` last. `before_last()` runs right
    before that node's deletion (it lets go of the leases: nothing may outlive the judge). What only
    that deletion frees is returned, one line each (the judge cannot wait for it)."""
    from .nat import settle as settle_nats
    from .teardown import delete_batch, delete_observed

    obs = observe(s.clients, s.project, cluster)
    todo = copy.copy(obs)
    mine = [n for n in obs.nodes if n.name == own]
    todo.nodes = [n for n in obs.nodes if n.name != own]
    todo.routers, notes = settle_nats(s.clients, s.project, cluster, obs)
    for line in notes:
        say(line)
    left = delete_observed(s.clients, s.project, todo, lambda _k, text: say(text), s.check_lease)
    if left:
        say(f"left for 'gcpgpu cluster down {cluster}' (in use by {own} until it is gone): " + "; ".join(left))
    before_last()
    if mine:
        say(f"deleting {own}, the last node")
        delete_batch(s.clients, s.project, NODES, [(n.zone, n.name) for n in mine])
    return left
