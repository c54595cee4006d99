"""DENSE reservations: their blocks and sub-blocks, the VMs bound to them, and where those VMs sit.

Compute v1 (discovery document `compute.v1.json`): `Reservation.deploymentType` DENSE |
DEPLOYMENT_TYPE_UNSPECIFIED; `reservationBlocks` (get, list) and `reservationSubBlocks` (get, list,
reportFaulty), whose resources carry `count`, `inUseCount`, `healthInfo` and `physicalTopology`
{cluster, block[, subBlock]}; `ResourceStatus.reservationConsumptionInfo` {consumedReservation,
consumedReservationBlock, consumedReservationSubBlock}. A VM consuming a DENSE reservation must
ask for `scheduling.provisioningModel: RESERVATION_BOUND`; the API answers STANDARD with 400
"Instances consuming DENSE reservations must use provisioningModel RESERVATION_BOUND" (SkyPilot
issue 9771; the error's `reason` is unverified).

A VM targets a block or sub-block by naming it in `reservationAffinity.values`:
`R/reservationBlocks/B[/reservationSubBlocks/S]` (Google's guide on consuming reservation blocks;
not in the discovery document: unverified beyond that guide).

The emulator's layout follows its fabric (compute/topology.py): a sub-block is `faults.subblock_hosts`
hosts (one VM per host), a block `faults.block_subblocks` sub-blocks; a reservation of N VMs is laid
out over as many blocks as it needs. Block and sub-block names (`R-block-0001`,
`R-block-0001-subblock-0001`) are the emulator's; real names are unverified.
"""

from __future__ import annotations

import re
import zlib

from ..core import ApiError, not_found, parse_rfc3339
from .state import Project
from .topology import _hexid

DENSE_ERROR = "Instances consuming DENSE reservations must use provisioningModel RESERVATION_BOUND"
_TARGET = re.compile(r"^(?:projects/[^/]+/reservations/)?([^/]+)(?:/reservationBlocks/([^/]+)"
                     r"(?:/reservationSubBlocks/([^/]+))?)?$")


def parse_target(value: str) -> tuple[str, str | None, str | None]:
    """(reservation, block or None, sub-block or None) from one reservationAffinity value."""
    m = _TARGET.match(value or "")
    if not m:
        raise ApiError(400, "invalid", f"Invalid value for field 'resource.reservationAffinity.values': '{value}'. "
                       "Must be RESERVATION, RESERVATION/reservationBlocks/BLOCK or "
                       "RESERVATION/reservationBlocks/BLOCK/reservationSubBlocks/SUB_BLOCK.")
    return m.group(1), m.group(2), m.group(3)


