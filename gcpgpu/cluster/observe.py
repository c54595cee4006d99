"""What exists in GCP for a cluster, found from GCP alone (labels, names, description markers).

This is why any machine can run `status` or `down`: no local state file. Discovery is a handful of
list calls, made in parallel, whatever the cluster's size.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gcpgpu.gcp.clients import Clients
from gcpgpu.gcp.operations import parallel, raise_first, retrying

from .cost import summary
from .kinds import KINDS, NODES, ROUTERS, Kind, last
from .names import (
    LABEL_ATTEMPT,
    LABEL_CLUSTER,
    LABEL_MANAGED,
    LABEL_RANK,
    attempt_of,
    is_marked,
    node_rank,
    owner_of,
)


def _node_of_cluster(inst: Any, cluster: str) -> bool:
    """A node found by name belongs to `cluster` by its marker: description or gcpgpu-cluster metadata."""
    if is_marked(inst.description, cluster) or inst.description == f"gcpgpu cluster {cluster}":
        return True
    return any(i.key == "gcpgpu-cluster" and i.value == cluster for i in inst.metadata.items)


@dataclass
class Node:
    """A cluster's VM as jobs, doctor, metrics and recovery read it: the one node model."""

    name: str
    zone: str
    status: str
    internal_ip: str
    machine_type: str
    gpus: int
    rank: int | None
    labels: dict[str, str]
    label_fingerprint: str
    provisioning: str
    reservation: str | None
    expected_nodes: int | None = None  # the cluster's size as `up` wrote it in the node's metadata
    block: str | None = None  # resourceStatus.physicalHostTopology, where the API reports it
    subblock: str | None = None
    host: str | None = None
    network: str | None = None  # the primary NIC's network
    networks: list[str] = field(default_factory=list)  # every NIC's
    cluster: str = ""  # whose node it is: its label, else its description marker or metadata
    id: str = ""  # the instance id Monitoring series carry
    metadata: dict[str, str] = field(default_factory=dict)
    metadata_fingerprint: str = ""
    created: str = ""  # creationTimestamp, lastStartTimestamp, lastStopTimestamp (RFC 3339): uptime and cost
    last_start: str = ""
    last_stop: str = ""
    ends_at: str = ""  # resourceStatus.scheduling.terminationTimestamp: when maxRunDuration ends this run
    max_run_s: int | None = None  # scheduling.maxRunDuration, when the node has one
    # resourceStatus.upcomingMaintenance (Compute v1 discovery: type, maintenanceStatus,
    # windowStartTime, windowEndTime, canReschedule), when a window is scheduled
    maintenance: dict[str, Any] = field(default_factory=dict)
    compact: bool = False  # in a placement policy (resourcePolicies; gcpgpu attaches only those): its latency

    @property
    def region(self) -> str:
        return self.zone.rsplit("-", 1)[0]

    def row(self) -> dict[str, Any]:
        return {"name": self.name, "zone": self.zone, "internal_ip": self.internal_ip, "status": self.status,
                "gpus": self.gpus, "rank": self.rank, "machine_type": self.machine_type, "provisioning": self.provisioning,
                "block": self.block, "subblock": self.subblock,
                **({"maintenance": self.maintenance} if self.maintenance else {})}


