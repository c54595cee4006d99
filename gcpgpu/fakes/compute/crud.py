"""Get, list, aggregatedList and delete, the same for every resource kind."""

from __future__ import annotations

from ..core import ApiError, already_exists, rfc3339
from . import filters
from .state import GLOBAL, REGIONAL, ZONAL, Project, _kind_word, _mutation, last, public


class CrudMixin:
    def get(self, project: str, path: str, name: str) -> dict:
        with self._lock:
            p = self.project(project)
            self._sweep(p)
            return self._render(self._get(project, path, name))

    def list(self, project: str, path: str, flt: str | None = None) -> list[dict]:
        pred = filters.parse(flt)
        with self._lock:
            p = self.project(project)
            self._sweep(p)
            items = [self._render(r) for r in p.coll(path).values()]
        return [r for r in sorted(items, key=lambda r: r["name"]) if pred(r)]

    def aggregated(self, project: str, kind: str, flt: str | None = None) -> dict[str, list[dict]]:
        """{scope: [resources]} over every zone or region, as aggregatedList returns."""
        pred = filters.parse(flt)
        scopes = (
            [f"zones/{z}" for zones in self.world.regions.values() for z in zones]
            if kind in ZONAL
            else [f"regions/{r}" for r in self.world.regions]
            if kind in REGIONAL
            else ["global"]
        )
        if kind in REGIONAL and kind in GLOBAL:  # instance templates: global and regional ones
            scopes = ["global", *scopes]
        with self._lock:
            p = self.project(project)
            self._sweep(p)
            out = {}
            for scope in scopes:
                items = [self._render(r) for r in p.coll(f"{scope}/{kind}").values()]
                out[scope] = [r for r in sorted(items, key=lambda r: r["name"]) if pred(r)]
            return out

    def _render(self, res: dict) -> dict:
        out = public(res)
        kind = res.get("kind")
        if kind == "compute#instance":
            out["status"] = self.instance_status(res)
            ends = self._termination_status(res)
            if ends:  # defined while a time-limited VM runs, removed when it stops
                out["resourceStatus"] = {**out.get("resourceStatus", {}), "scheduling": ends}
            upcoming = self._upcoming_maintenance(res)
            if upcoming:  # a fault scheduled it (compute/maintenance.py)
                out["resourceStatus"] = {**out.get("resourceStatus", {}), "upcomingMaintenance": upcoming}
        elif kind == "compute#disk":  # its users: the VMs that have it attached now (compute/disks.py)
            project = res["selfLink"].split("/projects/", 1)[1].split("/", 1)[0]
            out["users"] = [u for u, _mode in self.disk_users(self.project(project), res["selfLink"])]
        elif kind == "compute#reservation":
            out["specificReservation"]["inUseCount"] = str(self._reservation_in_use(res))
        return out

    def _insert(self, p: Project, path: str, scope: str, res: dict) -> dict:
        name = res["name"]
        if name in p.coll(path):
            raise already_exists(f"projects/{p.name}/{path}/{name}")
        now = self.now()
        res.setdefault("id", self.ids.next())
        res.setdefault("creationTimestamp", rfc3339(now))
        res["selfLink"] = self.link(p.name, f"{path}/{name}")
        p.coll(path)[name] = res
        return self.render_op(self._new_op(p.name, scope, "insert", res["selfLink"], res["id"]))

    @_mutation()
    def delete(self, p: Project, path: str, name: str) -> dict:
        """Delete a resource, refusing (as GCP does) while another resource uses it."""
        scope, kind = path.rsplit("/", 1)
        res = self._get(p.name, path, name)
        if res.get("_gone_at") is not None:
            return self.render_op(self._new_op(p.name, scope, "delete", res["selfLink"], res["id"]))
        if kind == "instances" and res.get("deletionProtection"):
            # The real API's words (terraform-provider-google PR 1211 quotes them).
            raise ApiError(400, "invalidResourceUsage",
                           "Invalid resource usage: 'Resource cannot be deleted if it's protected against deletion.'.")
        user = self._used_by(p, res)
        if user:
            raise ApiError(
                400,
                "resourceInUseByAnotherResource",
                f"The {_kind_word(kind)} resource '{res['selfLink'].split('/compute/v1/')[1]}' "
                f"is already being used by '{user.split('/compute/v1/')[1]}'",
            )
        op = self._new_op(p.name, scope, "delete", res["selfLink"], res["id"])
        if kind == "instances":
            self._append_phase(res, "STOPPING")
            res["_gone_at"] = op["_done_at"]
        else:
            del p.coll(path)[name]
            if kind == "networks":
                self._delete_auto_subnets(p, res)
            elif kind == "subnetworks":
                net = p.coll("global/networks").get(last(res["network"]))
                if net is not None and res["selfLink"] in net.get("subnetworks", []):
                    net["subnetworks"].remove(res["selfLink"])  # the network lists only live subnets
        return self.render_op(op)

    def _used_by(self, p: Project, res: dict) -> str | None:
        link = res["selfLink"]
        for _path, other in p.iter_kind("instances"):
            if other.get("_gone_at") is not None and other["_gone_at"] <= self.now():
                continue
            refs = [*other.get("resourcePolicies", []), *(d.get("source") for d in other.get("disks", []))]
            for nic in other.get("networkInterfaces", []):
                refs += [nic.get("network"), nic.get("subnetwork")]
            if link in refs:
                return other["selfLink"]
        for kind in ("subnetworks", "firewalls", "reservations", "routers"):
            for _path, other in p.iter_kind(kind):
                if other is res:
                    continue
                if kind == "subnetworks" and other.get("_auto"):
                    continue  # auto-mode subnets go with their network
                refs = [other.get("network")] + list(other.get("resourcePolicies", {}).values())
                if link in refs:
                    return other["selfLink"]
        return None
