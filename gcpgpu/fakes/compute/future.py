"""Future reservations (calendar mode) and advice.calendarMode, moving on the emulator's clock.

Compute v1 discovery document: `FutureReservation` {name, specificSkuProperties {totalCount,
instanceProperties {machineType}}, timeWindow {startTime, endTime | duration}, planningStatus
(DRAFT | SUBMITTED), reservationMode (CALENDAR | DEFAULT), deploymentType (DENSE),
reservationName, autoDeleteAutoCreatedReservations, specificReservationRequired, status
{procurementStatus, autoCreatedReservations, fulfilledCount}}; `futureReservations` insert, get,
list, aggregatedList, cancel, delete; `advice.calendarMode` (CalendarModeAdviceRequest
{futureResourcesSpecs: {key: FutureResourcesSpec}} -> CalendarModeAdviceResponse
{recommendations: [{recommendationsPerSpec: {key: FutureResourcesRecommendation}}]}).

The life of a submitted one here: PENDING_APPROVAL, APPROVED `APPROVE_S` seconds later (the
emulator's pace; Google reviews in its own time), PROVISIONING then FULFILLED at startTime, when a
reservation named `reservationName` (else the future reservation's own name) appears with
`deleteAtTime` = endTime and the future reservation's deploymentType; at endTime it goes away.
Calendar-mode bounds (a window of 1 to 90 days starting at most 8 weeks ahead) are recalled from
Google's calendar-mode guide: unverified here.
"""

from __future__ import annotations

import uuid

from ..core import ApiError, already_exists, check_name, invalid, not_found, parse_rfc3339, required, rfc3339
from .state import Project, _mutation, last

APPROVE_S = 2.0
DAY = 86400
CALENDAR_DURATION_S = (1 * DAY, 90 * DAY)
CALENDAR_LEAD_S = 56 * DAY


def _duration_s(text: object, field_name: str) -> int:
    """A google-duration string ("86400s") or a Duration object's seconds."""
    raw = text.get("seconds") if isinstance(text, dict) else text
    value = str(raw or "").strip().removesuffix("s")
    try:
        return int(float(value))
    except ValueError as e:
        raise invalid(field_name, raw, "Must be a duration such as '86400s'.") from e


def _time(text: object, field_name: str) -> float:
    try:
        return parse_rfc3339(str(text))
    except ValueError as e:
        raise invalid(field_name, text, "Must be an RFC 3339 timestamp.") from e