@dataclass
class Observed:
    """A cluster's resources as GCP reports them now: one list per kind (kinds.KINDS)."""

    cluster: str
    nodes: list[Node] = field(default_factory=list)
    policies: list[dict] = field(default_factory=list)  # {name, region, vm_count}
    reservations: list[dict] = field(default_factory=list)  # {name, zone, count, in_use}
    networks: list[str] = field(default_factory=list)
    subnets: list[dict] = field(default_factory=list)  # {name, region}
    firewalls: list[str] = field(default_factory=list)
    routers: list[dict] = field(default_factory=list)  # {name, region}: the nodes' Cloud NAT
    owners: dict[str, str] = field(default_factory=dict)  # "kind/name" -> the `up` attempt that created it
    # Its file systems, disks and scheduler (holdings.py): filled by the callers that name them (status, list,
    # up's found line, down), not by observe(); not kinds (shared_fs.py and slurm_state.py delete them).
    held: list[Any] = field(default_factory=list)
    scheduler: str | None = None

    def of(self, kind: Kind) -> list[Any]:
        return getattr(self, kind.key)

    def owned_by(self, attempt: str) -> Observed:
        """Only what `attempt` created (what its roll-back may delete)."""
        out = Observed(self.cluster, owners={k: v for k, v in self.owners.items() if v == attempt})
        for kind in KINDS:
            setattr(out, kind.key, [x for x in self.of(kind) if out.owners.get(f"{kind.key}/{kind.name_of(x)}")])
        return out

    @property
    def empty(self) -> bool:
        return not self.count()

    def count(self) -> int:
        return sum(len(self.of(kind)) for kind in KINDS)

    def names(self) -> list[tuple[str, str]]:
        """(kind in words, name) of everything, in teardown order."""
        return [(kind.word, name) for kind in KINDS for _where, name in kind.items(self.of(kind))]

    def summary(self) -> str:
        from .holdings import summary as held_summary

        parts = [kind.counted(len(self.of(kind))) for kind in KINDS if kind is NODES or self.of(kind)]
        if self.scheduler:
            parts.append(f"scheduler {self.scheduler}")
        return ", ".join(parts + ([held_summary(self.held)] if self.held else []))


def _node(cluster: str | None, inst: Any) -> Node:
    """The node model of an instance; `cluster` None: the cluster it says it belongs to."""
    accs = list(inst.guest_accelerators)
    labels = dict(inst.labels)
    metadata = {i.key: i.value for i in inst.metadata.items}
    if cluster is None:
        cluster = labels.get(LABEL_CLUSTER) or owner_of(inst.description) or metadata.get("gcpgpu-cluster") or ""
    expected = metadata.get("gcpgpu-nodes", "")
    return Node(
        name=inst.name,
        zone=last(inst.zone),
        status=inst.status,
        internal_ip=inst.network_interfaces[0].network_i_p if inst.network_interfaces else "",
        machine_type=last(inst.machine_type),
        gpus=sum(a.accelerator_count for a in accs),
        rank=node_rank(cluster, inst.name, labels),
        labels=labels,
        label_fingerprint=inst.label_fingerprint,
        provisioning=inst.scheduling.provisioning_model or "STANDARD",
        reservation=(list(inst.reservation_affinity.values) or [None])[0]
        if inst.reservation_affinity.consume_reservation_type == "SPECIFIC_RESERVATION" else None,
        expected_nodes=int(expected) if expected.isdigit() else None,
        network=last(inst.network_interfaces[0].network) if inst.network_interfaces else None,
        networks=[last(nic.network) for nic in inst.network_interfaces],
        cluster=cluster,
        id=str(inst.id),
        metadata=metadata,
        metadata_fingerprint=inst.metadata.fingerprint,
        created=inst.creation_timestamp,
        last_start=inst.last_start_timestamp,
        last_stop=inst.last_stop_timestamp,
        ends_at=inst.resource_status.scheduling.termination_timestamp,
        max_run_s=int(inst.scheduling.max_run_duration.seconds) or None,
        maintenance=_maintenance(inst),
        compact=bool(inst.resource_policies),
        **_topology(inst),
    )


def _maintenance(inst: Any) -> dict[str, Any]:
    m = inst.resource_status.upcoming_maintenance
    if not (m.window_start_time or m.type_):
        return {}
    return {"type": m.type_, "status": m.maintenance_status, "window_start": m.window_start_time,
            "window_end": m.window_end_time, "can_reschedule": bool(m.can_reschedule)}


def _topology(inst: Any) -> dict[str, str | None]:
    """Block / sub-block / host from resourceStatus.physicalHostTopology (A3 8-GPU and A4 families in a
    compact placement; absent elsewhere, and where the account lacks access to the field)."""
    topo = inst.resource_status.physical_host_topology
    return {"block": topo.block or None, "subblock": topo.subblock or None, "host": topo.host or None}


