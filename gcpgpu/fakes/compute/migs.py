"""Managed instance groups and their resize requests: the subset SkyPilot's DWS flex-start path,
Cluster Toolkit and `gcloud compute instance-groups managed` use.

A MIG is a stored resource over the same world as instances: the VMs it makes are ordinary
instances (`instances.get/list` show them, quota and zone capacity admit them, the runtime stops
them), named BASE-xxxx and carrying the metadata `created-by` (the MIG's link) and
`instance-template`, as Google's are. What it does:
- insert / resize: reach `targetSize` now where capacity allows; what capacity refuses stays a
  pending `creating` action that later reads retry (Google keeps retrying too), so `status.isStable`
  is false until the group is whole;
- delete: the group and every VM it made;
- resize requests (DWS): all `resizeBy` VMs at once or none. ACCEPTED waits for capacity; when all
  fit, the VMs are made, targetSize grows and the request is SUCCEEDED; `requestedRunDuration`
  becomes each VM's maxRunDuration (DELETE at its end). cancel works while ACCEPTED; delete only
  once a request is done.
A regional MIG places each VM in the first zone of its distributionPolicy (default: the region's
zones) that takes it (Google spreads them EVEN by default; unverified here which zone it picks).
"""

from __future__ import annotations

import random
import string

from ..core import ApiError, check_name, invalid, not_found, required, rfc3339
from .links import fingerprint
from .state import Project, _mutation, last

_KIND = "instanceGroupManagers"


