"""Cloud Routers and their Cloud NAT gateways (routers.insert with `nats`), as far as a node with no
external IP needs them to reach the internet and Google's APIs.

Checks the real API makes that gcpgpu can trip over: the network must exist; NAT names are unique
within a router; a NAT's IP allocation and source ranges are enums; and (RouterNat docs,
sourceSubnetworkIpRangesToNat) a NAT covering ALL_SUBNETWORKS_* must be the only NAT of any router
for that network in that region.
"""

from __future__ import annotations

from ..core import ApiError, already_exists, check_name, invalid, required
from .links import network
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
        net = network(p, body["network"])
        if body["name"] in p.coll(f"regions/{region}/routers"):
            raise already_exists(f"projects/{p.name}/regions/{region}/routers/{body['name']}")
        nats = self._checked_nats(p, region, net["selfLink"], body.get("nats"), body["name"])
        router = {"kind": "compute#router", **body, "network": net["selfLink"], "nats": nats,
                  "region": self.link(p.name, f"regions/{region}")}
        return self._insert(p, f"regions/{region}/routers", f"regions/{region}", router)

    @_mutation(sweep=False)
    def patch_router(self, p: Project, region: str, name: str, body: dict) -> dict:
        """routers.patch (what `gcloud compute routers nats create/delete` send after a get): the
        fields the body names replace the router's, `nats` as a whole list; name and network stay."""
        self._check_region(region)
        router = self._get(p.name, f"regions/{region}/routers", name)
        for key in ("name", "network", "region"):
            if key in body and last(str(body[key])) != last(router[key]):
                raise invalid(f"resource.{key}", body[key], f"The router's {key} cannot be changed.")
        nats = self._checked_nats(p, region, router["network"], body.get("nats", router["nats"]), name)
        keep = {"kind", "id", "creationTimestamp", "selfLink", "network", "region", "name"}
        router.update({k: v for k, v in body.items() if k not in keep}, nats=nats)
        return self.render_op(self._new_op(p.name, f"regions/{region}", "patch", router["selfLink"], router["id"]))

    def _checked_nats(self, p: Project, region: str, network: str, given: list[dict] | None, router: str) -> list[dict]:
        """The router's NATs, each checked, and checked against the other routers' NATs."""
        nats = list(given or [])
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
            self._check_nat_alone(p, region, network, nats, router)
        return nats

    def _check_nat_alone(self, p: Project, region: str, network: str, nats: list[dict], router: str) -> None:
        """A NAT over every subnetwork must be the network's only NAT in the region."""
        others = [(r["name"], n) for r in p.coll(f"regions/{region}/routers").values()
                  if r["network"] == network and r["name"] != router for n in r.get("nats") or []]
        others += [(router, n) for n in nats[:-1]]  # this router's own earlier NATs count too
        if not others:
            return
        every = [n for n in nats + [n for _r, n in others]
                 if n["sourceSubnetworkIpRangesToNat"].startswith("ALL_SUBNETWORKS")]
        if every:
            holder, nat = others[0]
            raise ApiError(400, "invalid",
                           f"Invalid value for field 'resource.nats': NAT '{nat['name']}' of router '{holder}' "
                           f"already serves network '{last(network)}' in region '{region}'; a NAT for all "
                           "subnetworks must be the only NAT of the network in the region.")
