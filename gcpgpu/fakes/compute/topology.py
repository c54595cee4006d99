"""Where a compact-placed VM sits in the fabric: resourceStatus.physicalHostTopology / physicalHost.

Compute reports, for A4X, A4, A3 Ultra, A3 Mega, A3 High 8-GPU and A3 Edge VMs in a compact
placement, `resourceStatus.physicalHostTopology {cluster, block, subblock, host}` and
`resourceStatus.physicalHost` (Compute v1 discovery schema `ResourceStatus`; Google's guide
"View VM topology"). Same sub-block = same rack, same block = same optical block.

The emulator's fabric, deterministic so tests can rely on it: each placement policy gets one block
(derived from the policy's link); its VMs fill that block's sub-blocks of `faults.subblock_hosts`
hosts each, a request's VMs (in name order) dealt round-robin over the sub-blocks it needs (as a scheduler that
spreads a request would), and a sub-block past `faults.block_subblocks` spills into the next block.
Sub-block and block sizes, and the identifiers' format, are the emulator's (real sizes: unverified).
"""

from __future__ import annotations

import zlib

from .state import Project, last

# Machine types that report their topology (Google's guide lists A4X, A4, A3 Ultra, A3 Mega,
# A3 High with 8 GPUs and A3 Edge).
TOPOLOGY_MACHINE_TYPES = ("a3-highgpu-8g", "a3-megagpu-8g", "a3-edgegpu-8g", "a3-ultragpu-8g", "a4-highgpu-8g",
                          "a4x-highgpu-4g")


def _hexid(*parts: object) -> str:
    return f"{zlib.crc32('/'.join(map(str, parts)).encode()):08x}"


class TopologyMixin:
    def _compact_policy(self, p: Project, region: str, inst: dict) -> str | None:
        for link in inst.get("resourcePolicies") or []:
            pol = p.coll(f"regions/{region}/resourcePolicies").get(last(link)) or {}
            if (pol.get("groupPlacementPolicy") or {}).get("collocation") == "COLLOCATED":
                return link
        return None

    def _assign_topology(self, p: Project, zone: str, region: str, insts: list[dict]) -> None:
        """Fill resourceStatus for the compact-placed VMs of `insts` (one request's VMs, in order)."""
        # In name order: a request's map of per-instance properties has no order of its own.
        # VMs bound to a DENSE reservation already sit in its blocks (compute/dense.py).
        todo = sorted((i for i in insts if i["_machine_type"] in TOPOLOGY_MACHINE_TYPES and not i.get("_res_block")),
                      key=lambda i: i["name"])
        policy = self._compact_policy(p, region, todo[0]) if todo else None
        if policy is None:
            return
        hosts = max(int(self.faults.subblock_hosts), 1)
        per_block = max(int(self.faults.block_subblocks), 1)
        taken: dict[int, int] = {}  # sub-block index within the policy's fabric -> VMs there
        for _path, other in p.iter_kind("instances"):
            slot = other.get("_subblock")
            if other.get("_policy_fabric") == policy and slot is not None and other.get("_gone_at") is None:
                taken[slot] = taken.get(slot, 0) + 1
        # The sub-blocks this request needs: the partly free ones first, then new ones.
        free: list[int] = []
        need, sb = len(todo), 0
        while need > 0:
            room = hosts - taken.get(sb, 0)
            if room > 0:
                free.append(sb)
                need -= room
            sb += 1
        cluster_id = _hexid(zone, "cluster")
        base_block = zlib.crc32(policy.encode()) % 997
        for k, inst in enumerate(todo):
            # Round-robin over the sub-blocks with room left.
            candidates = [s for s in free if taken.get(s, 0) < hosts]
            s = candidates[k % len(candidates)]
            host_index = taken.get(s, 0)
            taken[s] = host_index + 1
            block = _hexid(zone, "block", base_block + s // per_block)
            subblock = _hexid(zone, "subblock", base_block + s // per_block, s % per_block)
            host = _hexid(zone, "host", block, subblock, host_index, inst["name"])
            inst["_policy_fabric"], inst["_subblock"] = policy, s
            inst["resourceStatus"] = {
                "physicalHost": f"/{block}/{subblock}/{host}",
                "physicalHostTopology": {"cluster": cluster_id, "block": block, "subblock": subblock, "host": host},
            }
