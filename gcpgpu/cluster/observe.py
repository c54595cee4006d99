"""What exists in GCP for a cluster, found from GCP alone (labels, names, description markers).

This is why any machine can run `status` or `down`: no local state file. Discovery is a handful of
list calls, made in parallel, whatever the cluster's size.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from gcpgpu.gcp.clients import Clients
from gcpgpu.gcp.operations import parallel, retrying

from .plan import LABEL_CLUSTER, LABEL_MANAGED, LABEL_RANK, marker, rank_of

LABEL_ATTEMPT = "gcpgpu-attempt"  # which `up` attempt created a node (descriptions carry " attempt=ID")
_ATTEMPT = re.compile(r"(?:^| )attempt=([a-z0-9-]+)(?: |$)")


def attempt_of(description: str) -> str | None:
    m = _ATTEMPT.search(description or "")
    return m.group(1) if m else None


def is_marked(description: str, cluster: str) -> bool:
    """The description marker of `cluster` exactly (cluster `c` must not claim cluster `c-x`'s resources)."""
    mark = marker(cluster)
    return description == mark or (description or "").startswith(mark + " ")


def _node_of_cluster(inst: Any, cluster: str) -> bool:
    """A node found by name belongs to `cluster` by its marker: description or gcpgpu-cluster metadata."""
    if is_marked(inst.description, cluster) or inst.description == f"gcpgpu cluster {cluster}":
        return True
    return any(i.key == "gcpgpu-cluster" and i.value == cluster for i in inst.metadata.items)


def _last(link: str) -> str:
    return link.rstrip("/").rsplit("/", 1)[-1]


@dataclass
class Node:
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

    def row(self) -> dict[str, Any]:
        return {"name": self.name, "zone": self.zone, "internal_ip": self.internal_ip, "status": self.status,
                "gpus": self.gpus, "rank": self.rank, "machine_type": self.machine_type, "provisioning": self.provisioning,
                "block": self.block, "subblock": self.subblock}


@dataclass
class Observed:
    """A cluster's resources as GCP reports them now."""

    cluster: str
    nodes: list[Node] = field(default_factory=list)
    policies: list[dict] = field(default_factory=list)  # {name, region, vm_count}
    reservations: list[dict] = field(default_factory=list)  # {name, zone, count, in_use}
    networks: list[str] = field(default_factory=list)
    subnets: list[dict] = field(default_factory=list)  # {name, region}
    firewalls: list[str] = field(default_factory=list)
    routers: list[dict] = field(default_factory=list)  # {name, region}: the nodes' Cloud NAT
    owners: dict[str, str] = field(default_factory=dict)  # "kind/name" -> the `up` attempt that created it

    def owned_by(self, attempt: str) -> Observed:
        """Only what `attempt` created (what its roll-back may delete)."""
        def mine(kind: str, name: str) -> bool:
            return self.owners.get(f"{kind}/{name}") == attempt

        return Observed(
            self.cluster, nodes=[n for n in self.nodes if mine("nodes", n.name)],
            policies=[p for p in self.policies if mine("policies", p["name"])],
            reservations=[r for r in self.reservations if mine("reservations", r["name"])],
            networks=[n for n in self.networks if mine("networks", n)],
            subnets=[s for s in self.subnets if mine("subnets", s["name"])],
            firewalls=[f for f in self.firewalls if mine("firewalls", f)],
            routers=[r for r in self.routers if mine("routers", r["name"])],
            owners={k: v for k, v in self.owners.items() if v == attempt})

    @property
    def empty(self) -> bool:
        return not (self.nodes or self.policies or self.reservations or self.networks or self.subnets or self.firewalls
                    or self.routers)

    def count(self) -> int:
        return (len(self.nodes) + len(self.policies) + len(self.reservations) + len(self.networks) + len(self.subnets)
                + len(self.firewalls) + len(self.routers))

    def summary(self) -> str:
        parts = [f"{len(self.nodes)} node(s)"]
        for what, items in (("placement polic(ies)", self.policies), ("reservation(s)", self.reservations),
                            ("network(s)", self.networks), ("subnetwork(s)", self.subnets),
                            ("firewall rule(s)", self.firewalls), ("Cloud NAT router(s)", self.routers)):
            if items:
                parts.append(f"{len(items)} {what}")
        return ", ".join(parts)


def _node(cluster: str, inst: Any) -> Node:
    accs = list(inst.guest_accelerators)
    labels = dict(inst.labels)
    rank_label = labels.get(LABEL_RANK)
    return Node(
        name=inst.name,
        zone=_last(inst.zone),
        status=inst.status,
        internal_ip=inst.network_interfaces[0].network_i_p if inst.network_interfaces else "",
        machine_type=_last(inst.machine_type),
        gpus=sum(a.accelerator_count for a in accs),
        rank=int(rank_label) if rank_label and rank_label.isdigit() else rank_of(cluster, inst.name),
        labels=labels,
        label_fingerprint=inst.label_fingerprint,
        provisioning=inst.scheduling.provisioning_model or "STANDARD",
        reservation=(list(inst.reservation_affinity.values) or [None])[0]
        if inst.reservation_affinity.consume_reservation_type == "SPECIFIC_RESERVATION" else None,
        expected_nodes=next((int(i.value) for i in inst.metadata.items if i.key == "gcpgpu-nodes"
                             and i.value.isdigit()), None),
        network=_last(inst.network_interfaces[0].network) if inst.network_interfaces else None,
        **_topology(inst),
    )


def _topology(inst: Any) -> dict[str, str | None]:
    """Block / sub-block / host from resourceStatus.physicalHostTopology (A3 8-GPU and A4 families in a
    compact placement; absent elsewhere, and where the account lacks access to the field)."""
    topo = inst.resource_status.physical_host_topology
    return {"block": topo.block or None, "subblock": topo.subblock or None, "host": topo.host or None}


def list_nodes(clients: Clients, project: str, label_filter: str) -> list[Any]:
    """Every instance matching a label filter, across all zones, in one paged aggregatedList."""
    pager = retrying()(clients.compute("InstancesClient").aggregated_list)(
        request={"project": project, "filter": label_filter, "max_results": 500})
    return [inst for _scope, scoped in pager for inst in scoped.instances]


def observe_nodes(clients: Clients, project: str, cluster: str) -> list[Node]:
    """The cluster's nodes, rank order, from one aggregatedList."""
    found = list_nodes(clients, project, f"labels.{LABEL_CLUSTER} = {cluster}")
    return sorted((_node(cluster, i) for i in found), key=lambda n: (n.rank is None, n.rank or 0, n.name))


def observe_nodes_by_name(clients: Clients, project: str, cluster: str) -> list[Node]:
    """Nodes named like the cluster's and marked as its own, whatever their labels say now."""
    found = list_nodes(clients, project, f'name eq "{re.escape(cluster)}-[0-9]+"')
    return [_node(cluster, i) for i in found if _node_of_cluster(i, cluster)]


def _all_nodes(clients: Clients, project: str, cluster: str) -> list[Node]:
    """By label and by name (a node relabelled by hand is still the cluster's), each node once."""
    by_label = observe_nodes(clients, project, cluster)
    seen = {n.name for n in by_label}
    extra = [n for n in observe_nodes_by_name(clients, project, cluster) if n.name not in seen]
    return sorted(by_label + extra, key=lambda n: (n.rank is None, n.rank or 0, n.name))


def observe(clients: Clients, project: str, cluster: str) -> Observed:
    """Find every resource of `cluster`: seven list calls in parallel, whatever its size."""
    name_re = f"{cluster}-.*"
    owners: dict[str, str] = {}

    def own(kind: str, name: str, description: str) -> None:
        attempt = attempt_of(description)
        if attempt:
            owners[f"{kind}/{name}"] = attempt

    def aggregated(client_name: str, attr: str) -> list[tuple[str, Any]]:
        pager = retrying()(clients.compute(client_name).aggregated_list)(
            request={"project": project, "filter": f'name eq "{name_re}"'})
        out = [(scope, r) for scope, scoped in pager for r in getattr(scoped, attr) if is_marked(r.description, cluster)]
        for _scope, r in out:
            own(attr, r.name, r.description)
        return out

    def listed(client_name: str) -> list[Any]:
        pager = retrying()(clients.compute(client_name).list)(request={"project": project, "filter": f'name eq "{name_re}"'})
        out = [r for r in pager if is_marked(r.description, cluster)]
        for r in out:
            own(client_name, r.name, r.description)
        return out

    jobs = {
        "nodes": lambda: _all_nodes(clients, project, cluster),
        "policies": lambda: [{"name": p.name, "region": _last(p.region),
                              "vm_count": p.group_placement_policy.vm_count}
                             for _s, p in aggregated("ResourcePoliciesClient", "resource_policies")],
        "reservations": lambda: [{"name": r.name, "zone": _last(r.zone), "count": int(r.specific_reservation.count),
                                  "in_use": int(r.specific_reservation.in_use_count)}
                                 for _s, r in aggregated("ReservationsClient", "reservations")],
        "networks": lambda: [n.name for n in listed("NetworksClient")],
        "subnets": lambda: [{"name": s.name, "region": _last(s.region)}
                            for _s, s in aggregated("SubnetworksClient", "subnetworks")],
        "firewalls": lambda: [f.name for f in listed("FirewallsClient")],
        "routers": lambda: [{"name": r.name, "region": _last(r.region)} for _s, r in aggregated("RoutersClient", "routers")],
    }
    results = parallel(lambda fn: fn(), list(jobs.values()))
    for r in results:
        if isinstance(r, BaseException):
            raise r
    # Owners as Observed names its lists (the list calls above record them under their API's names).
    rename = {"resource_policies": "policies", "reservations": "reservations", "subnetworks": "subnets",
              "NetworksClient": "networks", "FirewallsClient": "firewalls"}
    out = {f"{rename.get(k.split('/')[0], k.split('/')[0])}/{k.split('/', 1)[1]}": v for k, v in owners.items()}
    for n in results[0]:
        if n.labels.get(LABEL_ATTEMPT):
            out[f"nodes/{n.name}"] = n.labels[LABEL_ATTEMPT]
    return Observed(cluster, *results, owners=out)  # results in the field order of Observed


def list_clusters(clients: Clients, project: str) -> list[dict[str, Any]]:
    """Every gcpgpu cluster with nodes in the project: one aggregatedList over the managed label."""
    found = list_nodes(clients, project, f"labels.{LABEL_MANAGED} = true")
    clusters: dict[str, list[Any]] = {}
    for inst in found:
        clusters.setdefault(inst.labels.get(LABEL_CLUSTER, "?"), []).append(inst)
    rows = []
    for name, insts in sorted(clusters.items()):
        nodes = [_node(name, i) for i in insts]
        states: dict[str, int] = {}
        for n in nodes:
            states[n.status] = states.get(n.status, 0) + 1
        rows.append({
            "cluster": name,
            "machine_type": nodes[0].machine_type,
            "nodes": len(nodes),
            "gpus": sum(n.gpus for n in nodes),
            "zones": ",".join(sorted({n.zone for n in nodes})),
            "status": ", ".join(f"{v} {k}" for k, v in sorted(states.items())),
        })
    return rows


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