class MigsMixin:
    # ------------------------------------------------------------------ reads
    def get_mig(self, project: str, scope: str, name: str) -> dict:
        with self._lock:
            p = self.project(project)
            self._sweep(p)
            mig = self._mig(p, scope, name)
            self._reconcile_mig(p, scope, mig)
            return self._render_mig(p, scope, mig)

    def list_migs(self, project: str, scope: str) -> list[dict]:
        with self._lock:
            p = self.project(project)
            self._sweep(p)
            out = []
            for mig in sorted(p.coll(f"{scope}/{_KIND}").values(), key=lambda m: m["name"]):
                self._reconcile_mig(p, scope, mig)
                out.append(self._render_mig(p, scope, mig))
            return out

    def managed_instances(self, project: str, scope: str, name: str) -> list[dict]:
        with self._lock:
            p = self.project(project)
            self._sweep(p)
            mig = self._mig(p, scope, name)
            self._reconcile_mig(p, scope, mig)
            out = []
            for inst in self._mig_vms(p, mig):
                status = self.instance_status(inst)
                out.append({"instance": inst["selfLink"], "id": str(inst["id"]), "name": inst["name"],
                            "instanceStatus": status,
                            "currentAction": "CREATING" if status in ("PROVISIONING", "STAGING") else "NONE",
                            "version": {"instanceTemplate": mig["instanceTemplate"]}})
            return out

    def resize_requests(self, project: str, scope: str, name: str) -> list[dict]:
        with self._lock:
            p = self.project(project)
            self._sweep(p)
            mig = self._mig(p, scope, name)
            self._reconcile_mig(p, scope, mig)
            return [self._render(r) for r in sorted(mig["_requests"].values(), key=lambda r: r["name"])]

    def resize_request(self, project: str, scope: str, name: str, request: str) -> dict:
        with self._lock:
            p = self.project(project)
            self._sweep(p)
            mig = self._mig(p, scope, name)
            self._reconcile_mig(p, scope, mig)
            return self._render(self._request(p, scope, mig, request))

    # ------------------------------------------------------------------ writes
    @_mutation()
    def insert_mig(self, p: Project, scope: str, body: dict) -> dict:
        region = self._mig_region(scope)
        check_name("resource.name", body.get("name"))
        if not body.get("instanceTemplate"):
            raise required("resource.instanceTemplate")
        self._template_properties(p, body["instanceTemplate"], region, "resource.instanceTemplate")
        size = int(body.get("targetSize") or 0)
        if size < 0:
            raise invalid("resource.targetSize", size, "Must be at least 0.")
        zones = self._mig_zones(scope, body)
        mig = {"kind": "compute#instanceGroupManager", "baseInstanceName": body["name"], "description": "",
               **{k: v for k, v in body.items() if k != "targetSize"}, "targetSize": size,
               "instanceTemplate": self._template_link(p, body["instanceTemplate"]),
               "_requests": {}, "_zones": zones}
        mig[scope.split("/")[0][:-1]] = self.link(p.name, scope)
        if scope.startswith("regions/"):
            mig["distributionPolicy"] = {"zones": [{"zone": self.link(p.name, f"zones/{z}")} for z in zones],
                                         "targetShape": (body.get("distributionPolicy") or {}).get("targetShape", "EVEN")}
        op = self._insert(p, f"{scope}/{_KIND}", scope, mig)
        mig["instanceGroup"] = mig["selfLink"].replace(f"/{_KIND}/", "/instanceGroups/")
        self._reconcile_mig(p, scope, mig)
        return op

    @_mutation()
    def resize_mig(self, p: Project, scope: str, name: str, size: int) -> dict:
        if size < 0:
            raise invalid("size", size, "Must be at least 0.")
        mig = self._mig(p, scope, name)
        mig["targetSize"] = size
        self._reconcile_mig(p, scope, mig)
        return self.render_op(self._new_op(p.name, scope, "resize", mig["selfLink"], mig["id"]))

    @_mutation()
    def delete_mig(self, p: Project, scope: str, name: str) -> dict:
        mig = self._mig(p, scope, name)
        op = self._new_op(p.name, scope, "delete", mig["selfLink"], mig["id"])
        for inst in self._mig_vms(p, mig):
            self._append_phase(inst, "STOPPING")
            inst["_gone_at"] = op["_done_at"]
        del p.coll(f"{scope}/{_KIND}")[name]
        return self.render_op(op)

    @_mutation()
    def insert_resize_request(self, p: Project, scope: str, name: str, body: dict) -> dict:
        mig = self._mig(p, scope, name)
        check_name("resource.name", body.get("name"))
        if body["name"] in mig["_requests"]:
            raise ApiError(409, "alreadyExists", f"The resource '{self._request_path(p, scope, mig, body['name'])}' already exists")
        count = int(body.get("resizeBy") or 0)
        if count < 1:
            raise invalid("resource.resizeBy", body.get("resizeBy"), "Must be at least 1.")
        req = {"kind": "compute#instanceGroupManagerResizeRequest", "description": "", **body, "resizeBy": count,
               "state": "ACCEPTED", "id": self.ids.next(), "creationTimestamp": rfc3339(self.now()),
               "selfLink": self.link(p.name, self._request_path(p, scope, mig, body["name"]).split("/", 2)[2]),
               scope.split("/")[0][:-1]: self.link(p.name, scope)}
        mig["_requests"][body["name"]] = req
        self._reconcile_mig(p, scope, mig)
        return self.render_op(self._new_op(p.name, scope, "insert", req["selfLink"], req["id"]))

    @_mutation()
    def cancel_resize_request(self, p: Project, scope: str, name: str, request: str) -> dict:
        mig = self._mig(p, scope, name)
        req = self._request(p, scope, mig, request)
        if req["state"] != "ACCEPTED":
            # Google's wording for cancelling a finished request is unverified.
            raise ApiError(400, "invalid", f"Resize request '{request}' is {req['state']}; only an ACCEPTED request can be cancelled.")
        req["state"] = "CANCELLED"
        return self.render_op(self._new_op(p.name, scope, "cancel", req["selfLink"], req["id"]))

    @_mutation()
    def delete_resize_request(self, p: Project, scope: str, name: str, request: str) -> dict:
        mig = self._mig(p, scope, name)
        req = self._request(p, scope, mig, request)
        if req["state"] == "ACCEPTED":
            raise ApiError(400, "invalid", f"Resize request '{request}' is ACCEPTED; cancel it before deleting it.")
        del mig["_requests"][request]
        return self.render_op(self._new_op(p.name, scope, "delete", req["selfLink"], req["id"]))

    # ------------------------------------------------------------------ helpers
    def _mig(self, p: Project, scope: str, name: str) -> dict:
        self._mig_region(scope)
        mig = p.coll(f"{scope}/{_KIND}").get(name)
        if mig is None:  # SkyPilot's flex-start path reads exactly these words to tell "gone" from a failure
            raise not_found(f"projects/{p.name}/{scope}/{_KIND}/{name}")
        return mig

    def _mig_region(self, scope: str) -> str:
        kind, where = scope.split("/")
        if kind == "zones":
            return self._check_zone(where)
        self._check_region(where)
        return where

    def _mig_zones(self, scope: str, body: dict) -> list[str]:
        kind, where = scope.split("/")
        if kind == "zones":
            return [where]
        zones = [last(z.get("zone")) for z in (body.get("distributionPolicy") or {}).get("zones") or []]
        for i, z in enumerate(zones):
            if z not in self.world.regions[where]:
                raise invalid(f"resource.distributionPolicy.zones[{i}].zone", z,
                              f"Zone ({z}) must be a valid zone in region {where}.")
        return zones or list(self.world.regions[where])

    def _template_link(self, p: Project, ref: str) -> str:
        path = f"regions/{ref.split('regions/', 1)[1].split('/', 1)[0]}/instanceTemplates" if "regions/" in ref \
            else "global/instanceTemplates"
        return self.link(p.name, f"{path}/{last(ref)}")

    def _request_path(self, p: Project, scope: str, mig: dict, request: str) -> str:
        return f"projects/{p.name}/{scope}/{_KIND}/{mig['name']}/resizeRequests/{request}"

    def _request(self, p: Project, scope: str, mig: dict, request: str) -> dict:
        req = mig["_requests"].get(request)
        if req is None:
            raise not_found(self._request_path(p, scope, mig, request))
        return req

    def _mig_vms(self, p: Project, mig: dict) -> list[dict]:
        return sorted((inst for _path, inst in p.iter_kind("instances")
                       if inst.get("_mig") == mig["selfLink"] and inst.get("_gone_at") is None),
                      key=lambda i: (i["creationTimestamp"], i["name"]))

    def _reconcile_mig(self, p: Project, scope: str, mig: dict) -> None:
        """Bring the group to its target: a resize request's VMs that are gone (their run duration
        ended) leave the group and its target; accepted requests get all their VMs or none; VMs
        capacity refused before are tried again; surplus VMs go, newest first."""
        alive = {i["name"] for i in self._mig_vms(p, mig)}
        for req in mig["_requests"].values():
            gone = [n for n in req.get("_vms", []) if n not in alive]
            mig["targetSize"] -= len(gone)
            req["_vms"] = [n for n in req.get("_vms", []) if n in alive]
        for req in sorted(mig["_requests"].values(), key=lambda r: r["creationTimestamp"]):
            if req["state"] == "ACCEPTED" and self._make_vms(p, mig, req["resizeBy"], req):
                req["state"] = "SUCCEEDED"
                mig["targetSize"] += req["resizeBy"]
        vms = self._mig_vms(p, mig)
        if len(vms) < mig["targetSize"]:
            self._make_vms(p, mig, mig["targetSize"] - len(vms), None, partial=True)
        surplus = vms[mig["targetSize"]:][::-1] if len(vms) > mig["targetSize"] else []
        for inst in surplus:
            self._append_phase(inst, "STOPPING")
            inst["_gone_at"] = self.now() + self._op_seconds()
        for req in mig["_requests"].values():  # shrunk away by the target, not by their run's end
            req["_vms"] = [n for n in req.get("_vms", []) if n not in {i["name"] for i in surplus}]

    def _make_vms(self, p: Project, mig: dict, count: int, req: dict | None, partial: bool = False) -> bool:
        """Make `count` VMs from the group's template in the first of its zones that takes them
        (all of them unless `partial`); True when all were made."""
        region = self.world.region_of(mig["_zones"][0])
        props = self._template_properties(p, mig["instanceTemplate"], region, "resource.instanceTemplate")
        for zone in mig["_zones"]:
            taken = set(p.coll(f"zones/{zone}/instances"))
            bodies = [self._mig_vm_body(mig, props, zone, region, req, taken) for _ in range(count)]
            insts = [self._prepare_instance(p, p.name, zone, region, b, "resource") for b in bodies]
            got, err = self._admit(p, p.name, zone, region, insts, 1 if partial else count)
            if err is not None and err.reason.startswith("QUOTA"):
                return False
            for inst in insts[:got]:
                inst["_mig"] = mig["selfLink"]
                self._place(p, p.name, zone, inst)
                if req is not None:
                    req.setdefault("_vms", []).append(inst["name"])
            self._assign_topology(p, zone, region, insts[:got])
            count -= got
            if count == 0:
                return True
        return False

    def _mig_vm_body(self, mig: dict, props: dict, zone: str, region: str, req: dict | None, taken: set) -> dict:
        body = self._instance_body(props, zone, region)
        while True:  # BASE-xxxx, four random letters and digits, as Google names a MIG's VMs
            name = f"{mig['baseInstanceName']}-{''.join(random.choices(string.ascii_lowercase + string.digits, k=4))}"
            if name not in taken:
                taken.add(name)
                break
        items = [i for i in (body.get("metadata") or {}).get("items") or []
                 if i.get("key") not in ("created-by", "instance-template")]
        items += [{"key": "instance-template", "value": mig["instanceTemplate"].split("/compute/v1/")[1]},
                  {"key": "created-by", "value": mig["selfLink"].split("/compute/v1/")[1]}]
        body = {**body, "name": name, "metadata": {"items": items}}
        if req is not None and req.get("requestedRunDuration"):
            # A DWS VM lives for the request's run duration, then goes (Google's resize request doc).
            body["scheduling"] = {**(body.get("scheduling") or {}),
                                  "maxRunDuration": {"seconds": str(req["requestedRunDuration"]["seconds"])},
                                  "instanceTerminationAction": "DELETE"}
        return body

    def _render_mig(self, p: Project, scope: str, mig: dict) -> dict:
        out = self._render(mig)
        vms = self._mig_vms(p, mig)
        creating = sum(1 for i in vms if self.instance_status(i) in ("PROVISIONING", "STAGING"))
        missing = max(0, mig["targetSize"] - len(vms))
        deleting = sum(1 for i in vms if self.instance_status(i) == "STOPPING")
        actions = {k: 0 for k in ("abandoning", "creating", "creatingWithoutRetries", "deleting", "recreating",
                                  "refreshing", "restarting", "resuming", "starting", "stopping", "suspending",
                                  "verifying")}
        actions.update(creating=creating + missing, deleting=deleting)
        actions["none"] = len(vms) - creating - deleting
        stable = creating + missing + deleting == 0
        out.update(currentActions=actions, fingerprint=fingerprint([mig["targetSize"], mig["instanceTemplate"]]),
                   status={"isStable": stable, "versionTarget": {"isReached": stable},
                           "stateful": {"hasStatefulConfig": False, "perInstanceConfigs": {"allEffective": True}},
                           "allInstancesConfig": {"effective": True}},
                   targetSize=mig["targetSize"])
        return out
