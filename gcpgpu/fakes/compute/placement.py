"""Resource policies (compact placement) and reservations."""

from __future__ import annotations

from ..core import ApiError, already_exists, check_name, invalid, not_found, required
from .links import regional_name
from .state import Project, _mutation, _stockout_error, last


class PlacementMixin:
    @_mutation(sweep=False)
    def insert_resource_policy(self, p: Project, region: str, body: dict) -> dict:
        self._check_region(region)
        check_name("resource.name", body.get("name"))
        gpp = body.get("groupPlacementPolicy")
        if gpp is not None:
            coll = gpp.get("collocation", "UNSPECIFIED_COLLOCATION")
            if coll not in ("COLLOCATED", "UNSPECIFIED_COLLOCATION"):
                raise invalid("resource.groupPlacementPolicy.collocation", coll, "Must be COLLOCATED or UNSPECIFIED_COLLOCATION.")
            if "vmCount" in gpp and int(gpp["vmCount"]) < 1:
                raise invalid("resource.groupPlacementPolicy.vmCount", gpp["vmCount"], "Must be at least 1.")
            if "maxDistance" in gpp:
                raise ApiError(400, "invalid", "Invalid JSON payload received. Unknown name \"maxDistance\" at "
                               "'resource.group_placement_policy': the field is in the beta API only.")
        res = {"kind": "compute#resourcePolicy", **body, "region": self.link(p.name, f"regions/{region}"), "status": "READY"}
        return self._insert(p, f"regions/{region}/resourcePolicies", f"regions/{region}", res)

    # ------------------------------------------------------------------ reservations
    @_mutation()
    def insert_reservation(self, p: Project, zone: str, body: dict) -> dict:
        region = self._check_zone(zone)
        check_name("resource.name", body.get("name"))
        spec = body.get("specificReservation") or {}
        if not spec:
            raise required("resource.specificReservation")
        count = int(spec.get("count", 0))
        if count < 1:
            raise invalid("resource.specificReservation.count", spec.get("count"), "Must be at least 1.")
        mt = last((spec.get("instanceProperties") or {}).get("machineType"))
        if not mt:
            raise required("resource.specificReservation.instanceProperties.machineType")
        if mt not in self.world.zone_machine_types[zone]:
            raise invalid("resource.specificReservation.instanceProperties.machineType", mt,
                          f"Machine type with name '{mt}' does not exist in zone '{zone}'.")
        path = f"zones/{zone}/reservations"
        if body["name"] in p.coll(path):
            raise already_exists(f"projects/{p.name}/{path}/{body['name']}")
        policies = {}
        for key, link in (body.get("resourcePolicies") or {}).items():
            pol = self._policy_for(p, region, link, "resource.resourcePolicies")
            policies[key] = pol["selfLink"]
        res = {
            "kind": "compute#reservation",
            "specificReservationRequired": False,
            **body,
            "zone": self.link(p.name, f"zones/{zone}"),
            "status": "READY",
            "specificReservation": {**spec, "count": str(count), "inUseCount": "0"},
            "_machine_type": mt,
        }
        if policies:
            res["resourcePolicies"] = policies
        dtype = body.get("deploymentType")
        if dtype not in (None, "DENSE", "DEPLOYMENT_TYPE_UNSPECIFIED"):
            raise invalid("resource.deploymentType", dtype, "Must be DENSE or DEPLOYMENT_TYPE_UNSPECIFIED.")
        if dtype == "DENSE":
            # Real DENSE capacity comes from Google (future reservations, the account team); the
            # emulator lets a test insert one directly.
            self._lay_out_blocks(res, zone, count)
        err = self._check_quota(p, region, self._reservation_usage(res))
        if err is None and self.faults.take_capacity(zone, mt, count) < count:
            err = _stockout_error(zone, mt)
        if err is not None:
            op = self._new_op(p.name, f"zones/{zone}", "insert", self.link(p.name, f"{path}/{body['name']}"), error=err)
            return self.render_op(op)
        return self._insert(p, path, f"zones/{zone}", res)

    def _reservation_in_use(self, res: dict) -> int:
        p = self.projects[res["selfLink"].split("/projects/")[1].split("/")[0]]
        return sum(
            1
            for _path, inst in p.iter_kind("instances")
            if inst.get("_reservation") == res["selfLink"] and self.instance_status(inst) != "TERMINATED"
            and not (inst.get("_gone_at") is not None and inst["_gone_at"] <= self.now())
        )

    def _policy_for(self, p: Project, region: str, link: str, field_name: str) -> dict:
        return self._in_region(p, region, "resourcePolicies", link, field_name,
                               f"Resource policy must be in region '{region}' of the resource.")

    def _in_region(self, p: Project, region: str, kind: str, link: str, field_name: str, elsewhere: str) -> dict:
        """The regional `kind` resource that `link` (a path or bare name) names, which must be in `region`."""
        ref_region, name = regional_name(link, kind, field_name, region)
        if ref_region != region:
            raise invalid(field_name, link, elsewhere)
        res = p.coll(f"regions/{region}/{kind}").get(name)
        if res is None:
            raise not_found(f"projects/{p.name}/regions/{region}/{kind}/{name}")
        return res
