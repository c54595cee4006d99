"""The kinds of resource a cluster is made of: the one table that observe, teardown, roll-back
ownership and summaries iterate.

The order is the order GCP lets them be deleted in: nodes first (they use everything else), then
reservations, placement policies, firewall rules, Cloud NAT routers, subnetworks and networks.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


def last(link: str) -> str:
    """The last segment of a resource link (`.../zones/us-central1-a` -> `us-central1-a`)."""
    return (link or "").rstrip("/").rsplit("/", 1)[-1]


@dataclass(frozen=True)
class Kind:
    key: str  # the field of Observed that holds them (and the prefix of their owner keys)
    client: str  # google-cloud-compute client class
    scope: str | None  # the request's location argument (zone / region), None for global resources
    field: str  # the request's name argument
    word: str  # for people: "placement policy"
    plural: str  # for counts of more than one: "placement policies" (counted() picks)
    listing: str | None = None  # aggregatedList's attribute; None: a global list (nodes are read apart)
    # An API object -> what Observed keeps: a dict with "name" and the scope's key, or just the name.
    record: Callable[[Any], Any] | None = None

    def items(self, found: list[Any]) -> list[tuple[str | None, str]]:
        """(zone / region / None, name) of each resource of this kind that Observed holds."""
        if self.key == "nodes":
            return [(n.zone, n.name) for n in found]
        if self.scope is None:
            return [(None, name) for name in found]
        return [(r[self.scope], r["name"]) for r in found]

    def counted(self, n: int) -> str:
        """'1 placement policy', '2 placement policies', '0 nodes'."""
        return f"{n} {self.word if n == 1 else self.plural}"

    def name_of(self, item: Any) -> str:
        return item.name if self.key == "nodes" else item if self.scope is None else item["name"]


NODES = Kind("nodes", "InstancesClient", "zone", "instance", "node", "nodes")
RESERVATIONS = Kind(
    "reservations", "ReservationsClient", "zone", "reservation", "reservation", "reservations", "reservations",
    lambda r: {"name": r.name, "zone": last(r.zone), "count": int(r.specific_reservation.count),
               "in_use": int(r.specific_reservation.in_use_count)})
POLICIES = Kind(
    "policies", "ResourcePoliciesClient", "region", "resource_policy", "placement policy", "placement policies",
    "resource_policies",
    lambda p: {"name": p.name, "region": last(p.region), "vm_count": p.group_placement_policy.vm_count})
FIREWALLS = Kind("firewalls", "FirewallsClient", None, "firewall", "firewall rule", "firewall rules",
                 record=lambda f: f.name)
ROUTERS = Kind("routers", "RoutersClient", "region", "router", "Cloud NAT router", "Cloud NAT routers", "routers",
               lambda r: {"name": r.name, "region": last(r.region)})
SUBNETS = Kind("subnets", "SubnetworksClient", "region", "subnetwork", "subnetwork", "subnetworks", "subnetworks",
               lambda s: {"name": s.name, "region": last(s.region)})
NETWORKS = Kind("networks", "NetworksClient", None, "network", "network", "networks", record=lambda n: n.name)

KINDS: tuple[Kind, ...] = (NODES, RESERVATIONS, POLICIES, FIREWALLS, ROUTERS, SUBNETS, NETWORKS)