# Partial responses (the `fields` system parameter, sent as its X-Goog-FieldMask header) for the
# lists `up` repeats while 1,000 nodes boot: a whole VM is ~17 KB of JSON (its startup script in
# metadata) that the client spends ~4 ms parsing; these views are a tenth of that.
ROW_FIELDS = ("name,zone,status,labels,labelFingerprint,machineType,guestAccelerators,id,networkInterfaces(network,"
              "networkIP),scheduling(provisioningModel,maxRunDuration),reservationAffinity,resourceStatus,"
              "creationTimestamp,lastStartTimestamp,lastStopTimestamp,resourcePolicies")
LABEL_FIELDS = "name,zone,status,labels,labelFingerprint,resourceStatus/physicalHostTopology"


def list_nodes(clients: Clients, project: str, label_filter: str, fields: str | None = None) -> list[Any]:
    """Every instance matching a label filter, across all zones, in one paged aggregatedList; `fields`:
    only these fields of each instance (the rest read as empty)."""
    mask = [("x-goog-fieldmask", f"items/*/instances({fields}),nextPageToken")] if fields else []
    pager = retrying()(clients.compute("InstancesClient").aggregated_list)(
        request={"project": project, "filter": label_filter, "max_results": 500}, metadata=mask)
    return [inst for _scope, scoped in pager for inst in scoped.instances]


def _by_rank(nodes: list[Node]) -> list[Node]:
    return sorted(nodes, key=lambda n: (n.rank is None, n.rank or 0, n.name))


def observe_nodes(clients: Clients, project: str, cluster: str, fields: str | None = None) -> list[Node]:
    """The cluster's nodes, rank order, from one aggregatedList (`fields`: as in list_nodes)."""
    found = list_nodes(clients, project, f"labels.{LABEL_CLUSTER} = {cluster}", fields)
    return _by_rank([_node(cluster, i) for i in found])


BRIEF_FIELDS = "name,zone,machineType,id,labels"


def brief_nodes(clients: Clients, project: str, cluster: str) -> list[dict[str, Any]]:
    """The cluster's nodes in rank order as id, name, rank, machine_type and zone only: one aggregatedList
    of those fields, read through the raw protobuf messages (a metrics view of 1,024 nodes needs no more,
    and building 1,024 whole Node models from proto-plus wrappers took ~0.3 s)."""
    out = []
    for inst in list_nodes(clients, project, f"labels.{LABEL_CLUSTER} = {cluster}", BRIEF_FIELDS):
        raw = type(inst).pb(inst)
        out.append({"id": str(raw.id), "name": raw.name, "rank": node_rank(cluster, raw.name, dict(raw.labels)),
                    "machine_type": last(raw.machine_type), "zone": last(raw.zone)})
    return sorted(out, key=lambda n: (n["rank"] is None, n["rank"] or 0, n["name"]))


def ranked_nodes(clients: Clients, project: str, cluster: str) -> list[Node]:
    """The cluster's nodes that have a rank, in rank order: what a job runs on."""
    return [n for n in observe_nodes(clients, project, cluster) if n.rank is not None]


def project_nodes(clients: Clients, project: str, managed_only: bool = True) -> list[Node]:
    """Every gcpgpu node of the project (any cluster; every VM with managed_only=False), from one
    aggregatedList; each knows its cluster (Node.cluster, "" for a VM that is no cluster's)."""
    found = list_nodes(clients, project, f"labels.{LABEL_MANAGED} = true" if managed_only else "")
    return [_node(None, inst) for inst in found]


def observe_nodes_by_name(clients: Clients, project: str, cluster: str) -> list[Node]:
    """Nodes named like the cluster's and marked as its own, whatever their labels say now."""
    import re

    found = list_nodes(clients, project, f'name eq "{re.escape(cluster)}-[0-9]+"')
    return [_node(cluster, i) for i in found if _node_of_cluster(i, cluster)]


