"""Cloud Routers and their Cloud NAT gateways (routers.insert with `nats`), as far as a node with no
external IP needs them to reach the internet and Google's APIs.

Checks the real API makes that gcpgpu can trip over: the network must exist; NAT names are unique
within a router; a NAT's IP allocation and source ranges are enums; and (RouterNat docs,
sourceSubnetworkIpRangesToNat) a NAT covering ALL_SUBNETWORKS_* must be the only NAT of any router
for that network in that region.
"""

from __future__ import annotations

from ..core import ApiError, already_exists, check_name, invalid, not_found, required
from .state import Project, _mutation, last

NAT_RANGES = ("ALL_SUBNETWORKS_ALL_IP_RANGES", "ALL_SUBNETWORKS_ALL_PRIMARY_IP_RANGES", "LIST_OF_SUBNETWORKS")
NAT_IP_OPTIONS = ("AUTO_ONLY", "MANUAL_ONLY")


class RoutersMixin:
    @_mutation(sweep=False)
    def insert_router(self, p: Project, region: str, body: dict) -> dict:
        self._check_region(region)
        check_name("resource.name", body.get("name"))
        if not body.get("network"):
            raise required("resource.network")
        net = p.coll("global/networks").get(last(body["network"]))
        if net is None:
            raise not_found(f"projects/{p.name}/global/networks/{last(body['network'])}")
        if body["name"] in p.coll(f"regions/{region}/routers"):
            raise already_exists(f"projects/{p.name}/regions/{region}/routers/{body['name']}")
        nats = list(body.get("nats") or [])
        names = set()
        for i, nat in enumerate(nats):
            field = f"resource.nats[{i}]"
            check_name(f"{field}.name", nat.get("name"))
            if nat["name"] in names:
                raise invalid(f"{field}.name", nat["name"], "NAT names must be unique within a router.")
            names.add(nat["name"])
            if nat.get("natIpAllocateOption") not in NAT_IP_OPTIONS:
                raise invalid(f"{field}.natIpAllocateOption", nat.get("natIpAllocateOption"),
                              f"Must be one of {', '.join(NAT_IP_OPTIONS)}.")
            if nat.get("sourceSubnetworkIpRangesToNat") not in NAT_RANGES:
                raise invalid(f"{field}.sourceSubnetworkIpRangesToNat", nat.get("sourceSubnetworkIpRangesToNat"),
                              f"Must be one of {', '.join(NAT_RANGES)}.")
        if nats:
            self._check_nat_alone(p, region, net["selfLink"], nats)
        router = {"kind": "compute#router", **body, "network": net["selfLink"], "nats": nats,
                  "region": self.link(p.name, f"regions/{region}")}
        return self._insert(p, f"regions/{region}/routers", f"regions/{region}", router)

    def _check_nat_alone(self, p: Project, region: str, network: str, nats: list[dict]) -> None:
        """A NAT over every subnetwork must be the network's only NAT in the region."""
        others = [(r["name"], n) for r in p.coll(f"regions/{region}/routers").values()
                  if r["network"] == network for n in r.get("nats") or []]
        if not others:
            return
        every = [n for n in nats + [n for _r, n in others]
                 if n["sourceSubnetworkIpRangesToNat"].startswith("ALL_SUBNETWORKS")]
        if every:
            router, nat = others[0]
            raise ApiError(400, "invalid",
                           f"Invalid value for field 'resource.nats': NAT '{nat['name']}' of router '{router}' "
                           f"already serves network '{last(network)}' in region '{region}'; a NAT for all "
                           "subnetworks must be the only NAT of the network in the region.")
