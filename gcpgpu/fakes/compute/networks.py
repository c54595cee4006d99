"""Networks (with the default network every project starts with), subnetworks, firewalls and global addresses
(the ranges private service access allocates)."""

from __future__ import annotations

import ipaddress

from ..core import already_exists, check_name, invalid, required, rfc3339
from .links import fingerprint, network
from .state import Project, _mutation, last


class NetworksMixin:
    def _seed_default_network(self, p: Project) -> None:
        net = {
            "kind": "compute#network",
            "name": "default",
            "description": "Default network for the project",
            "autoCreateSubnetworks": True,
            "mtu": 1460,
            "routingConfig": {"routingMode": "REGIONAL"},
            "networkFirewallPolicyEnforcementOrder": "AFTER_CLASSIC_FIREWALL",
            "subnetworks": [],
        }
        self._store_network(p, net)
        net_link = net["selfLink"]
        for name, rule in {
            "default-allow-internal": {
                "sourceRanges": ["10.128.0.0/9"],
                "allowed": [{"IPProtocol": "tcp", "ports": ["0-65535"]}, {"IPProtocol": "udp", "ports": ["0-65535"]},
                            {"IPProtocol": "icmp"}],
                "priority": 65534,
            },
            "default-allow-ssh": {"sourceRanges": ["0.0.0.0/0"], "allowed": [{"IPProtocol": "tcp", "ports": ["22"]}], "priority": 65534},
            "default-allow-rdp": {"sourceRanges": ["0.0.0.0/0"], "allowed": [{"IPProtocol": "tcp", "ports": ["3389"]}], "priority": 65534},
            "default-allow-icmp": {"sourceRanges": ["0.0.0.0/0"], "allowed": [{"IPProtocol": "icmp"}], "priority": 65534},
        }.items():
            fw = {"kind": "compute#firewall", "name": name, "network": net_link, "direction": "INGRESS",
                  "disabled": False, "logConfig": {"enable": False}, **rule}
            fw.update(id=self.ids.next(), creationTimestamp=rfc3339(self.now()),
                      selfLink=self.link(p.name, f"global/firewalls/{name}"))
            p.coll("global/firewalls")[name] = fw

    def _store_network(self, p: Project, net: dict) -> None:
        net.update(id=self.ids.next(), creationTimestamp=rfc3339(self.now()),
                   selfLink=self.link(p.name, f"global/networks/{net['name']}"))
        p.coll("global/networks")[net["name"]] = net
        if net.get("autoCreateSubnetworks"):
            base = ipaddress.ip_network("10.128.0.0/20")
            for i, region in enumerate(self.world.regions):
                cidr = ipaddress.ip_network((int(base.network_address) + i * 4096 * 16, 20))
                self._store_subnet(p, region, {
                    "kind": "compute#subnetwork", "name": net["name"], "network": net["selfLink"],
                    "ipCidrRange": str(cidr), "_auto": True,
                })

    def _store_subnet(self, p: Project, region: str, sub: dict) -> None:
        cidr = ipaddress.ip_network(sub["ipCidrRange"])
        sub.update(
            id=self.ids.next(), creationTimestamp=rfc3339(self.now()), region=self.link(p.name, f"regions/{region}"),
            gatewayAddress=str(cidr.network_address + 1), privateIpGoogleAccess=sub.get("privateIpGoogleAccess", False),
            stackType=sub.get("stackType", "IPV4_ONLY"), purpose=sub.get("purpose", "PRIVATE"),
            fingerprint=fingerprint(sub["ipCidrRange"]),
            selfLink=self.link(p.name, f"regions/{region}/subnetworks/{sub['name']}"),
        )
        p.coll(f"regions/{region}/subnetworks")[sub["name"]] = sub
        net = p.coll("global/networks").get(last(sub["network"]))
        if net is not None:
            net.setdefault("subnetworks", []).append(sub["selfLink"])

    def _delete_auto_subnets(self, p: Project, net: dict) -> None:
        for region in self.world.regions:
            subs = p.coll(f"regions/{region}/subnetworks")
            for name in [n for n, s in subs.items() if s.get("network") == net["selfLink"]]:
                del subs[name]

    @_mutation(sweep=False)
    def insert_network(self, p: Project, body: dict) -> dict:
        check_name("resource.name", body.get("name"))
        mtu = int(body.get("mtu", 1460))
        if not 1300 <= mtu <= 8896:
            raise invalid("resource.mtu", mtu, "Must be between 1300 and 8896.")
        if body["name"] in p.coll("global/networks"):
            raise already_exists(f"projects/{p.name}/global/networks/{body['name']}")
        body = dict(body)
        if body.get("networkProfile"):
            body["networkProfile"] = self._network_profile(p, body["networkProfile"])
        net = {
            "kind": "compute#network",
            "autoCreateSubnetworks": bool(body.get("autoCreateSubnetworks", False)),
            "routingConfig": {"routingMode": "REGIONAL"},
            "networkFirewallPolicyEnforcementOrder": "AFTER_CLASSIC_FIREWALL",
            **body,
            "mtu": mtu,
            "subnetworks": [],
        }
        self._store_network(p, net)
        return self.render_op(self._new_op(p.name, "global", "insert", net["selfLink"], net["id"]))

    @_mutation(sweep=False)
    def insert_subnetwork(self, p: Project, region: str, body: dict) -> dict:
        self._check_region(region)
        check_name("resource.name", body.get("name"))
        if not body.get("network"):
            raise required("resource.network")
        if not body.get("ipCidrRange"):
            raise required("resource.ipCidrRange")
        try:
            cidr = ipaddress.ip_network(body["ipCidrRange"])
        except ValueError as e:
            raise invalid("resource.ipCidrRange", body["ipCidrRange"], "Must be a valid IPv4 CIDR range.") from e
        net = network(p, body["network"])
        if body["name"] in p.coll(f"regions/{region}/subnetworks"):
            raise already_exists(f"projects/{p.name}/regions/{region}/subnetworks/{body['name']}")
        for _path, other in p.iter_kind("subnetworks"):
            if other["network"] == net["selfLink"] and ipaddress.ip_network(other["ipCidrRange"]).overlaps(cidr):
                raise invalid(
                    "resource.ipCidrRange", body["ipCidrRange"],
                    f"Invalid IPCidrRange: {cidr} conflicts with existing subnetwork '{other['name']}' in region "
                    f"'{last(other['region'])}'.",
                )
        sub = {"kind": "compute#subnetwork", **body, "network": net["selfLink"], "ipCidrRange": str(cidr)}
        self._store_subnet(p, region, sub)
        return self.render_op(self._new_op(p.name, f"regions/{region}", "insert", sub["selfLink"], sub["id"]))

    @_mutation(sweep=False)
    def insert_firewall(self, p: Project, body: dict) -> dict:
        return self._insert(p, "global/firewalls", "global", self._firewall_resource(p, body))

    def _firewall_resource(self, p: Project, body: dict) -> dict:
        """A firewall rule's body checked and completed with the API's defaults (insert and update)."""
        check_name("resource.name", body.get("name"))
        if not body.get("allowed") and not body.get("denied"):
            raise required("resource.allowed")
        for rng in body.get("sourceRanges", []) + body.get("destinationRanges", []):
            try:
                ipaddress.ip_network(rng)
            except ValueError as e:
                raise invalid("resource.sourceRanges", rng, "Must be a CIDR range.") from e
        net = network(p, body.get("network") or "global/networks/default")
        fw = {
            "kind": "compute#firewall", "direction": "INGRESS", "priority": 1000, "disabled": False,
            "logConfig": {"enable": False}, **body, "network": net["selfLink"],
        }
        if fw["direction"] == "INGRESS" and not any(fw.get(k) for k in ("sourceRanges", "sourceTags", "sourceServiceAccounts")):
            fw["sourceRanges"] = ["0.0.0.0/0"]  # the real API's default, which is why we always set ranges
        return fw

    @_mutation(sweep=False)
    def insert_global_address(self, p: Project, body: dict) -> dict:
        """globalAddresses.insert. What this emulator serves them for: the ranges private service access
        allocates (purpose VPC_PEERING, INTERNAL, on a network, with a prefix length), which Service Networking
        connections name; an external global address gets one from TEST-NET-3. The prefix bounds (8 to 29) are
        the emulator's own, not a documented figure."""
        check_name("resource.name", body.get("name"))
        purpose = body.get("purpose")
        addr: dict = {"kind": "compute#address", "status": "RESERVED", **body}
        if purpose == "VPC_PEERING":
            if body.get("addressType", "INTERNAL") != "INTERNAL":
                raise invalid("resource.addressType", body.get("addressType"), "A VPC_PEERING range is INTERNAL.")
            if not body.get("network"):
                raise required("resource.network")
            net = network(p, body["network"])
            length = body.get("prefixLength")
            if not isinstance(length, int) or not 8 <= length <= 29:
                raise invalid("resource.prefixLength", length, "A VPC_PEERING range needs a prefix length of 8 to 29.")
            if body.get("address"):
                try:
                    cidr = ipaddress.ip_network(f"{body['address']}/{length}")
                except ValueError as e:
                    raise invalid("resource.address", body["address"], f"Not the start of a /{length} range.") from e
            else:  # the next /16-aligned block of 10.64.0.0/10 not handed out yet
                n = p.next_ip.get("global/addresses", 0)
                p.next_ip["global/addresses"] = n + 1
                cidr = ipaddress.ip_network((int(ipaddress.ip_address("10.64.0.0")) + n * 65536, length), strict=False)
            addr.update(addressType="INTERNAL", network=net["selfLink"], address=str(cidr.network_address),
                        prefixLength=length)
        elif purpose in (None, ""):
            n = p.next_ip.get("global/addresses/external", 0)
            p.next_ip["global/addresses/external"] = n + 1
            addr.update(addressType="EXTERNAL", address=body.get("address") or f"203.0.113.{10 + n % 240}")
        else:
            raise invalid("resource.purpose", purpose, "The emulator serves global addresses of purpose VPC_PEERING "
                          "(or external ones).")
        return self._insert(p, "global/addresses", "global", addr)

    def _network_profile(self, p: Project, link: str) -> str:
        """A network profile link (ZONE-vpc-roce: the RDMA VPCs of A3 Ultra and A4), as a full URL."""
        profile = last(link)
        zone, _, kind = profile.partition("-vpc-")
        if "networkProfiles/" not in link or kind != "roce" or self.world.region_of(zone) is None:
            raise invalid("resource.networkProfile", link,
                          "Must be projects/PROJECT/global/networkProfiles/ZONE-vpc-roce for a zone with RDMA.")
        return f"https://www.googleapis.com/compute/v1/projects/{p.name}/global/networkProfiles/{profile}"