class FutureReservationsMixin:
    @_mutation()
    def insert_future_reservation(self, p: Project, zone: str, body: dict) -> dict:
        self._check_zone(zone)
        check_name("resource.name", body.get("name"))
        sku = body.get("specificSkuProperties") or {}
        if not sku:
            raise required("resource.specificSkuProperties")
        count = int(sku.get("totalCount") or 0)
        if count < 1:
            raise invalid("resource.specificSkuProperties.totalCount", sku.get("totalCount"), "Must be at least 1.")
        mt = last((sku.get("instanceProperties") or {}).get("machineType"))
        if not mt or mt not in self.world.zone_machine_types[zone]:
            raise invalid("resource.specificSkuProperties.instanceProperties.machineType", mt,
                          f"Machine type with name '{mt}' does not exist in zone '{zone}'.")
        window = body.get("timeWindow") or {}
        if not window.get("startTime"):
            raise required("resource.timeWindow.startTime")
        start = _time(window["startTime"], "resource.timeWindow.startTime")
        if window.get("endTime"):
            end = _time(window["endTime"], "resource.timeWindow.endTime")
        elif window.get("duration"):
            end = start + _duration_s(window["duration"], "resource.timeWindow.duration")
        else:
            raise required("resource.timeWindow.endTime")
        now = self.now()
        if start <= now:
            raise invalid("resource.timeWindow.startTime", window["startTime"], "The start time must be in the future.")
        if body.get("reservationMode") == "CALENDAR":
            lo, hi = CALENDAR_DURATION_S
            if not lo <= end - start <= hi:
                raise invalid("resource.timeWindow", window, "A calendar-mode reservation lasts 1 to 90 days.")
            if start - now > CALENDAR_LEAD_S:
                raise invalid("resource.timeWindow.startTime", window["startTime"],
                              "A calendar-mode reservation starts at most 8 weeks ahead.")
        path = f"zones/{zone}/futureReservations"
        if body["name"] in p.coll(path):
            raise already_exists(f"projects/{p.name}/{path}/{body['name']}")
        draft = body.get("planningStatus") == "DRAFT"
        fr = {"kind": "compute#futureReservation", "planningStatus": "SUBMITTED", **body,
              "zone": self.link(p.name, f"zones/{zone}"),
              "status": {"procurementStatus": "DRAFTING" if draft else "PENDING_APPROVAL"},
              "_start": start, "_end": end, "_created": now, "_machine_type": mt}
        return self._insert(p, path, f"zones/{zone}", fr)

    def _tick_future(self, p: Project) -> None:
        """Move every future reservation of `p` to where the clock says it is (derived on read)."""
        now = self.now()
        for path, fr in list(p.iter_kind("futureReservations")):
            st = fr["status"]
            state = st["procurementStatus"]
            if state in ("DRAFTING", "CANCELLED", "DECLINED", "FAILED"):
                continue
            if state == "PENDING_APPROVAL" and now >= fr["_created"] + APPROVE_S:
                st["procurementStatus"] = state = "APPROVED"
                st["lockTime"] = rfc3339(fr["_start"])
            if state == "APPROVED" and now >= fr["_start"]:
                self._deliver(p, path.rsplit("/", 1)[0], fr)
            if st["procurementStatus"] == "FULFILLED" and now >= fr["_end"]:
                for link in st.get("autoCreatedReservations", []):
                    p.coll(f"{path.rsplit('/', 1)[0]}/reservations").pop(last(link), None)

    def _deliver(self, p: Project, zone_path: str, fr: dict) -> None:
        zone = zone_path.split("/")[1]
        name = fr.get("reservationName") or fr["name"]
        coll = p.coll(f"{zone_path}/reservations")
        sku = fr["specificSkuProperties"]
        count = int(sku["totalCount"])
        res = {"kind": "compute#reservation", "name": name, "id": self.ids.next(),
               "creationTimestamp": rfc3339(fr["_start"]), "selfLink": self.link(p.name, f"{zone_path}/reservations/{name}"),
               "zone": self.link(p.name, zone_path), "status": "READY",
               "specificReservationRequired": bool(fr.get("specificReservationRequired", True)),
               "specificReservation": {"count": str(count), "inUseCount": "0",
                                       "instanceProperties": {**sku.get("instanceProperties", {}),
                                                              "machineType": fr["_machine_type"]}},
               "deleteAtTime": rfc3339(fr["_end"]), "_machine_type": fr["_machine_type"]}
        if fr.get("deploymentType") == "DENSE":
            res["deploymentType"] = "DENSE"
            self._lay_out_blocks(res, zone, count)
        coll.setdefault(name, res)
        fr["status"].update(procurementStatus="FULFILLED", fulfilledCount=str(count),
                            autoCreatedReservations=[coll[name]["selfLink"]])

    def _future(self, project: str, zone: str, name: str) -> tuple[Project, dict]:
        self._check_zone(zone)
        p = self.project(project)
        self._tick_future(p)
        fr = p.coll(f"zones/{zone}/futureReservations").get(name)
        if fr is None:
            raise not_found(f"projects/{project}/zones/{zone}/futureReservations/{name}")
        return p, fr

    def get_future_reservation(self, project: str, zone: str, name: str) -> dict:
        with self._lock:
            return self._render(self._future(project, zone, name)[1])

    def list_future_reservations(self, project: str, zone: str | None = None) -> dict[str, list[dict]]:
        """zone scope -> its future reservations (all zones of the project when `zone` is None)."""
        with self._lock:
            p = self.project(project)
            self._tick_future(p)
            out: dict[str, list[dict]] = {}
            for path, fr in p.iter_kind("futureReservations"):
                scope = path.rsplit("/", 1)[0]
                if zone is None or scope == f"zones/{zone}":
                    out.setdefault(scope, []).append(self._render(fr))
            return out

    @_mutation()
    def cancel_future_reservation(self, p: Project, zone: str, name: str) -> dict:
        self._tick_future(p)
        fr = p.coll(f"zones/{zone}/futureReservations").get(name)
        if fr is None:
            raise not_found(f"projects/{p.name}/zones/{zone}/futureReservations/{name}")
        if fr["status"]["procurementStatus"] not in ("DRAFTING", "PENDING_APPROVAL", "APPROVED"):
            raise ApiError(400, "invalid", f"Future reservation '{name}' is {fr['status']['procurementStatus']} "
                           "and can no longer be cancelled.")
        fr["status"]["procurementStatus"] = "CANCELLED"
        return self.render_op(self._new_op(p.name, f"zones/{zone}", "cancel", fr["selfLink"], fr["id"]))

    def calendar_mode_advice(self, project: str, region: str, body: dict) -> dict:
        """Where and when each asked-for spec can be had: the first zone of `region` that offers the
        machine type with enough capacity (faults.capacity) and is not DENIED; start at the earliest
        time asked (or now), for the shortest duration asked."""
        self._check_region(region)
        specs = body.get("futureResourcesSpecs") or {}
        if not specs:
            raise required("futureResourcesSpecs")
        now = self.now()
        per_spec = {}
        for key, spec in specs.items():
            sku = (spec.get("targetResources") or {}).get("specificSkuResources") or {}
            mt, count = sku.get("machineType"), int(sku.get("instanceCount") or 0)
            where = f"futureResourcesSpecs[{key}].targetResources.specificSkuResources"
            if not mt or count < 1:
                raise invalid(where, sku, "Needs machineType and instanceCount of at least 1.")
            rng = spec.get("timeRangeSpec") or {}
            earliest = rng.get("startTimeNotEarlierThan")
            start = max(_time(earliest, "timeRangeSpec.startTimeNotEarlierThan") if earliest else now, now)
            duration = _duration_s(rng.get("minDuration") or rng.get("maxDuration") or f"{DAY}s",
                                   "timeRangeSpec.minDuration")
            denied = {k for k, v in ((spec.get("locationPolicy") or {}).get("locations") or {}).items()
                      if (v or {}).get("preference") == "DENY"}
            chosen, others = None, {}
            for zone in sorted(z for z in self.world.zone_machine_types if z.rsplit("-", 1)[0] == region):
                loc = f"zones/{zone}"
                cap = self.faults.capacity.get(zone, {}).get(mt)
                if mt not in self.world.zone_machine_types[zone]:
                    others[loc] = {"status": "NOT_SUPPORTED", "details": f"{mt} is not offered in {zone}."}
                elif loc in denied:
                    others[loc] = {"status": "CONDITIONS_NOT_MET", "details": "Excluded by the location policy."}
                elif cap is not None and cap < count:
                    others[loc] = {"status": "NO_CAPACITY", "details": f"{cap} of {count} VMs obtainable."}
                elif chosen is None:
                    chosen = loc
                else:
                    others[loc] = {"status": "OTHER_LOCATION_STATUS_UNDEFINED"}
            rec = {"recommendationId": str(uuid.uuid4()), "recommendationType": "FUTURE_RESERVATION",
                   "otherLocations": others}
            if chosen:
                rec.update(location=chosen, startTime=rfc3339(start), endTime=rfc3339(start + duration))
            per_spec[key] = rec
        return {"recommendations": [{"recommendationsPerSpec": per_spec}]}
