"""Host maintenance seen coming, and hosts reported faulty.

Compute v1 discovery document: `ResourceStatus.upcomingMaintenance` {type (SCHEDULED |
UNSCHEDULED | MULTIPLE | UNKNOWN_TYPE), maintenanceStatus (PENDING | ONGOING | UNKNOWN),
canReschedule, windowStartTime, windowEndTime, latestWindowStartTime, maintenanceReasons
(e.g. PLANNED_UPDATE, FAILURE_CUSTOMER_REPORTED)}; `instances.reportHostAsFaulty` with
InstancesReportHostAsFaultyRequest {disruptionSchedule ("only allows IMMEDIATE"), faultReasons
[{behavior (CHIP_ERROR | PERFORMANCE | SILENT_DATA_CORRUPTION | UNRECOVERABLE_GPU_ERROR),
description}]}.

The emulator's: a fault `maintenance=NODE@2h` (core.Faults.maintenance) schedules a one-hour
window that far from when it was armed; a faulty host is replaced at once: the VM goes REPAIRING
then RUNNING on a new host in the same sub-block, and a DENSE reservation's sub-block counts the
bad host as degraded. How long a real repair takes, and whether the VM keeps its sub-block, is
unverified.
"""

from __future__ import annotations

from ..core import invalid, not_found, rfc3339
from .state import Project, _mutation
from .topology import _hexid

WINDOW_S = 3600.0


class MaintenanceMixin:
    def _upcoming_maintenance(self, inst: dict) -> dict | None:
        """The upcomingMaintenance a fault scheduled for this VM, or None."""
        entry = (self.faults.maintenance or {}).get(inst["name"])
        if entry is None:
            return None
        now = self.now()
        if entry.get("armed") is None:
            entry["armed"] = now
        start = entry["at"] if entry.get("at") is not None else entry["armed"] + float(entry.get("in_s") or 0)
        if now >= start + WINDOW_S:
            return None
        return {"type": "SCHEDULED", "maintenanceStatus": "ONGOING" if now >= start else "PENDING",
                "canReschedule": True, "windowStartTime": rfc3339(start), "windowEndTime": rfc3339(start + WINDOW_S),
                "latestWindowStartTime": rfc3339(start), "maintenanceReasons": ["PLANNED_UPDATE"]}

    @_mutation()
    def report_host_as_faulty(self, p: Project, zone: str, name: str, body: dict) -> dict:
        self._check_zone(zone)
        inst = p.coll(f"zones/{zone}/instances").get(name)
        if inst is None or inst.get("_gone_at") is not None:
            raise not_found(f"projects/{p.name}/zones/{zone}/instances/{name}")
        if body.get("disruptionSchedule") != "IMMEDIATE":
            raise invalid("disruptionSchedule", body.get("disruptionSchedule"), "Only IMMEDIATE is allowed.")
        if self.instance_status(inst) != "RUNNING":
            raise invalid("instance", name, "The instance must be RUNNING to report its host as faulty.")
        self._mark_faulty_subblock(p, inst)
        status = inst.setdefault("resourceStatus", {})
        topo = status.get("physicalHostTopology")
        if topo:
            inst["_repairs"] = inst.get("_repairs", 0) + 1
            host = _hexid(zone, "host", topo["block"], topo["subblock"], name, "repair", inst["_repairs"])
            status["physicalHostTopology"] = {**topo, "host": host}
            status["physicalHost"] = f"/{topo['block']}/{topo['subblock']}/{host}"
        self._append_phase(inst, "REPAIRING", "RUNNING")
        return self.render_op(self._new_op(p.name, f"zones/{zone}", "reportHostAsFaulty", inst["selfLink"], inst["id"]))

    def _mark_faulty_subblock(self, p: Project, inst: dict) -> None:
        link, sub = inst.get("_reservation"), inst.get("_res_subblock")
        if not link or not sub:
            return
        for _path, res in p.iter_kind("reservations"):
            if res.get("selfLink") == link:
                for b in res.get("_blocks", []):
                    for s in b["subblocks"]:
                        if s["name"] == sub:
                            s["_faulty"] = True