def _all_nodes(clients: Clients, project: str, cluster: str) -> list[Node]:
    """By label and by name (a node relabelled by hand is still the cluster's), each node once."""
    by_label = observe_nodes(clients, project, cluster)
    seen = {n.name for n in by_label}
    return _by_rank(by_label + [n for n in observe_nodes_by_name(clients, project, cluster) if n.name not in seen])


def guest_attributes(clients: Clients, project: str, node: Node, namespace: str = "gcpgpu") -> dict[str, str]:
    """What the node reported under NAMESPACE/ (gcpgpu: its job agent; gcpgpu-node: its startup
    script), {} when it reported nothing."""
    from google.api_core import exceptions

    try:
        got = clients.compute("InstancesClient").get_guest_attributes(
            request={"project": project, "zone": node.zone, "instance": node.name, "query_path": f"{namespace}/"})
    except (exceptions.NotFound, exceptions.BadRequest):
        return {}  # nothing reported yet (or guest attributes off on an old node)
    return {item.key: item.value for item in got.query_value.items if item.namespace == namespace}


def observe(clients: Clients, project: str, cluster: str) -> Observed:
    """Find every resource of `cluster`: one list call per kind, in parallel, whatever its size."""
    owners: dict[str, str] = {}
    name_filter = f'name eq "{cluster}-.*"'

    def read(kind: Kind) -> list[Any]:
        if kind is NODES:
            nodes = _all_nodes(clients, project, cluster)
            owners.update({f"nodes/{n.name}": n.labels[LABEL_ATTEMPT] for n in nodes if n.labels.get(LABEL_ATTEMPT)})
            return nodes
        client = clients.compute(kind.client)
        if kind.listing:
            pager = retrying()(client.aggregated_list)(request={"project": project, "filter": name_filter})
            found = [r for _scope, scoped in pager for r in getattr(scoped, kind.listing)]
        else:
            found = list(retrying()(client.list)(request={"project": project, "filter": name_filter}))
        mine = [r for r in found if is_marked(r.description, cluster)]
        owners.update({f"{kind.key}/{r.name}": a for r in mine if (a := attempt_of(r.description))})
        assert kind.record is not None
        return [kind.record(r) for r in mine]

    results = raise_first(parallel(read, KINDS))
    return Observed(cluster, owners=owners, **{kind.key: found for kind, found in zip(KINDS, results, strict=True)})


def list_clusters(clients: Clients, project: str) -> list[dict[str, Any]]:
    """Every gcpgpu cluster in the project, one list call per resource kind in parallel: by its nodes
    (label, else the marker a node relabelled by hand still carries) and by its label-less
    resources, so a cluster half-built by an interrupted `up` (networks, no nodes yet) shows too."""

    def read(kind: Kind) -> list[tuple[str, Any]]:
        if kind is NODES:
            return [(n.cluster, n) for n in project_nodes(clients, project, managed_only=False) if n.cluster]
        client = clients.compute(kind.client)
        if kind.listing:
            pager = retrying()(client.aggregated_list)(request={"project": project})
            found = [r for _scope, scoped in pager for r in getattr(scoped, kind.listing)]
        else:
            found = list(retrying()(client.list)(request={"project": project}))
        return [(owner, r) for r in found if (owner := owner_of(r.description))]

    # A Cloud NAT serves its network, not one cluster: `down` may keep one for other VMs (nat.py).
    kinds = [kind for kind in KINDS if kind is not ROUTERS]
    results = raise_first(parallel(read, kinds))
    clusters: dict[str, Observed] = {}
    for kind, found in zip(kinds, results, strict=True):
        for owner, item in found:
            obs = clusters.setdefault(owner, Observed(owner))
            obs.of(kind).append(item if kind is NODES else kind.record(item) if kind.record else item)
    from . import holdings

    # A cluster's file systems and disks (three more list calls): one whose nodes are gone still holds them.
    for name, held in holdings.of_project(clients, project, {c: o.nodes for c, o in clusters.items()}).items():
        obs = clusters.setdefault(name, Observed(name))
        obs.held, obs.scheduler = held, holdings.scheduler(obs.nodes, held)
    for obs in clusters.values():
        obs.scheduler = obs.scheduler or holdings.scheduler(obs.nodes, [])
    return [_cluster_row(name, obs) for name, obs in sorted(clusters.items())]