class DenseReservationsMixin:
    def _lay_out_blocks(self, res: dict, zone: str, count: int) -> None:
        """Give a new DENSE reservation its blocks and sub-blocks, sized by the emulated fabric."""
        hosts = max(int(self.faults.subblock_hosts), 1)
        per_block = max(int(self.faults.block_subblocks), 1)
        base = zlib.crc32(f"{zone}/{res['name']}".encode()) % 997
        blocks, left, bi = [], count, 0
        while left > 0:
            subs = []
            for si in range(per_block):
                if left <= 0:
                    break
                n = min(hosts, left)
                left -= n
                subs.append({"name": f"{res['name']}-block-{bi + 1:04d}-subblock-{si + 1:04d}", "id": self.ids.next(),
                             "hash": _hexid(zone, "subblock", base + bi, si), "count": n})
            blocks.append({"name": f"{res['name']}-block-{bi + 1:04d}", "id": self.ids.next(),
                           "hash": _hexid(zone, "block", base + bi), "subblocks": subs})
            bi += 1
        res["_blocks"] = blocks

    def _bound_to(self, res: dict) -> list[dict]:
        """The VMs holding a place in reservation `res` now."""
        p = self.projects[res["selfLink"].split("/projects/")[1].split("/")[0]]
        return [inst for _path, inst in p.iter_kind("instances")
                if inst.get("_reservation") == res["selfLink"] and self.instance_status(inst) != "TERMINATED"
                and not (inst.get("_gone_at") is not None and inst["_gone_at"] <= self.now())]

    def _sub_in_use(self, res: dict) -> dict[str, int]:
        used: dict[str, int] = {}
        for inst in self._bound_to(res):
            if inst.get("_res_subblock"):
                used[inst["_res_subblock"]] = used.get(inst["_res_subblock"], 0) + 1
        return used

    def _admit_dense(self, res: dict, model: str, block: str | None, sub: str | None, insts: list[dict],
                     zone: str) -> ApiError | None:
        """Check a request against DENSE reservation `res` (or one of its blocks) and give each VM a
        host in a sub-block; an error when it does not fit. Raises for what the API refuses outright."""
        if res.get("deploymentType") == "DENSE" and model != "RESERVATION_BOUND":
            raise ApiError(400, "invalid", DENSE_ERROR)
        if res.get("deleteAtTime"):  # a calendar-mode reservation: its VMs end when it does
            for inst in insts:
                inst["_window_end"] = parse_rfc3339(res["deleteAtTime"])
        blocks = res.get("_blocks")
        if not blocks:
            if block:
                raise not_found(f"{res['selfLink'].split('/compute/v1/')[-1]}/reservationBlocks/{block}")
            return None
        if block:
            blocks = [b for b in blocks if b["name"] == block]
            if not blocks:
                raise not_found(f"{res['selfLink'].split('/compute/v1/')[-1]}/reservationBlocks/{block}")
        used = self._sub_in_use(res)
        rooms = []  # (block, sub-block, free hosts), in order
        for b in blocks:
            for s in b["subblocks"]:
                if sub is None or s["name"] == sub:
                    rooms.append((b, s, s["count"] - used.get(s["name"], 0)))
        if sub and not rooms:
            raise not_found(f"{res['selfLink'].split('/compute/v1/')[-1]}/reservationBlocks/{block}"
                            f"/reservationSubBlocks/{sub}")
        free = sum(max(r[2], 0) for r in rooms)
        where = f"/reservationBlocks/{block}" if block else ""
        where += f"/reservationSubBlocks/{sub}" if sub else ""
        if free < len(insts):
            return ApiError(400, "RESERVATION_CAPACITY_EXCEEDED",
                            f"Specified reservation '{res['name']}{where}' does not have available resources for "
                            f"the request: {free} free, {len(insts)} asked.")
        # One request stays in one block when a block has room for all of it (closest hosts).
        whole = [b["name"] for b in blocks
                 if sum(max(r[2], 0) for r in rooms if r[0] is b) >= len(insts)]
        if whole:
            rooms = [r for r in rooms if r[0]["name"] == whole[0]]
        slots = [(b, s) for b, s, n in rooms for _ in range(max(n, 0))]
        cluster = _hexid(zone, "cluster")
        base = res["selfLink"].split("/compute/v1/")[-1]
        for inst, (b, s) in zip(sorted(insts, key=lambda i: i["name"]), slots, strict=False):
            host = _hexid(zone, "host", b["hash"], s["hash"], inst["name"])
            inst["_res_block"], inst["_res_subblock"] = b["name"], s["name"]
            inst["resourceStatus"] = {
                "physicalHost": f"/{b['hash']}/{s['hash']}/{host}",
                "physicalHostTopology": {"cluster": cluster, "block": b["hash"], "subblock": s["hash"], "host": host},
                "reservationConsumptionInfo": {
                    "consumedReservation": base,
                    "consumedReservationBlock": f"{base}/reservationBlocks/{b['name']}",
                    "consumedReservationSubBlock": f"{base}/reservationBlocks/{b['name']}/reservationSubBlocks/{s['name']}",
                },
            }
        return None

    # -- reservationBlocks / reservationSubBlocks (read side) --------------------------------------
    def _dense(self, project: str, zone: str, reservation: str) -> tuple[Project, dict]:
        self._check_zone(zone)
        p = self.project(project)
        res = p.coll(f"zones/{zone}/reservations").get(reservation)
        if res is None:
            raise not_found(f"projects/{project}/zones/{zone}/reservations/{reservation}")
        return p, res

    def _render_block(self, res: dict, b: dict, used: dict[str, int], zone: str) -> dict:
        in_use = sum(used.get(s["name"], 0) for s in b["subblocks"])
        degraded = sum(1 for s in b["subblocks"] if s.get("_faulty"))
        return {
            "kind": "compute#reservationBlock", "id": str(b["id"]), "name": b["name"],
            "selfLink": f"{res['selfLink']}/reservationBlocks/{b['name']}",
            "zone": res["zone"], "creationTimestamp": res.get("creationTimestamp", ""), "status": "READY",
            "count": sum(s["count"] for s in b["subblocks"]), "inUseCount": in_use,
            "reservationSubBlockCount": len(b["subblocks"]),
            "reservationSubBlockInUseCount": sum(1 for s in b["subblocks"] if used.get(s["name"])),
            "physicalTopology": {"cluster": _hexid(zone, "cluster"), "block": b["hash"]},
            "healthInfo": {"healthStatus": "DEGRADED" if degraded else "HEALTHY",
                           "healthySubBlockCount": len(b["subblocks"]) - degraded, "degradedSubBlockCount": degraded},
        }

    def _render_sub(self, res: dict, b: dict, s: dict, used: dict[str, int], zone: str) -> dict:
        bad = 1 if s.get("_faulty") else 0
        return {
            "kind": "compute#reservationSubBlock", "id": str(s["id"]), "name": s["name"],
            "selfLink": f"{res['selfLink']}/reservationBlocks/{b['name']}/reservationSubBlocks/{s['name']}",
            "zone": res["zone"], "creationTimestamp": res.get("creationTimestamp", ""), "status": "READY",
            "count": s["count"], "inUseCount": used.get(s["name"], 0),
            "physicalTopology": {"cluster": _hexid(zone, "cluster"), "block": b["hash"], "subBlock": s["hash"]},
            "healthInfo": {"healthStatus": "DEGRADED" if bad else "HEALTHY",
                           "healthyHostCount": s["count"] - bad, "degradedHostCount": bad},
        }

    def list_reservation_blocks(self, project: str, zone: str, reservation: str) -> list[dict]:
        with self._lock:
            _p, res = self._dense(project, zone, reservation)
            used = self._sub_in_use(res)
            return [self._render_block(res, b, used, zone) for b in res.get("_blocks", [])]

    def get_reservation_block(self, project: str, zone: str, reservation: str, block: str) -> dict:
        for b in self.list_reservation_blocks(project, zone, reservation):
            if b["name"] == block:
                return b
        raise not_found(f"projects/{project}/zones/{zone}/reservations/{reservation}/reservationBlocks/{block}")

    def list_reservation_sub_blocks(self, project: str, zone: str, reservation: str, block: str) -> list[dict]:
        with self._lock:
            _p, res = self._dense(project, zone, reservation)
            used = self._sub_in_use(res)
            for b in res.get("_blocks", []):
                if b["name"] == block:
                    return [self._render_sub(res, b, s, used, zone) for s in b["subblocks"]]
        raise not_found(f"projects/{project}/zones/{zone}/reservations/{reservation}/reservationBlocks/{block}")

    def get_reservation_sub_block(self, project: str, zone: str, reservation: str, block: str, sub: str) -> dict:
        for s in self.list_reservation_sub_blocks(project, zone, reservation, block):
            if s["name"] == sub:
                return s
        raise not_found(f"projects/{project}/zones/{zone}/reservations/{reservation}/reservationBlocks/{block}"
                        f"/reservationSubBlocks/{sub}")


__all__ = ["DENSE_ERROR", "DenseReservationsMixin", "parse_target"]
