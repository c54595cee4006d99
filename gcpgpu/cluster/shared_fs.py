"""A cluster's shared file systems (gcpgpu/storage) as part of `up`, `down` and a roll-back.

New ones follow the nodes: they are made in the zone the nodes landed in, after placement, so a
stockout that moves the nodes to the next zone moves nothing else (no instance is made in a zone
that then gets no nodes). They are created while the nodes boot; once every node runs, each node's
`gcpgpu-storage` metadata names them, and the startup script (which waits for that key) mounts them.
A re-run `up` or a recovery re-creating a node finds them by label and writes the same key; one that
must place every node again (all were lost) places them in the file systems' zone, so the nodes come
back to their data instead of meeting a new, empty file system in another zone.
"""

from __future__ import annotations

from typing import Any

from gcpgpu.storage import apply as storage
from gcpgpu.storage import entries, hyperdisk
from gcpgpu.storage.spec import wanted

from .names import LABEL_ATTEMPT, LABEL_CLUSTER, LABEL_MANAGED
from .observe import Node, observe_nodes
from .plan import Plan
from .session import Session


def ensure(s: Session, plan: Plan, zone: str) -> list[dict[str, Any]]:
    """Create (or find) the cluster's file systems in `zone`; their metadata entries ([] when none)."""
    wants = wanted(plan.spec)
    if not wants:
        return []
    labels = {LABEL_CLUSTER: plan.name, LABEL_MANAGED: "true", LABEL_ATTEMPT: s.attempt}
    with s.report.waiting("waiting for the shared file systems to be READY"):
        return storage.ensure(s.clients, s.project, plan.name, wants, zone, plan.spec.network, labels,
                              lambda text: s.report.step("storage", text), s.check_lease,
                              vm={"nic": plan.instance_properties["networkInterfaces"][0],
                                  "service_accounts": plan.instance_properties.get("serviceAccounts", [])})


def pin_zones(s: Session, plan: Plan, zones: list[str]) -> list[str]:
    """Where new nodes may go when the cluster already has its zonal file systems (all its nodes were lost,
    say): their zone, so the nodes come back to the data rather than to a new, empty file system."""
    kinds = tuple(w.kind for w in wanted(plan.spec) if w.created)
    if not kinds:
        return zones
    labels = {LABEL_CLUSTER: plan.name, LABEL_MANAGED: "true"}
    held = {name.split("/")[3] for _kind, name in storage.owned(s.clients, s.project, labels, kinds)}
    held_zones = [z for z in zones if z in held]
    if held and not held_zones and not any(h == plan.region for h in held):
        from gcpgpu.errors import CloudError

        raise CloudError(f"cluster {plan.name}'s file systems are in {', '.join(sorted(held))}, outside the zones "
                         f"asked for ({', '.join(zones)}); pass --zone {sorted(held)[0]} or take it down first")
    if held_zones and held_zones != zones:
        s.report.note(f"the cluster's file systems are in {held_zones[0]}: the nodes go there too")
    return held_zones or zones


def write_metadata(s: Session, plan: Plan, found: list[dict[str, Any]]) -> None:
    """Each node's `gcpgpu-storage` says `found` (left as it is where it already does)."""
    if not found and not wanted(plan.spec):
        return
    from gcpgpu.gcp.compute import compute_types

    compute = compute_types()

    value = entries.dumps(found)
    nodes = [n for n in observe_nodes(s.clients, s.project, plan.name) if n.name in plan.node_names]
    disks = [e for e in found if e["kind"] == hyperdisk.KIND]
    if disks:  # attached before the metadata names them: the startup script mounts them by device at once
        s.report.step("storage", f"Attaching {len(disks)} Hyperdisk ML disk(s) read-only to {len(nodes)} node(s)")
        from gcpgpu.gcp.operations import parallel, raise_first

        raise_first(parallel(lambda pair: _attach(s, *pair), [(e, n) for e in disks for n in nodes]))
    todo = [n for n in nodes if n.metadata.get(entries.KEY) != value]

    def put(n: Node) -> Any:
        items = {**n.metadata, entries.KEY: value}
        return s.call(s.client("InstancesClient").set_metadata, {
            "project": s.project, "zone": n.zone, "instance": n.name,
            "metadata_resource": compute.Metadata(
                fingerprint=n.metadata_fingerprint,
                items=[compute.Items(key=k, value=v) for k, v in items.items()])})

    if todo:
        s.report.step("storage", f"Telling {len(todo)} node(s) where to mount {len(found)} shared file system(s)")
        s.batch(put, todo)


def _attach(s: Session, entry: dict[str, Any], n: Node) -> Any:
    s.check_lease()
    op = hyperdisk.attach(s.clients, entry, s.project, n.zone, n.name)
    return op.result() if op is not None else None


def delete(s: Session, cluster: str, attempt: str | None = None) -> list[str]:
    """Delete the file systems `cluster` created (only `attempt`'s, when given); one line per one left.
    Attached ones carry no gcpgpu label, so they are never found here."""
    from gcpgpu.storage.access import remove_private_access

    labels = {LABEL_CLUSTER: cluster, LABEL_MANAGED: "true", **({LABEL_ATTEMPT: attempt} if attempt else {})}
    say = lambda text: s.report.step("storage", text)  # noqa: E731
    found = storage.owned(s.clients, s.project, labels)
    lines = storage.delete(s.clients, s.project, found, say, s.check_lease, labels) if found else []
    left = storage.owned(s.clients, s.project, labels) if found else []
    lines = lines or [f"{kind} instance {name}: still exists after down" for kind, name in left]
    # The private service access made for a Lustre goes once no instance of the cluster uses it.
    return lines or remove_private_access(s.clients, s.project, labels, say, s.check_lease)