def _cluster_row(name: str, obs: Observed) -> dict[str, Any]:
    from . import holdings
    from .autostop_setting import of as autostop_of
    from .autostop_setting import public
    from .cost import shown_cost

    nodes = obs.nodes
    states: dict[str, int] = {}
    for n in nodes:
        states[n.status] = states.get(n.status, 0) + 1
    status = ", ".join(f"{v} {k}" for k, v in sorted(states.items()))
    if not nodes:
        status = (f"incomplete ({obs.summary()}): 'gcpgpu cluster up {name} ...' finishes it, "
                  f"'gcpgpu cluster down {name}' removes it")
    spent = summary(nodes)
    billed = [h for h in obs.held if not h.attached]
    shown = shown_cost(spent["cost_usd"]) if nodes else "$0.00"  # nodes: "-" when the catalog has no price
    if billed:  # billed while they exist, at a price gcpgpu's data does not hold (holdings.py): never $0
        shown += " + storage (price unknown)"
    return {
        "cluster": name,
        "machine_type": nodes[0].machine_type if nodes else "-",
        "nodes": len(nodes),
        "gpus": sum(n.gpus for n in nodes),
        "zones": ",".join(sorted({n.zone for n in nodes})) or "-",
        "status": status,
        **spent,
        "cost": shown,
        "scheduler": obs.scheduler or "-",
        "owner": next((n.metadata["gcpgpu-owner"] for n in nodes if n.metadata.get("gcpgpu-owner")), "unknown"),
        "storage": holdings.summary(obs.held) or "-",
        "storage_detail": [h.row() for h in obs.held],
        "autostop": public(autostop_of(nodes)),
    }


def problems(obs: Observed) -> list[str]:
    """What `cluster status` flags: missing nodes, duplicate or missing rank labels, nodes relabelled by hand."""
    out = []
    expected = max([n.expected_nodes or 0 for n in obs.nodes] + [int(p.get("vm_count") or 0) for p in obs.policies]
                   + [0])
    have = {n.name for n in obs.nodes}
    if len(have) < expected:
        # Name the ranks nobody holds (ranks follow the fabric, so after a shrink names need not be 0..N-1);
        # names when the rank labels cannot tell.
        held = {n.labels.get(LABEL_RANK) for n in obs.nodes}
        ranks = [r for r in range(expected) if str(r) not in held]
        names = [f"{obs.cluster}-{r}" for r in range(expected) if f"{obs.cluster}-{r}" not in have]
        which = names if len(names) == expected - len(have) else [f"rank {r}" for r in ranks]
        out.append(f"{expected - len(have)} of {expected} node(s) missing: {', '.join(which[:8])}")
    from .cost import ended_by_run_limit

    for n in obs.nodes:
        if n.status == "TERMINATED":
            why = "Spot VM preempted" if n.provisioning == "SPOT" else "stopped"
            if ended_by_run_limit(n):
                why = "stopped by Compute Engine: its --max-run-duration ended"
            out.append(f"node {n.name} is TERMINATED ({why}): 'gcpgpu cluster up {obs.cluster} ...' starts it again")
    by_rank: dict[str, list[str]] = {}
    for n in obs.nodes:
        rank = n.labels.get(LABEL_RANK)
        if rank is None:
            out.append(f"node {n.name} has no {LABEL_RANK} label")
        else:
            by_rank.setdefault(rank, []).append(n.name)
        if n.labels.get(LABEL_CLUSTER) != obs.cluster:
            out.append(f"node {n.name} is labelled {LABEL_CLUSTER}={n.labels.get(LABEL_CLUSTER)!r}, not "
                       f"{obs.cluster!r} (found by its name and marker)")
    for rank, names in sorted(by_rank.items()):
        if len(names) > 1:
            out.append(f"rank {rank} is claimed by {len(names)} nodes: {', '.join(sorted(names))}")
    return out
