"""Instances: admission (reservations, placement, quota, capacity), insert, bulkInsert and lifecycle."""

from __future__ import annotations

import uuid
from collections.abc import Callable

from ..core import ApiError, already_exists, invalid, not_found, required, rfc3339
from .dense import parse_target
from .links import fingerprint, same_fingerprint
from .netops import check_tags
from .state import Project, _check_labels, _mutation, _names_from_pattern, _stockout_error, last


class InstancesMixin:
    def instance_status(self, inst: dict) -> str:
        now = self.now()
        status = inst["_phases"][0][1]
        for t, s in inst["_phases"]:
            if t <= now:
                status = s
        return status

    def running_history(self, project: str, ids: set[str] | None = None) -> list[dict]:
        """The project's instances that have been RUNNING (those whose id is in `ids`, when given), for
        readers outside Compute (Monitoring's made-up VM metrics): id, name, zone, machineType (short
        names), labels, and `spans`, their [start, end) spans in RUNNING (end None while it runs).
        Asking never creates the project."""
        out = []
        with self._lock:
            p = self.projects.get(project)
            for _path, inst in p.iter_kind("instances") if p is not None else []:
                if ids is not None and str(inst["id"]) not in ids:
                    continue
                spans = running_spans(inst.get("_phases", []), inst.get("_gone_at"))
                if spans:
                    out.append({"id": str(inst["id"]), "name": inst["name"], "zone": inst["zone"].rsplit("/", 1)[-1],
                                "machineType": inst["machineType"].rsplit("/", 1)[-1],
                                "labels": dict(inst.get("labels", {})), "spans": spans})
        return out

    def instance_summaries(self, project: str, metadata_keys: tuple[str, ...] = ()) -> list[dict]:
        """Every instance of the project as watchers inside the emulator read it a few times a second
        (the node agents'): id, name, zone (short), status, labels and only the metadata values of
        `metadata_keys`. Not the rendered resource: deep-copying 1,024 VMs' metadata (a startup
        script each) four times a second took a third of the emulator's time under a metrics tail."""
        out = []
        with self._lock:
            p = self.projects.get(project)
            if p is None:
                return out
            self._sweep(p)
            for _path, inst in p.iter_kind("instances"):
                items = (inst.get("metadata") or {}).get("items") or []
                out.append({"id": str(inst["id"]), "name": inst["name"], "zone": inst["zone"].rsplit("/", 1)[-1],
                            "status": self.instance_status(inst), "labels": dict(inst.get("labels") or {}),
                            "metadata": {i["key"]: i.get("value") for i in items if i.get("key") in metadata_keys}})
        return out

    def backdate(self, project: str, zone: str, name: str, running_since: float) -> dict:
        """Make instance `name` look RUNNING since `running_since`, created just before: for tests and
        benchmarks whose metrics need some history. Returns the stored instance."""
        with self._lock:
            inst = self.project(project).coll(f"zones/{zone}/instances")[name]
            t = running_since
            inst["_phases"] = [[t - 2, "PROVISIONING"], [t - 1, "STAGING"], [t, "RUNNING"]]
            inst["creationTimestamp"] = rfc3339(t - 2)
            inst["lastStartTimestamp"] = rfc3339(t)
            return inst

    def _append_phase(self, inst: dict, *steps: str) -> None:
        """Cut the planned future short and schedule `steps` over one operation's duration."""
        now = self.now()
        inst["_phases"] = [ph for ph in inst["_phases"] if ph[0] <= now]
        dur = self._op_seconds()
        for i, s in enumerate(steps):
            inst["_phases"].append([now + dur * i / max(len(steps) - 1, 1) if len(steps) > 1 else now, s])

    def _admit(self, p: Project, project: str, zone: str, region: str, insts: list[dict], min_count: int) -> tuple[int, ApiError | None]:
        """How many of `insts` the zone takes now (reservations, placement, quota, capacity), or the error."""
        first = insts[0]
        mt = first["_machine_type"]
        aff = first["reservationAffinity"]
        kind = aff.get("consumeReservationType", "ANY_RESERVATION")
        reservation = None
        if kind == "SPECIFIC_RESERVATION":
            values = aff.get("values") or []
            if aff.get("key") != "compute.googleapis.com/reservation-name" or not values:
                raise invalid("resource.reservationAffinity", aff,
                              "SPECIFIC_RESERVATION needs key 'compute.googleapis.com/reservation-name' and the reservation name in values.")
            res_name, block, sub = parse_target(values[0])
            reservation = p.coll(f"zones/{zone}/reservations").get(res_name)
            if reservation is None:
                raise not_found(f"projects/{project}/zones/{zone}/reservations/{res_name}")
            if reservation["_machine_type"] != mt:
                raise invalid("resource.machineType", mt,
                              f"Reservation '{res_name}' holds {reservation['_machine_type']}, not {mt}.")
            free = int(reservation["specificReservation"]["count"]) - self._reservation_in_use(reservation)
            if free < len(insts):
                return 0, ApiError(
                    400, "RESERVATION_CAPACITY_EXCEEDED",
                    f"Specified reservation '{res_name}' does not have available resources for the request: "
                    f"{free} of {reservation['specificReservation']['count']} free, {len(insts)} asked.",
                )
            err = self._admit_dense(reservation, first["scheduling"].get("provisioningModel", "STANDARD"),
                                    block, sub, insts, zone)
            if err is not None:
                return 0, err
        elif kind == "ANY_RESERVATION":
            for res in p.coll(f"zones/{zone}/reservations").values():
                if (res["_machine_type"] == mt and not res.get("specificReservationRequired")
                        and res.get("deploymentType") != "DENSE"  # DENSE capacity is consumed by name only
                        and int(res["specificReservation"]["count"]) - self._reservation_in_use(res) >= len(insts)):
                    reservation = res
                    break
        if reservation is not None:
            for inst in insts:
                inst["_reservation"] = reservation["selfLink"]
            # A reservation's own placement policy applies to what consumes it; a VM that names
            # another placement policy is refused (a VM has at most one; dstack: "cannot use our own
            # placement policies when provisioning in a reservation"; error wording unverified).
            res_links = list((reservation.get("resourcePolicies") or {}).values())
            for inst in insts:
                own = [x for x in inst["resourcePolicies"] if x not in res_links and self._is_placement(p, region, x)]
                if res_links and own:
                    raise invalid("resource.resourcePolicies", own[0],
                                  f"Reservation '{reservation['name']}' carries placement policy "
                                  f"'{last(res_links[0])}'; a VM consuming it cannot name another placement policy.")
                for link in res_links:
                    if link not in inst["resourcePolicies"]:
                        inst["resourcePolicies"].append(link)

        for link in first["resourcePolicies"]:
            pol = p.coll(f"regions/{region}/resourcePolicies")[last(link)]
            gpp = pol.get("groupPlacementPolicy") or {}
            if "vmCount" in gpp:
                used = sum(1 for _pth, o in p.iter_kind("instances")
                           if link in o.get("resourcePolicies", []) and o.get("_gone_at") is None)
                if used + len(insts) > int(gpp["vmCount"]):
                    raise invalid("resource.resourcePolicies", link,
                                  f"Resource policy '{pol['name']}' has vmCount {gpp['vmCount']} and {used} VMs already use it; "
                                  f"{len(insts)} more do not fit.")

        extra: dict[str, float] = {}
        for inst in insts:
            for k, v in self._instance_usage({**inst, "_phases": [[0, "PROVISIONING"]]}).items():
                extra[k] = extra.get(k, 0.0) + v
        err = self._check_quota(p, region, extra)
        if err is not None:
            return 0, err
        if reservation is None:
            got = self.faults.take_capacity(zone, mt, len(insts))
            if got < min_count:
                self.faults.give_back(zone, mt, got)
                return 0, _stockout_error(zone, mt)
            if got < len(insts):
                return got, _stockout_error(zone, mt)  # the ones beyond `got` fail; the rest stand
            return got, None
        return len(insts), None

    def _is_placement(self, p: Project, region: str, link: str) -> bool:
        pol = p.coll(f"regions/{region}/resourcePolicies").get(last(link)) or {}
        return "groupPlacementPolicy" in pol

    def _place(self, p: Project, project: str, zone: str, inst: dict) -> None:
        now = self.now()
        dur = self._op_seconds()
        inst.update(id=self.ids.next(), creationTimestamp=rfc3339(now), lastStartTimestamp=rfc3339(now + dur),
                    selfLink=self.link(project, f"zones/{zone}/instances/{inst['name']}"),
                    _phases=[[now, "PROVISIONING"], [now + 0.5 * dur, "STAGING"], [now + dur, "RUNNING"]])
        p.coll(f"zones/{zone}/instances")[inst["name"]] = inst

    @_mutation()
    def insert_instance(self, p: Project, zone: str, body: dict, source_template: str | None = None) -> dict:
        region = self._check_zone(zone)
        if source_template:
            props = self._template_properties(p, source_template, region, "sourceInstanceTemplate")
            body = {**self._instance_body(props, zone, region), **body}
        inst = self._prepare_instance(p, p.name, zone, region, body, "resource")
        path = f"zones/{zone}/instances"
        if inst["name"] in p.coll(path):
            raise already_exists(f"projects/{p.name}/{path}/{inst['name']}")
        link = self.link(p.name, f"{path}/{inst['name']}")
        window = self._flex_window(body, "resource")
        _, err = self._admit(p, p.name, zone, region, [inst], 1)
        if err is not None and window and err.reason.startswith("ZONE_RESOURCE_POOL_EXHAUSTED"):
            self._queue_flex(p, zone, inst, window)  # flex-start: wait for capacity
            return self.render_op(self._new_op(p.name, f"zones/{zone}", "insert", link, inst["id"]))
        if err is not None:
            return self.render_op(self._new_op(p.name, f"zones/{zone}", "insert", link, error=err))
        self._place(p, p.name, zone, inst)
        self._assign_topology(p, zone, region, [inst])
        return self.render_op(self._new_op(p.name, f"zones/{zone}", "insert", link, inst["id"]))

    @_mutation()
    def bulk_insert(self, p: Project, zone: str, body: dict) -> dict:
        """instances.bulkInsert: N VMs from one set of properties, all or at least minCount, one operation."""
        region = self._check_zone(zone)
        insts, min_count = self._bulk_request(p, zone, region, body)
        return self._bulk_create(p, zone, region, insts, min_count)

    @_mutation()
    def bulk_insert_regional(self, p: Project, region: str, body: dict) -> dict:
        """regionInstances.bulkInsert: the same, in whichever zone of the region takes them all (or
        minCount), trying the zones `locationPolicy` does not DENY in order; one region operation.
        Simplified: the VMs land in one zone (targetShape ANY_SINGLE_ZONE's behaviour, also used for
        ANY and BALANCED, which the real API may spread over zones)."""
        self._check_region(region)
        prefs = (body.get("locationPolicy") or {}).get("locations") or {}
        mt = last((body.get("instanceProperties") or {}).get("machineType")) or None
        if mt is None and body.get("sourceInstanceTemplate"):
            mt = last(self._template_properties(p, body["sourceInstanceTemplate"], region,
                                                "bulkInsertInstanceResource.sourceInstanceTemplate").get("machineType"))
        zones = [z for z in self.world.regions[region]
                 if (prefs.get(f"zones/{z}") or {}).get("preference") != "DENY"
                 and (mt is None or mt in self.world.zone_machine_types.get(z, []))]
        if not zones:
            raise invalid("bulkInsertInstanceResource.instanceProperties.machineType", mt,
                          f"No zone of region '{region}' that the location policy allows offers it.")
        for i, zone in enumerate(zones):
            insts, min_count = self._bulk_request(p, zone, region, body)
            got, err = self._admit(p, p.name, zone, region, insts, min_count)
            if (err is None or got >= min_count) or i == len(zones) - 1:
                return self._bulk_create(p, zone, region, insts, min_count, (got, err), f"regions/{region}")
        raise AssertionError("unreachable")

    def _bulk_request(self, p: Project, zone: str, region: str, body: dict) -> tuple[list[dict], int]:
        """bulkInsert's body as the VMs it asks for in `zone` (checked, named) and its minCount."""
        props = body.get("instanceProperties")
        if body.get("sourceInstanceTemplate"):
            props = {**self._template_properties(p, body["sourceInstanceTemplate"], region,
                                                 "bulkInsertInstanceResource.sourceInstanceTemplate"), **(props or {})}
        if not props:
            raise required("bulkInsertInstanceResource.instanceProperties")
        per = body.get("perInstanceProperties") or {}
        count = int(body.get("count") or len(per))
        if count < 1:
            raise invalid("bulkInsertInstanceResource.count", body.get("count"), "Must be at least 1.")
        min_count = int(body.get("minCount") or count)
        if min_count > count:
            raise invalid("bulkInsertInstanceResource.minCount", min_count, "Must not exceed count.")
        path = f"zones/{zone}/instances"
        names = list(per)
        if len(names) < count:
            pattern = body.get("namePattern")
            if not pattern or "#" not in pattern:
                raise invalid("bulkInsertInstanceResource.namePattern", pattern,
                              "Give perInstanceProperties for every VM or a namePattern with #s.")
            names += _names_from_pattern(pattern, count - len(names), set(p.coll(path)) | set(names))
        for name in names:
            if name in p.coll(path):
                raise already_exists(f"projects/{p.name}/{path}/{name}")
        insts = []
        for name in names:
            inst_body = {**self._instance_body(props, zone, region), "name": name}
            insts.append(self._prepare_instance(p, p.name, zone, region, inst_body, "bulkInsertInstanceResource.instanceProperties"))
        return insts, min_count

    def _bulk_create(self, p: Project, zone: str, region: str, insts: list[dict], min_count: int,
                     admitted: tuple[int, ApiError | None] | None = None, op_scope: str | None = None) -> dict:
        """Admit and place bulkInsert's VMs as the real API reports them: one `bulkInsert` operation
        and one `insert` operation per VM, all in one operationGroupId. A shortfall below minCount
        fails the bulk operation with the summary code VM_MIN_COUNT_NOT_REACHED while the cause
        (the stockout) sits on the per-VM inserts (gcp-facts sections 4 and 10)."""
        scope = f"zones/{zone}"
        bulk_scope = op_scope or scope  # a regional bulkInsert's own operation is a region operation
        link = self.link(p.name, f"{bulk_scope}/instances")
        group = str(uuid.uuid4())
        got, err = admitted or self._admit(p, p.name, zone, region, insts, min_count)
        if err is not None and got == 0 and err.reason != "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS":
            # Refused as a whole (quota, a full reservation): one error on the bulk operation.
            return self.render_op(self._new_op(p.name, bulk_scope, "bulkInsert", link, error=err, group=group))
        for inst in insts[:got]:
            self._place(p, p.name, zone, inst)
            self._new_op(p.name, scope, "insert", inst["selfLink"], inst["id"], group=group)
        for inst in insts[got:]:
            self._new_op(p.name, scope, "insert", self.link(p.name, f"{scope}/instances/{inst['name']}"),
                         str(self.ids.next()), error=err, group=group)
        self._assign_topology(p, zone, region, insts[:got])
        summary = None
        if err is not None and got < min_count:
            summary = ApiError(err.code, "VM_MIN_COUNT_NOT_REACHED",
                               f"Requested minimum count of {min_count} VMs could not be created.")
        op = self._new_op(p.name, bulk_scope, "bulkInsert", link, error=summary, group=group)
        op["instancesBulkInsertOperationMetadata"] = {"perLocationStatus": {scope: {
            "status": "DONE", "targetVmCount": len(insts), "createdVmCount": got,
            "failedToCreateVmCount": len(insts) - got, "deletedVmCount": 0}}}
        return self.render_op(op)

    @staticmethod
    def _instance_body(props: dict, zone: str, region: str) -> dict:
        """InstanceProperties (bulkInsert's, a template's) as an instance body: they name machine types
        and policies bare, the instance stores links."""
        return {**props, "machineType": f"zones/{zone}/machineTypes/{last(props.get('machineType'))}",
                "resourcePolicies": [f"regions/{region}/resourcePolicies/{last(x)}"
                                     for x in props.get("resourcePolicies") or []]}

    @_mutation()
    def _mutate_instance(self, p: Project, zone: str, name: str, op_type: str, change: Callable[[dict], None]) -> dict:
        self._check_zone(zone)
        inst = self._get(p.name, f"zones/{zone}/instances", name)
        change(inst)
        return self.render_op(self._new_op(p.name, f"zones/{zone}", op_type, inst["selfLink"], inst["id"]))

    def set_labels(self, project: str, zone: str, name: str, body: dict, request_id: str | None = None) -> dict:
        labels = body.get("labels") or {}
        _check_labels(labels, "labels")

        def change(inst: dict) -> None:
            if not same_fingerprint(body.get("labelFingerprint"), inst["labelFingerprint"]):
                raise ApiError(412, "conditionNotMet",
                               "Labels fingerprint either invalid or resource labels have changed")
            inst["labels"] = labels
            inst["labelFingerprint"] = fingerprint(labels)

        return self._mutate_instance(project, zone, name, "setLabels", change, request_id=request_id)

    def set_tags(self, project: str, zone: str, name: str, body: dict, request_id: str | None = None) -> dict:
        """instances.setTags: the network tags firewall rules target, under the tags' fingerprint."""
        items = check_tags(body.get("items") or [], "resource.items")

        def change(inst: dict) -> None:
            if not same_fingerprint(body.get("fingerprint"), inst["tags"]["fingerprint"]):
                raise ApiError(412, "conditionNotMet",
                               "Supplied fingerprint does not match current tags fingerprint.")
            inst["tags"] = {**({"items": items} if items else {}), "fingerprint": fingerprint(items)}

        return self._mutate_instance(project, zone, name, "setTags", change, request_id=request_id)

    def set_metadata(self, project: str, zone: str, name: str, body: dict, request_id: str | None = None) -> dict:
        items = body.get("items") or []
        total = sum(len(i.get("value") or "") for i in items)
        if total > 512 * 1024:
            raise ApiError(400, "invalid", f"Metadata total size {total} exceeds the 512 KB limit.")

        def change(inst: dict) -> None:
            if not same_fingerprint(body.get("fingerprint"), inst["metadata"]["fingerprint"]):
                raise ApiError(412, "conditionNotMet",
                               "Supplied fingerprint does not match current metadata fingerprint.")
            inst["metadata"] = {"kind": "compute#metadata", "fingerprint": fingerprint(items), "items": items}

        op = self._mutate_instance(project, zone, name, "setMetadata", change, request_id=request_id)
        self.events.metadata_changed(project, zone, name)  # outside the lock: the job agent may start processes
        return op

    def set_deletion_protection(self, project: str, zone: str, name: str, protect: bool,
                                request_id: str | None = None) -> dict:
        """instances.setDeletionProtection (`gcloud compute instances update --[no-]deletion-protection`)."""
        def change(inst: dict) -> None:
            inst["deletionProtection"] = protect

        return self._mutate_instance(project, zone, name, "setDeletionProtection", change, request_id=request_id)

    def stop(self, project: str, zone: str, name: str, request_id: str | None = None) -> dict:
        def change(inst: dict) -> None:
            if self.instance_status(inst) not in ("TERMINATED", "STOPPING"):
                self._append_phase(inst, "STOPPING", "TERMINATED")
                inst["lastStopTimestamp"] = rfc3339(inst["_phases"][-1][0])  # what uptime and billing end at

        return self._mutate_instance(project, zone, name, "stop", change, request_id=request_id)

    @_mutation()
    def start(self, p: Project, zone: str, name: str) -> dict:
        """instances.start: a stopped VM takes its quota and zone capacity again, and can fail to
        come back (inside the operation) when either has run out, as stopped GPU VMs often do."""
        region = self._check_zone(zone)
        inst = self._get(p.name, f"zones/{zone}/instances", name)
        err = None
        if self.instance_status(inst) == "TERMINATED":
            # Reservation-backed VMs come back on their reservation's capacity, unchecked here.
            need = self._instance_usage({**inst, "_phases": [[0, "PROVISIONING"]]})
            err = self._check_quota(p, region, need)
            if err is None and not inst.get("_reservation") \
                    and self.faults.take_capacity(zone, inst["_machine_type"], 1) < 1:
                err = _stockout_error(zone, inst["_machine_type"])
            if err is None:
                self._append_phase(inst, "STAGING", "RUNNING")
                # A new run: uptime, billing and a maxRunDuration all count from here.
                inst["lastStartTimestamp"] = rfc3339(inst["_phases"][-1][0])
        return self.render_op(self._new_op(p.name, f"zones/{zone}", "start", inst["selfLink"], inst["id"], error=err))


def running_spans(phases: list, gone_at: float | None) -> tuple[tuple[float, float | None], ...]:
    """[start, end) spans in RUNNING state from an instance's (time, status) history."""
    spans: list[tuple[float, float | None]] = []
    began: float | None = None
    for t, status in phases:
        if status == "RUNNING" and began is None:
            began = float(t)
        elif status != "RUNNING" and began is not None:
            spans.append((began, float(t)))
            began = None
    if began is not None:
        spans.append((began, float(gone_at) if gone_at is not None else None))
    return tuple(spans)
