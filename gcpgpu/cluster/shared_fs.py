"""A cluster's shared file systems (gcpgpu/storage) as part of `up`, `down` and a roll-back.

New ones follow the nodes: they are made in the zone the nodes landed in, after placement, so a
stockout that moves the nodes to the next zone moves nothing else (no instance is made in a zone
that then gets no nodes). They are created while the nodes boot; once every node runs, each node's
`gcpgpu-storage` metadata names them, and the startup script (which waits for that key) mounts them.
A re-run `up` or a recovery re-creating a node finds them by label and writes the same key; one that
must place every node again (all were lost) places them in the file systems' zone, so the nodes come
back to their data instead of meeting a new, empty file system in another zone.

A re-run `up` keeps every file system the cluster has (keep): one it made and the spec leaves out, one
attached with an earlier --mount. Only --no-filestore / --no-lustre / --no-hyperdisk-ml (drop: unmounted,
then deleted) and --unmount PATH (unmounted, never deleted) take one away, and neither `up` nor `down`
deletes a file system another cluster mounts (refuse_if_shared).
"""

from __future__ import annotations

from typing import Any

from gcpgpu.errors import CloudError, UsageProblem
from gcpgpu.gcp.clients import Clients
from gcpgpu.storage import apply as storage
from gcpgpu.storage import entries, hyperdisk
from gcpgpu.storage.spec import wanted

from . import holdings
from .names import LABEL_ATTEMPT, LABEL_CLUSTER, LABEL_MANAGED
from .observe import Node, observe_nodes, project_nodes
from .plan import Plan
from .session import Session


def check_attached(s: Session, plan: Plan, zones: list[str]) -> None:
    """Every file system the nodes attach (--mount filestore:NAME:/path) exists in one of `zones` (or their
    region): checked before anything is made, not after the nodes (a typo cost a whole `up` and roll-back)."""
    for w in wanted(plan.spec):
        if not w.created and w.kind != hyperdisk.KIND:
            storage.find_attached(s.clients, s.project, w, zones)


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


_FIELD = {"filestore": "filestore", "lustre": "lustre", hyperdisk.KIND: "hyperdisk_ml"}


def keep(clients: Clients, project: str, spec: Any) -> list[str]:
    """Before `up` plans: add to `spec` every file system the cluster has that it leaves out (made: its size and
    tier; attached: its --mount), so the plan, the nodes' metadata and zones keep it. The lines saying what is
    kept and what goes. A path the cluster already mounts something else at is refused."""
    from .observe import observe_nodes

    held = holdings.of_cluster(clients, project, spec.name, observe_nodes(clients, project, spec.name))
    asked = {w.path: w for w in wanted(spec)}
    lines: list[str] = []
    for h in held:
        if h.kind == holdings.STATE:
            continue
        if h.attached:
            if h.path in spec.unmount:
                lines.append(f"unmounting {h.words()} from every node (it is not deleted)")
                continue
            w = asked.get(str(h.path))
            if w is not None and w.created:
                raise UsageProblem(f"--{w.kind}: cluster {spec.name} already mounts {h.words()} at {h.path}; pass "
                                   f"--unmount {h.path} to mount the new one there")
            if w is not None and h.name in (w.existing, storage.resolve(w, project, h.location)):
                continue  # asked for again
            if w is not None:
                raise UsageProblem(f"--mount {w.kind}:{w.existing}:{w.path}: cluster {spec.name} already mounts "
                                   f"{h.words()} there; pass --unmount {h.path} to replace it")
            spec.mounts = [*spec.mounts, f"{h.kind}:{h.name}:{h.path}"]
            lines.append(f"keeping {h.words()} (--unmount {h.path} stops mounting it)")
        elif h.kind in spec.remove:
            lines.append(f"removing {h.words()}: unmounted from every node, then deleted")
        elif getattr(spec, _FIELD[h.kind]) is None:
            if h.kind == hyperdisk.KIND:
                if not h.source:
                    lines.append(f"note: {h.words()} names no bucket path: not mounted (--no-hyperdisk-ml deletes it)")
                    continue
                spec.hyperdisk_ml = h.source
            else:
                setattr(spec, h.kind, h.size_gib)
                setattr(spec, f"{h.kind}_tier", h.tier)
            lines.append(f"keeping {h.words()} (--no-{h.kind} unmounts and deletes it)")
    made = {h.kind for h in held if not h.attached}
    lines += [f"--no-{kind}: cluster {spec.name} has no {kind}; nothing to remove" for kind in spec.remove
              if kind not in made]
    attached = {h.path for h in held if h.attached}
    lines += [f"--unmount {path}: cluster {spec.name} has nothing attached there" for path in spec.unmount
              if path not in attached]
    wanted(spec)  # what was added is checked as the user's own flags are
    return lines


def refuse_if_shared(clients: Clients, project: str, cluster: str, kinds: tuple[str, ...] = ("filestore", "lustre"),
                     override: str = "pass --force-storage to delete it anyway") -> None:
    """Refuse (one line) when another cluster mounts one of `cluster`'s own file systems of `kinds`."""
    from .observe import observe_nodes

    own = [h for h in holdings.of_cluster(clients, project, cluster, observe_nodes(clients, project, cluster))
           if not h.attached and h.kind in kinds]
    names = [h.name for h in own]
    users = holdings.users(project_nodes(clients, project, managed_only=False) if names else [], cluster, names)
    for h in own:
        if h.name in users:
            raise CloudError(f"cluster {cluster}'s {holdings.WORDS[h.kind]} {h.short} is mounted by "
                             f"{', '.join(users[h.name])}: deleting it would take it from under that cluster's jobs; "
                             f"unmount it there first ('gcpgpu cluster up OTHER ... --unmount PATH'), or {override}")


def drop(s: Session, plan: Plan) -> list[str]:
    """Delete the cluster's own file systems of the kinds `up` was told to remove (after the nodes' metadata
    stopped naming them); one line per one left."""
    if not plan.spec.remove:
        return []
    from gcpgpu.storage.access import remove_private_access

    labels = {LABEL_CLUSTER: plan.name, LABEL_MANAGED: "true"}
    say = lambda text: s.report.step("storage", text)  # noqa: E731
    found = storage.owned(s.clients, s.project, labels, tuple(plan.spec.remove))
    lines = storage.delete(s.clients, s.project, found, say, s.check_lease, labels) if found else []
    if "lustre" in plan.spec.remove and not storage.owned(s.clients, s.project, labels, ("lustre",)):
        lines += remove_private_access(s.clients, s.project, labels, say, s.check_lease)
    return lines


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
    if not found and not wanted(plan.spec) and not (plan.spec.remove or plan.spec.unmount):
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
    # A node without the key mounts nothing: it needs no "[]".
    todo = [n for n in nodes if n.metadata.get(entries.KEY, value if not found else None) != value]

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
    named = " ".join(lines)
    lines += [f"{kind} instance {name}: still exists after down" for kind, name in left if name not in named]
    lustres = [name for kind, name in left if kind == "lustre"]
    if lustres:  # a range in use cannot go; say so rather than leave it unnamed
        return lines + [f"private service access of cluster {cluster}: kept while lustre instance {lustres[0]} "
                        "exists"]
    # The private service access made for a Lustre goes once no instance of the cluster uses it.
    return lines + remove_private_access(s.clients, s.project, labels, say, s.check_lease)
