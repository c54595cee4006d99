"""Filestore (file.googleapis.com v1) instances: NFS shares the emulated nodes mount.

The tier table is the one place tiers, their locations and their capacity ranges live. Ranges come from
/work's reference facts (Google's tier page as read on 2026-11-27): ZONAL 1 TiB to 9.75 TiB and 10 TiB to
100 TiB; REGIONAL 100 GiB to 10,239 GiB and 10 TiB to 100 TiB; BASIC tiers at most 63.9 TB, BASIC_HDD from
1 TiB. Read in Google's docs through search and NOT verified against the service: BASIC_SSD's 2.5 TiB
minimum, ENTERPRISE's 1 TiB to 10 TiB, the steps (256 GiB in ZONAL's lower band, 2.5 TiB in the higher
bands), which tiers are zonal or regional, and the wording of every error message below.
Filestore counts capacity in GB of 1024^3 bytes (its API reference says so), so "GB" here is GiB.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ..lro import GoogleError, invalid_argument
from ..managed import ManagedInstances

OPERATION_METADATA = "type.googleapis.com/google.cloud.common.OperationMetadata"
INSTANCE = "type.googleapis.com/google.cloud.filestore.v1.Instance"


@dataclass(frozen=True)
class Tier:
    scope: str  # "zone" or "region": where an instance of the tier lives
    bands: tuple[tuple[int, int, int], ...]  # (min GB, max GB, step GB)

    def allows(self, gb: int) -> bool:
        return any(lo <= gb <= hi and (gb - lo) % step == 0 for lo, hi, step in self.bands)

    def describe(self) -> str:
        return ", or ".join(f"{lo} to {hi} GB" + (f" in steps of {step} GB" if step > 1 else "")
                            for lo, hi, step in self.bands)


_BASIC_MAX = 65433  # 63.9 TB of 1024 GiB
_BASIC_HDD = Tier("zone", ((1024, _BASIC_MAX, 1),))
_BASIC_SSD = Tier("zone", ((2560, _BASIC_MAX, 1),))
_ZONAL = Tier("zone", ((1024, 9984, 256), (10240, 102400, 2560)))
TIERS: dict[str, Tier] = {
    "BASIC_HDD": _BASIC_HDD, "STANDARD": _BASIC_HDD,  # STANDARD and PREMIUM: the older names of the basic tiers
    "BASIC_SSD": _BASIC_SSD, "PREMIUM": _BASIC_SSD,
    "ZONAL": _ZONAL, "HIGH_SCALE_SSD": _ZONAL,  # ZONAL replaces HIGH_SCALE_SSD
    "REGIONAL": Tier("region", ((100, 10239, 1), (10240, 102400, 2560))),
    "ENTERPRISE": Tier("region", ((1024, 10240, 1),)),
}
# A file share's name: a letter, then letters, digits or underscores (read in Google's docs, unverified: 32 at most).
SHARE_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,31}$")
_OUTPUT_ONLY = {"name", "state", "statusMessage", "createTime", "etag", "satisfiesPzs", "satisfiesPzi",
                "suspensionReasons", "replication", "tags"}
CONNECT_MODES = ("DIRECT_PEERING", "PRIVATE_SERVICE_ACCESS", "PRIVATE_SERVICE_CONNECT")
# The enums' numbers (filestore.v1's Instance.Tier, NetworkConfig.ConnectMode and AddressMode): Google's
# clients send numbers ($alt=json;enum-encoding=int), gcloud sends names.
TIER_NUMBERS = ("TIER_UNSPECIFIED", "STANDARD", "PREMIUM", "BASIC_HDD", "BASIC_SSD", "HIGH_SCALE_SSD",
                "ENTERPRISE", "ZONAL", "REGIONAL")
CONNECT_NUMBERS = ("CONNECT_MODE_UNSPECIFIED", "DIRECT_PEERING", "PRIVATE_SERVICE_ACCESS")
ADDRESS_NUMBERS = ("ADDRESS_MODE_UNSPECIFIED", "MODE_IPV4")


def enum_name(value: Any, names: tuple[str, ...]) -> Any:
    """An enum field's name whether the request wrote its name or its number."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < len(names):
        return names[value]
    return value


def tier_location_error(tier: str, location: str, world: Any) -> str | None:
    """Why `location` cannot hold an instance of `tier` (None when it can)."""
    scope = TIERS[tier].scope
    if scope == "zone" and world.region_of(location) is None:
        return f"Tier {tier} instances are zonal: location '{location}' is not a zone."
    if scope == "region" and location not in world.regions:
        return f"Tier {tier} instances are regional: location '{location}' is not a region."
    return None


