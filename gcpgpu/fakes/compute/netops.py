"""Network reads and firewall edits that provisioners call around creating VMs.

- networks.getEffectiveFirewalls: the VPC firewall rules on one network (SkyPilot reads it before
  every launch to see whether SSH is open). The emulator has no hierarchical or network firewall
  policies, so `firewallPolicys` is always empty.
- subnetworks.listUsable: every subnetwork the caller may use, across regions, as one flat list of
  UsableSubnetwork records (dstack's backend check and its extra VPCs for A3). Every subnetwork of
  the project counts: the emulator has no IAM, and Shared VPC's serviceProject is not modelled.
- firewalls.update (PUT: the body replaces the rule; fields left out take their defaults) and
  firewalls.patch (JSON merge patch, RFC 7396: objects merge, lists and scalars replace, null
  removes). A rule's name, network and direction stay what they were; the real API's words for
  refusing a change to them are unverified here.
"""

from __future__ import annotations

from ..core import RFC1035, RFC1035_PATTERN, invalid, not_found
from .links import global_name
from .state import Project, _mutation, last


def merge_patch(target: dict, patch: dict) -> dict:
    """RFC 7396 JSON merge patch of `patch` onto `target` (a new dict)."""
    out = dict(target)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge_patch(out[key], value)
        else:
            out[key] = value
    return out


def check_tags(items: list, field: str) -> list[str]:
    """Network tags as the API takes them: RFC 1035 names (Tags.items' pattern), at most 64."""
    if len(items) > 64:
        raise invalid(field, len(items), "At most 64 tags.")
    for i, tag in enumerate(items):
        if not isinstance(tag, str) or not RFC1035.match(tag):
            raise invalid(f"{field}[{i}]", tag, f"Must be a match of regex '{RFC1035_PATTERN}'")
    return list(items)


class NetworkOpsMixin:
    def effective_firewalls(self, project: str, network: str) -> dict:
        with self._lock:
            p = self.project(project)
            net = p.coll("global/networks").get(network)
            if net is None:
                raise not_found(f"projects/{project}/global/networks/{network}")
            rules = [self._render(fw) for fw in p.coll("global/firewalls").values() if fw["network"] == net["selfLink"]]
        return {"firewalls": sorted(rules, key=lambda r: r["name"]), "firewallPolicys": []}

    def usable_subnetworks(self, project: str) -> list[dict]:
        with self._lock:
            p = self.project(project)
            subs = [s for region in self.world.regions for s in p.coll(f"regions/{region}/subnetworks").values()]
        out = []
        for s in subs:
            item = {"subnetwork": s["selfLink"], "network": s["network"], "ipCidrRange": s["ipCidrRange"],
                    "stackType": s.get("stackType", "IPV4_ONLY"), "purpose": s.get("purpose", "PRIVATE")}
            if s.get("secondaryIpRanges"):
                item["secondaryIpRanges"] = s["secondaryIpRanges"]
            out.append(item)
        return out

    @_mutation(sweep=False)
    def update_firewall(self, p: Project, name: str, body: dict, merge: bool = False) -> dict:
        """firewalls.update (merge=False) or firewalls.patch (merge=True)."""
        current = self._get(p.name, "global/firewalls", name)
        if body.get("name", name) != name:
            raise invalid("resource.name", body["name"], f"Must be '{name}': a firewall rule cannot be renamed.")
        if merge:
            given = merge_patch({k: v for k, v in current.items() if k not in _SYSTEM}, body)
        else:
            given = {"network": current["network"], **body, "name": name}
        if given.get("network") and global_name(given["network"], "networks", "resource.network") != last(current["network"]):
            raise invalid("resource.network", given["network"], "The network of a firewall rule cannot be changed.")
        if given.get("direction", "INGRESS") != current.get("direction", "INGRESS"):
            raise invalid("resource.direction", given["direction"], "The direction of a firewall rule cannot be changed.")
        fw = self._firewall_resource(p, {**given, "network": current["network"]})
        fw.update({k: current[k] for k in _SYSTEM if k in current})
        p.coll("global/firewalls")[name] = fw
        return self.render_op(self._new_op(p.name, "global", "patch" if merge else "update", fw["selfLink"], fw["id"]))


# What the API sets and a client never writes: kept across an update.
_SYSTEM = ("id", "creationTimestamp", "selfLink", "kind")
