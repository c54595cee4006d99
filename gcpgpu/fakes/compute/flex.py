"""DWS flex-start on instances.insert: a request that waits for capacity.

The documented way to queue for flex-start capacity on Compute Engine is one `instances.insert`
per VM with `params.requestValidForDuration` (the Instance schema: "Relative deadline for waiting
for capacity. Relevant only for Instances.Insert API"; InstanceProperties, which bulkInsert takes,
has no `params`). The VM exists at once with status PENDING, goes PROVISIONING -> STAGING -> RUNNING
when the zone has capacity, and is deleted when the window ends unfilled (gcp-facts section 10).
Window bounds here: 0 (now or never) or 90 s .. 2 h, as recorded in gcp-facts; the exact error
wording is the emulator's (unverified).

The emulator re-checks queued VMs whenever the project is read or changed (`_sweep`), taking the
capacity `faults.capacity` releases in creation order; quota is checked when the VM is queued.
"""

from __future__ import annotations

from ..core import invalid, rfc3339
from .state import Project, last

FLEX_WINDOW = (90, 7200)  # seconds; 0 also allowed (only if capacity is there now)


class FlexStartMixin:
    def _flex_window(self, body: dict, field: str) -> int | None:
        """The request's validity window in seconds, or None when the body asks for no queueing."""
        raw = ((body.get("params") or {}).get("requestValidForDuration") or {})
        if not raw:
            return None
        secs = int(raw.get("seconds", 0))
        if (body.get("scheduling") or {}).get("provisioningModel") != "FLEX_START":
            raise invalid(f"{field}.params.requestValidForDuration", raw,
                          "requestValidForDuration applies to FLEX_START instances only.")
        if secs != 0 and not FLEX_WINDOW[0] <= secs <= FLEX_WINDOW[1]:
            raise invalid(f"{field}.params.requestValidForDuration.seconds", secs,
                          f"Must be 0 or between {FLEX_WINDOW[0]} and {FLEX_WINDOW[1]} seconds.")
        return secs

    def _queue_flex(self, p: Project, zone: str, inst: dict, window: int) -> None:
        """Store `inst` PENDING until capacity appears or `window` seconds pass."""
        now = self.now()
        self._place(p, p.name, zone, inst)
        inst["_phases"] = [[now, "PENDING"]]
        inst["_flex_deadline"] = now + window

    def _tick_flex(self, p: Project) -> None:
        """Give queued flex-start VMs the capacity that has appeared; delete those whose window ended."""
        now = self.now()
        queued = sorted((inst for _path, inst in p.iter_kind("instances")
                         if inst.get("_flex_deadline") is not None and inst.get("_gone_at") is None),
                        key=lambda i: (i["creationTimestamp"], i["name"]))
        for inst in queued:
            zone = last(inst["zone"])
            if self.faults.take_capacity(zone, inst["_machine_type"], 1) == 1:
                inst.pop("_flex_deadline")
                dur = self._op_seconds()
                inst["_phases"] = [[now, "PROVISIONING"], [now + 0.5 * dur, "STAGING"], [now + dur, "RUNNING"]]
                inst["lastStartTimestamp"] = rfc3339(now + dur)  # when it runs, not when it was queued
                self._assign_topology(p, zone, self.world.region_of(zone), [inst])
            elif now >= inst["_flex_deadline"]:
                inst["_gone_at"] = now  # the request expired: GCP deletes the unfilled VM
