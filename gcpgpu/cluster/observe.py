"""What exists in GCP for a cluster, found from GCP alone (labels, names, description markers).

This is why any machine can run `status` or `down`: no local state file. Discovery is a handful of
list calls, made in parallel, whatever the cluster's size.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gcpgpu.gcp.clients import Clients
from gcpgpu.gcp.operations import parallel, retrying

from .plan import LABEL_CLUSTER, LABEL_MANAGED, LABEL_RANK, marker, rank_of


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

    def row(self) -> dict[str, Any]:
        return {"name": self.name, "zone": self.zone, "internal_ip": self.internal_ip, "status": self.status,
                "gpus": self.gpus, "rank": self.rank, "machine_type": self.machine_type, "provisioning": self.provisioning}


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
    )


def list_nodes(clients: Clients, project: str, label_filter: str) -> list[Any]:
    """Every instance matching a label filter, across all zones, in one paged aggregatedList."""
    pager = retrying()(clients.compute("InstancesClient").aggregated_list)(
        request={"project": project, "filter": label_filter, "max_results": 500})
    return [inst for _scope, scoped in pager for inst in scoped.instances]


def observe_nodes(clients: Clients, project: str, cluster: str) -> list[Node]:
    """The cluster's nodes, rank order, from one aggregatedList."""
    found = list_nodes(clients, project, f"labels.{LABEL_CLUSTER} = {cluster}")
    return sorted((_node(cluster, i) for i in found), key=lambda n: (n.rank is None, n.rank or 0, n.name))


def observe(clients: Clients, project: str, cluster: str) -> Observed:
    """Find every resource of `cluster`: seven list calls in parallel, whatever its size."""
    mark = marker(cluster)
    name_re = f"{cluster}-.*"

    def aggregated(client_name: str, attr: str) -> list[tuple[str, Any]]:
        pager = retrying()(clients.compute(client_name).aggregated_list)(
            request={"project": project, "filter": f'name eq "{name_re}"'})
        return [(scope, r) for scope, scoped in pager for r in getattr(scoped, attr)
                if r.description.startswith(mark)]

    def listed(client_name: str) -> list[Any]:
        pager = retrying()(clients.compute(client_name).list)(request={"project": project, "filter": f'name eq "{name_re}"'})
        return [r for r in pager if r.description.startswith(mark)]

    jobs = {
        "nodes": lambda: observe_nodes(clients, project, cluster),
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
    return Observed(cluster, *results)


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
