"""Managed Lustre (lustre.googleapis.com v1) instances: parallel file systems the emulated nodes mount.

From the reference facts (Google's docs as read on 2026-11-27): an instance is zonal, needs a capacity in GiB,
a `filesystem` name (8 letters or digits at most, Google's REST reference), a VPC `network`
(projects/P/global/networks/N) and `perUnitStorageThroughput` of 125, 250, 500 or 1000 MBps per TiB;
capacity runs from 9,000 GiB to 84,016,000 GiB overall, with a minimum, maximum and step per tier; Google's
own example is 18,000 GiB at 1000. Read in Google's performance-tier page through search and NOT verified:
the per-tier table below (the minimum and step double as the throughput halves; the maxima are the
default ones, larger with Google's approval). The Dynamic tier (dynamicTierOptions) is not emulated.

Managed Lustre needs private service access on its network (Google's setup guide: an allocated range and a
servicenetworking connection). Without one the create is refused; the wording is the emulator's own
(unverified: Google's exact message was not found).
"""

from __future__ import annotations

import re
from typing import Any

from ..lro import GoogleError, invalid_argument
from ..managed import ManagedInstances

OPERATION_METADATA = "type.googleapis.com/google.cloud.lustre.v1.OperationMetadata"
INSTANCE = "type.googleapis.com/google.cloud.lustre.v1.Instance"
# perUnitStorageThroughput (MBps per TiB) -> (min GiB, max GiB, step GiB). Unverified, see above.
TIERS: dict[int, tuple[int, int, int]] = {
    1000: (9000, 954000, 9000),
    500: (18000, 1908000, 18000),
    250: (36000, 3816000, 36000),
    125: (72000, 7632000, 72000),
}
FILESYSTEM = re.compile(r"^[A-Za-z0-9]{1,8}$")
NETWORK = re.compile(r"^projects/(?P<project>[^/]+)/global/networks/(?P<name>[^/]+)$")
_OUTPUT_ONLY = {"name", "state", "mountPoint", "createTime", "updateTime", "stateReason", "uid",
                "upcomingMaintenanceSchedule", "availableVersion", "effectiveVersion"}


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


class LustreBackend(ManagedInstances):
    service = "lustre"
    ready_state = "ACTIVE"
    instance_type = INSTANCE
    location_kind = "zone"
    address_base = "10.210.0.0"

    def __init__(self, *args: Any, network_exists: Any, has_private_access: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self._network_exists = network_exists  # (project, name) -> bool: Compute's networks
        self._has_private_access = has_private_access  # (project, network name) -> bool: Service Networking

    def check(self, project: str, location: str, body: dict) -> dict:
        stored = {k: v for k, v in body.items() if k not in _OUTPUT_ONLY}
        fs = stored.get("filesystem")
        if not isinstance(fs, str) or not FILESYSTEM.match(fs):
            raise invalid_argument(f"Invalid value for field 'instance.filesystem': '{fs or ''}'. It must be 1 to 8 "
                                   "letters or digits.", "instance.filesystem")
        throughput = _int(stored.get("perUnitStorageThroughput"))
        if throughput not in TIERS:
            raise invalid_argument(f"Invalid value for field 'instance.per_unit_storage_throughput': "
                                   f"'{stored.get('perUnitStorageThroughput', '')}'. Choose one of "
                                   f"{', '.join(str(t) for t in sorted(TIERS))} (MBps per TiB).",
                                   "instance.per_unit_storage_throughput")
        lo, hi, step = TIERS[throughput]
        gib = _int(stored.get("capacityGib"))
        if gib is None or not lo <= gib <= hi or (gib - lo) % step:
            raise invalid_argument(f"Invalid value for field 'instance.capacity_gib': '{stored.get('capacityGib', '')}'."
                                   f" At {throughput} MBps per TiB the capacity is {lo} to {hi} GiB in steps of "
                                   f"{step} GiB.", "instance.capacity_gib")
        network = stored.get("network")
        m = NETWORK.match(network) if isinstance(network, str) else None
        if m is None:
            raise invalid_argument(f"Invalid value for field 'instance.network': '{network or ''}'. Give "
                                   "projects/PROJECT/global/networks/NETWORK.", "instance.network")
        if not self._network_exists(m["project"], m["name"]):
            raise invalid_argument(f"network '{network}' does not exist.", "instance.network")
        if not self._has_private_access(m["project"], m["name"]):
            raise GoogleError("FAILED_PRECONDITION",
                              f"Private service access is not configured on network '{network}': allocate an IP "
                              "range (purpose VPC_PEERING) and create a servicenetworking.googleapis.com connection "
                              "on it before creating a Managed Lustre instance.")
        stored.update(capacityGib=str(gib), perUnitStorageThroughput=str(throughput))
        return stored

    def uses_private_access(self, body: dict, project: str, network: str) -> bool:
        m = NETWORK.match(body.get("network", ""))
        return m is not None and (m["project"], m["name"]) == (project, network)

    def ready_fields(self, body: dict, ip: str) -> dict:
        return {"mountPoint": self.export_of(body, ip)}

    def export_of(self, body: dict, ip: str) -> str:
        return f"{ip}@tcp:/{body['filesystem']}"