class FilestoreBackend(ManagedInstances):
    service = "filestore"
    ready_state = "READY"
    instance_type = INSTANCE
    location_kind = "any"
    address_base = "10.200.0.0"

    def __init__(self, *args: Any, network_exists: Any, has_private_access: Any = None, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self._network_exists = network_exists  # (project, name) -> bool: Compute's networks
        self._has_private_access = has_private_access  # (project, network) -> bool: Service Networking

    def check(self, project: str, location: str, body: dict) -> dict:
        stored = {k: v for k, v in body.items() if k not in _OUTPUT_ONLY}
        tier = enum_name(stored.get("tier"), TIER_NUMBERS) or "TIER_UNSPECIFIED"
        stored["tier"] = tier
        if tier not in TIERS:
            raise invalid_argument(f"Invalid value for field 'instance.tier': '{tier}'. Choose one of "
                                   f"{', '.join(sorted(TIERS))}.", "instance.tier")
        why = tier_location_error(tier, location, self.world)
        if why:
            raise invalid_argument(why, "parent")
        shares = stored.get("fileShares") or []
        if len(shares) != 1 or not isinstance(shares[0], dict):
            raise invalid_argument("An instance has exactly one file share (instance.file_shares).",
                                   "instance.file_shares")
        share = dict(shares[0])
        if not SHARE_NAME.match(str(share.get("name", ""))):
            raise invalid_argument(f"Invalid value for field 'instance.file_shares[0].name': '{share.get('name', '')}'. "
                                   "A share name starts with a letter and holds letters, digits and underscores, "
                                   "32 at most.", "instance.file_shares[0].name")
        try:
            gb = int(share.get("capacityGb", 0))
        except (TypeError, ValueError):
            gb = -1
        if not TIERS[tier].allows(gb):
            raise invalid_argument(f"Invalid value for field 'instance.file_shares[0].capacity_gb': "
                                   f"'{share.get('capacityGb')}'. Tier {tier} takes {TIERS[tier].describe()}.",
                                   "instance.file_shares[0].capacity_gb")
        share["capacityGb"] = str(gb)  # int64: a string in JSON, as Google writes it
        stored["fileShares"] = [share]
        stored["networks"] = [self._network(project, stored.get("networks") or [])]
        return stored

    def _network(self, project: str, networks: list) -> dict:
        if len(networks) != 1 or not isinstance(networks[0], dict) or not networks[0].get("network"):
            raise invalid_argument("An instance is on exactly one VPC network (instance.networks[0].network).",
                                   "instance.networks")
        net = dict(networks[0])
        short = str(net["network"]).rstrip("/").rsplit("/", 1)[-1]
        if not self._network_exists(project, short):
            raise GoogleError("INVALID_ARGUMENT", f"network '{net['network']}' does not exist.",
                              [("instance.networks[0].network", "network does not exist")])
        mode = net["connectMode"] = enum_name(net.get("connectMode"), CONNECT_NUMBERS) or "DIRECT_PEERING"
        if mode not in CONNECT_MODES:
            raise invalid_argument(f"Invalid value for field 'instance.networks[0].connect_mode': '{mode}'.",
                                   "instance.networks[0].connect_mode")
        if mode == "PRIVATE_SERVICE_ACCESS" and self._has_private_access and not self._has_private_access(project, short):
            # Unverified wording: Google refuses the create when the network has no private service connection.
            raise GoogleError("FAILED_PRECONDITION", f"Network '{short}' has no private service access connection "
                              "(servicenetworking.googleapis.com); create one before using PRIVATE_SERVICE_ACCESS.")
        net["modes"] = [enum_name(m, ADDRESS_NUMBERS) for m in net.get("modes") or ["MODE_IPV4"]]
        return net

    def uses_private_access(self, body: dict, project: str, network: str) -> bool:
        net = body["networks"][0]
        return (net.get("connectMode") == "PRIVATE_SERVICE_ACCESS"
                and str(net["network"]).rstrip("/").rsplit("/", 1)[-1] == network)

    def ready_fields(self, body: dict, ip: str) -> dict:
        net = dict(body["networks"][0])
        net["ipAddresses"] = [ip]
        net.setdefault("reservedIpRange", ip.rsplit(".", 1)[0] + f".{int(ip.rsplit('.', 1)[1]) - 2}/29")
        return {"networks": [net]}

    def export_of(self, body: dict, ip: str) -> str:
        return f"{ip}:/{body['fileShares'][0]['name']}"

    def nfs_folder(self, server: str, path: str) -> tuple[str, ...] | None:
        """The folder (parts under the storage root) that an NFS mount of SERVER:PATH reaches (Vertex AI's
        nfsMounts): a READY instance at `server` whose share is PATH's first name; deeper names are folders
        in it. None when no instance here exports it."""
        names = [n for n in path.split("/") if n not in ("", ".")]
        if not names or ".." in names:
            return None
        with self._lock:
            self._sweep()
            for name, item in sorted(self._items.items()):
                if (item["ip"] == server and self._state(item) == self.ready_state
                        and item["body"]["fileShares"][0]["name"] == names[0]):
                    return (*self.folder_parts(name), *names[1:])
        return None
