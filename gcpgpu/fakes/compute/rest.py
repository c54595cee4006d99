"""Compute Engine v1 over REST/JSON: the paths, query parameters and list shapes of the real API.

Only wire format lives here; every decision is the backend's.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any

from werkzeug.routing import Map, Rule
from werkzeug.wrappers import Request

from ..core import ApiError, invalid
from .backend import GLOBAL, MAX_PAGE, REGIONAL, ZONAL, ComputeBackend, check_project
from .schema import api_method, check_body

PREFIX = "/compute/v1/projects/<project>"

# Resource kind in the URL -> the `kind` of its list responses.
LIST_KINDS = {
    "instances": "compute#instanceList",
    "reservations": "compute#reservationList",
    "disks": "compute#diskList",
    "subnetworks": "compute#subnetworkList",
    "resourcePolicies": "compute#resourcePolicyList",
    "networks": "compute#networkList",
    "firewalls": "compute#firewallList",
    "addresses": "compute#addressList",
    "routers": "compute#routerList",
    "operations": "compute#operationList",
    "zones": "compute#zoneList",
    "regions": "compute#regionList",
    "machineTypes": "compute#machineTypeList",
    "acceleratorTypes": "compute#acceleratorTypeList",
    "images": "compute#imageList",
    "instanceTemplates": "compute#instanceTemplateList",
    "instanceGroupManagers": "compute#instanceGroupManagerList",
}

_KIND = "<any(instances,reservations,disks):kind>"
_RKIND = "<any(subnetworks,resourcePolicies,instanceTemplates,routers):kind>"
_GKIND = "<any(networks,firewalls,instanceTemplates,addresses):kind>"
_AKIND = "<any(instanceGroupManagers,instances,reservations,disks,subnetworks,resourcePolicies,routers,networks,firewalls,machineTypes,acceleratorTypes,operations,instanceTemplates):kind>"
_ACTION = "<any(setLabels,setMetadata,setTags,setDeletionProtection,stop,start,attachDisk,detachDisk):action>"

URLS = Map(
    [
        Rule(f"{PREFIX}", endpoint="project", methods=["GET"]),
        Rule(f"{PREFIX}/setCommonInstanceMetadata", endpoint="set_common_metadata", methods=["POST"]),
        Rule(f"{PREFIX}/zones", endpoint="zones", methods=["GET"]),
        Rule(f"{PREFIX}/zones/<zone>", endpoint="zone", methods=["GET"]),
        Rule(f"{PREFIX}/regions", endpoint="regions", methods=["GET"]),
        Rule(f"{PREFIX}/regions/<region>", endpoint="region", methods=["GET"]),
        Rule(f"{PREFIX}/zones/<zone>/machineTypes", endpoint="machine_types", methods=["GET"]),
        Rule(f"{PREFIX}/zones/<zone>/machineTypes/<name>", endpoint="machine_type", methods=["GET"]),
        Rule(f"{PREFIX}/zones/<zone>/acceleratorTypes", endpoint="accelerator_types", methods=["GET"]),
        Rule(f"{PREFIX}/zones/<zone>/acceleratorTypes/<name>", endpoint="accelerator_type", methods=["GET"]),
        Rule(f"{PREFIX}/global/images", endpoint="images", methods=["GET"]),
        Rule(f"{PREFIX}/global/images/<name>", endpoint="image", methods=["GET"]),
        Rule(f"{PREFIX}/global/images/family/<family>", endpoint="image_family", methods=["GET"]),
        Rule(f"{PREFIX}/aggregated/{_AKIND}", endpoint="aggregated", methods=["GET"]),
        Rule(f"{PREFIX}/aggregated/subnetworks/listUsable", endpoint="usable_subnetworks", methods=["GET"]),
        Rule(f"{PREFIX}/global/networks/<name>/getEffectiveFirewalls", endpoint="effective_firewalls", methods=["GET"]),
        Rule(f"{PREFIX}/global/firewalls/<name>", endpoint="firewall_update", methods=["PUT"]),
        Rule(f"{PREFIX}/global/firewalls/<name>", endpoint="firewall_patch", methods=["PATCH"]),
        # operations, per scope
        Rule(f"{PREFIX}/zones/<zone>/operations", endpoint="ops_list", methods=["GET"]),
        Rule(f"{PREFIX}/zones/<zone>/operations/<op>", endpoint="op_get", methods=["GET"]),
        Rule(f"{PREFIX}/zones/<zone>/operations/<op>", endpoint="op_delete", methods=["DELETE"]),
        Rule(f"{PREFIX}/zones/<zone>/operations/<op>/wait", endpoint="op_wait", methods=["POST"]),
        Rule(f"{PREFIX}/regions/<region>/operations", endpoint="ops_list", methods=["GET"]),
        Rule(f"{PREFIX}/regions/<region>/operations/<op>", endpoint="op_get", methods=["GET"]),
        Rule(f"{PREFIX}/regions/<region>/operations/<op>", endpoint="op_delete", methods=["DELETE"]),
        Rule(f"{PREFIX}/regions/<region>/operations/<op>/wait", endpoint="op_wait", methods=["POST"]),
        Rule(f"{PREFIX}/global/operations", endpoint="ops_list", methods=["GET"]),
        Rule(f"{PREFIX}/global/operations/<op>", endpoint="op_get", methods=["GET"]),
        Rule(f"{PREFIX}/global/operations/<op>", endpoint="op_delete", methods=["DELETE"]),
        Rule(f"{PREFIX}/global/operations/<op>/wait", endpoint="op_wait", methods=["POST"]),
        # managed instance groups and their resize requests, zonal and regional
        *[Rule(f"{PREFIX}/{where}/instanceGroupManagers{tail}", endpoint=endpoint, methods=[verb])
          for where in ("zones/<zone>", "regions/<region>")
          for tail, endpoint, verb in (
              ("", "mig_list", "GET"), ("", "mig_insert", "POST"),
              ("/<name>", "mig_get", "GET"), ("/<name>", "mig_delete", "DELETE"),
              ("/<name>/resize", "mig_resize", "POST"),
              ("/<name>/listManagedInstances", "mig_instances", "POST"),
              ("/<name>/resizeRequests", "rr_list", "GET"), ("/<name>/resizeRequests", "rr_insert", "POST"),
              ("/<name>/resizeRequests/<rr>", "rr_get", "GET"), ("/<name>/resizeRequests/<rr>", "rr_delete", "DELETE"),
              ("/<name>/resizeRequests/<rr>/cancel", "rr_cancel", "POST"))],
        # The emulator makes no autoscalers; gcloud's `instance-groups managed describe` lists them.
        Rule(f"{PREFIX}/zones/<zone>/autoscalers", endpoint="autoscalers", methods=["GET"]),
        Rule(f"{PREFIX}/regions/<region>/autoscalers", endpoint="autoscalers", methods=["GET"]),
        # instances' own verbs
        Rule(f"{PREFIX}/zones/<zone>/instances/bulkInsert", endpoint="bulk_insert", methods=["POST"]),
        Rule(f"{PREFIX}/regions/<region>/instances/bulkInsert", endpoint="bulk_insert", methods=["POST"]),
        Rule(f"{PREFIX}/zones/<zone>/instances/<name>/{_ACTION}", endpoint="instance_action", methods=["POST"]),
        # generic collections
        Rule(f"{PREFIX}/zones/<zone>/{_KIND}", endpoint="list", methods=["GET"]),
        Rule(f"{PREFIX}/zones/<zone>/{_KIND}", endpoint="insert", methods=["POST"]),
        Rule(f"{PREFIX}/zones/<zone>/{_KIND}/<name>", endpoint="get", methods=["GET"]),
        Rule(f"{PREFIX}/zones/<zone>/{_KIND}/<name>", endpoint="delete", methods=["DELETE"]),
        Rule(f"{PREFIX}/regions/<region>/{_RKIND}", endpoint="list", methods=["GET"]),
        Rule(f"{PREFIX}/regions/<region>/{_RKIND}", endpoint="insert", methods=["POST"]),
        Rule(f"{PREFIX}/regions/<region>/{_RKIND}/<name>", endpoint="get", methods=["GET"]),
        Rule(f"{PREFIX}/regions/<region>/{_RKIND}/<name>", endpoint="delete", methods=["DELETE"]),
        Rule(f"{PREFIX}/regions/<region>/routers/<name>", endpoint="router_patch", methods=["PATCH"]),
        Rule(f"{PREFIX}/zones/<zone>/disks/<name>", endpoint="disk_update", methods=["PATCH"]),
        Rule(f"{PREFIX}/global/{_GKIND}", endpoint="list", methods=["GET"]),
        Rule(f"{PREFIX}/global/{_GKIND}", endpoint="insert", methods=["POST"]),
        Rule(f"{PREFIX}/global/{_GKIND}/<name>", endpoint="get", methods=["GET"]),
        Rule(f"{PREFIX}/global/{_GKIND}/<name>", endpoint="delete", methods=["DELETE"]),
    ],
    strict_slashes=False,
    merge_slashes=False,
)


def _scope(args: dict) -> str:
    if "zone" in args:
        return f"zones/{args['zone']}"
    if "region" in args:
        return f"regions/{args['region']}"
    return "global"


def _method(endpoint: str, args: dict) -> tuple[str, str]:
    """The discovery document's (resource, method) for a body-bearing request, to check its body by."""
    if endpoint == "insert":
        kind = args["kind"]
        if kind == "addresses":
            return "globalAddresses", "insert"  # only global addresses are served (private service access ranges)
        return ("regionInstanceTemplates" if kind == "instanceTemplates" and "region" in args else kind), "insert"
    if endpoint == "bulk_insert":
        return ("regionInstances" if "region" in args else "instances"), "bulkInsert"
    if endpoint in ("router_patch", "disk_update"):
        return ("routers", "patch") if endpoint == "router_patch" else ("disks", "update")
    if endpoint in ("mig_insert", "rr_insert"):
        base = "instanceGroupManagers" if endpoint == "mig_insert" else "instanceGroupManagerResizeRequests"
        return ("region" + base[0].upper() + base[1:] if "region" in args else base), "insert"
    if endpoint in ("firewall_update", "firewall_patch"):
        return "firewalls", endpoint.removeprefix("firewall_")
    if endpoint == "instance_action":
        return "instances", args["action"]
    return "", endpoint  # operations' wait: no body


def _page(items: list, request: Request) -> tuple[list, str | None]:
    """Slice a list the way maxResults/pageToken do; the token is an opaque offset."""
    try:
        size = int(request.args.get("maxResults", MAX_PAGE))
    except ValueError as e:
        raise invalid("maxResults", request.args.get("maxResults"), "Must be an integer.") from e
    size = max(0, min(size, MAX_PAGE)) or MAX_PAGE
    token = request.args.get("pageToken")
    start = 0
    if token:
        try:
            start = int(json.loads(base64.urlsafe_b64decode(token.encode()))["o"])
        except Exception as e:
            raise invalid("pageToken", token, "The page token is invalid.") from e
    end = start + size
    nxt = base64.urlsafe_b64encode(json.dumps({"o": end}).encode()).decode() if end < len(items) else None
    return items[start:end], nxt


def _list_response(kind: str, project: str, scope: str, items: list, request: Request) -> dict:
    page, nxt = _page(items, request)
    out: dict[str, Any] = {
        "kind": LIST_KINDS.get(kind, "compute#list"),
        "id": f"projects/{project}/{scope}/{kind}",
        "selfLink": request.base_url,
    }
    if page:
        out["items"] = page
    if nxt:
        out["nextPageToken"] = nxt
    return out


def _filtered_list(kind: str, project: str, scope: str, fetch: Callable[[], list], request: Request) -> dict:
    """_list_response of what fetch() returns that the request's filter lets through (a bad filter fails first)."""
    from .filters import parse

    pred = parse(request.args.get("filter"))
    return _list_response(kind, project, scope, [item for item in fetch() if pred(item)], request)


def _aggregated_response(kind: str, project: str, grouped: dict[str, list], request: Request) -> dict:
    flat = [(scope, item) for scope, items in grouped.items() for item in items]
    page, nxt = _page(flat, request)
    out_items: dict[str, dict] = {}
    for scope in grouped:
        mine = [item for s, item in page if s == scope]
        if mine:
            out_items[scope] = {kind: mine}
        else:
            out_items[scope] = {"warning": {
                "code": "NO_RESULTS_ON_PAGE",
                "message": f"There are no results for scope '{scope}' on this page.",
                "data": [{"key": "scope", "value": scope}],
            }}
    out: dict[str, Any] = {
        "kind": LIST_KINDS.get(kind, "compute#list").replace("List", "AggregatedList"),
        "id": f"projects/{project}/aggregated/{kind}",
        "items": out_items,
        "selfLink": request.base_url,
    }
    if nxt:
        out["nextPageToken"] = nxt
    return out


class ComputeRest:
    """Dispatches Compute v1 REST requests to a ComputeBackend."""

    @classmethod
    def for_emulator(cls, emulator: Any) -> ComputeRest:
        return cls(emulator.compute)

    def __init__(self, backend: ComputeBackend) -> None:
        self.b = backend
        self._handlers: dict[str, Callable[..., dict | None]] = {
            name[3:]: getattr(self, name) for name in dir(self) if name.startswith("on_")
        }

    def handle(self, request: Request) -> tuple[int, dict | None]:
        """Returns (HTTP status, JSON body); raises ApiError for API errors."""
        adapter = URLS.bind_to_environ(request.environ)
        try:
            endpoint, args = adapter.match()
        except Exception as e:  # NotFound / MethodNotAllowed from werkzeug
            known = api_method(request.method, request.path.removeprefix("/compute/v1/"))
            if known is not None:  # a real method the emulator does not model: say so, not 404
                raise ApiError(501, "notImplemented",
                               f"Method {known} is not implemented by the gcpgpu emulator.") from e
            code = getattr(e, "code", 404)
            raise ApiError(code if code in (404, 405) else 404, "notFound",
                           f"The requested URL {request.path} was not found on this server.") from e
        # Every path names a project; the real API refuses a malformed id before anything else,
        # read-only catalog calls (zones, machine types) included.
        check_project(args["project"])
        body: dict = {}
        if request.method in ("POST", "PUT", "PATCH") and request.get_data():
            try:
                body = json.loads(request.get_data())
            except ValueError as e:
                raise ApiError(400, "parseError", "Invalid JSON payload received.") from e
            check_body(*_method(endpoint, args), body)
        result = self._handlers[endpoint](request, body, **args)
        return 200, result

    # -- read-only ---------------------------------------------------------------------
    def on_project(self, req: Request, body: dict, project: str) -> dict:
        return self.b.project_resource(project)

    def on_set_common_metadata(self, req: Request, body: dict, project: str) -> dict:
        return self.b.set_common_metadata(project, body, request_id=req.args.get("requestId"))

    def on_zones(self, req: Request, body: dict, project: str) -> dict:
        return _filtered_list("zones", project, "", lambda: self.b.zones(project), req)

    def on_zone(self, req: Request, body: dict, project: str, zone: str) -> dict:
        return self.b.zone(project, zone)

    def on_regions(self, req: Request, body: dict, project: str) -> dict:
        return _filtered_list("regions", project, "", lambda: self.b.regions(project), req)

    def on_region(self, req: Request, body: dict, project: str, region: str) -> dict:
        return self.b.region(project, region)

    def on_machine_types(self, req: Request, body: dict, project: str, zone: str) -> dict:
        return _filtered_list(
            "machineTypes", project, f"zones/{zone}", lambda: self.b.machine_types(project, zone), req
        )

    def on_machine_type(self, req: Request, body: dict, project: str, zone: str, name: str) -> dict:
        return self.b.machine_type(project, zone, name)

    def on_accelerator_types(self, req: Request, body: dict, project: str, zone: str) -> dict:
        return _filtered_list(
            "acceleratorTypes", project, f"zones/{zone}", lambda: self.b.accelerator_types(project, zone), req
        )

    def on_accelerator_type(self, req: Request, body: dict, project: str, zone: str, name: str) -> dict:
        return self.b.accelerator_type(project, zone, name)

    def on_images(self, req: Request, body: dict, project: str) -> dict:
        return _list_response("images", project, "global", self.b.images(project), req)

    def on_image(self, req: Request, body: dict, project: str, name: str) -> dict:
        return self.b.image(project, name=name)

    def on_image_family(self, req: Request, body: dict, project: str, family: str) -> dict:
        return self.b.image(project, family=family)

    def on_aggregated(self, req: Request, body: dict, project: str, kind: str) -> dict:
        from .filters import parse

        flt = req.args.get("filter")
        if kind == "operations":
            pred = parse(flt)
            grouped = {s: [o for o in ops if pred(o)] for s, ops in self.b.aggregated_operations(project).items()}
        elif kind in ("machineTypes", "acceleratorTypes"):
            pred = parse(flt)
            fetch = self.b.machine_types if kind == "machineTypes" else self.b.accelerator_types
            grouped = {f"zones/{z}": [m for m in fetch(project, z) if pred(m)]
                       for zones in self.b.world.regions.values() for z in zones}
        elif kind == "instanceGroupManagers":
            pred = parse(flt)
            scopes = [f"zones/{z}" for zones in self.b.world.regions.values() for z in zones] + \
                [f"regions/{r}" for r in self.b.world.regions]
            grouped = {s: [m for m in self.b.list_migs(project, s) if pred(m)] for s in scopes}
        else:
            grouped = self.b.aggregated(project, kind, flt)
        return _aggregated_response(kind, project, grouped, req)

    # -- generic collections -----------------------------------------------------------
    def on_list(self, req: Request, body: dict, project: str, kind: str, **scope: str) -> dict:
        path = f"{_scope(scope)}/{kind}"
        self._check_scope(scope)
        return _list_response(kind, project, _scope(scope), self.b.list(project, path, req.args.get("filter")), req)

    def on_get(self, req: Request, body: dict, project: str, kind: str, name: str, **scope: str) -> dict:
        self._check_scope(scope)
        return self.b.get(project, f"{_scope(scope)}/{kind}", name)

    def on_disk_update(self, req: Request, body: dict, project: str, zone: str, name: str) -> dict:
        return self.b.update_disk(project, zone, name, body, request_id=req.args.get("requestId"))

    def on_router_patch(self, req: Request, body: dict, project: str, region: str, name: str) -> dict:
        return self.b.patch_router(project, region, name, body, request_id=req.args.get("requestId"))

    def on_firewall_update(self, req: Request, body: dict, project: str, name: str) -> dict:
        return self.b.update_firewall(project, name, body, request_id=req.args.get("requestId"))

    def on_firewall_patch(self, req: Request, body: dict, project: str, name: str) -> dict:
        return self.b.update_firewall(project, name, body, merge=True, request_id=req.args.get("requestId"))

    def on_effective_firewalls(self, req: Request, body: dict, project: str, name: str) -> dict:
        return self.b.effective_firewalls(project, name)

    def on_usable_subnetworks(self, req: Request, body: dict, project: str) -> dict:
        out = _filtered_list("subnetworks", project, "aggregated",
                             lambda: self.b.usable_subnetworks(project), req)
        out.update(kind="compute#usableSubnetworksAggregatedList", id=f"projects/{project}/aggregated/subnetworks/listUsable")
        return out

    def on_delete(self, req: Request, body: dict, project: str, kind: str, name: str, **scope: str) -> dict:
        self._check_scope(scope)
        return self.b.delete(project, f"{_scope(scope)}/{kind}", name, request_id=req.args.get("requestId"))

    def on_insert(self, req: Request, body: dict, project: str, kind: str, **scope: str) -> dict:
        rid = req.args.get("requestId")
        if kind == "instances":
            return self.b.insert_instance(project, scope["zone"], body, request_id=rid,
                                          source_template=req.args.get("sourceInstanceTemplate"))
        if kind == "instanceTemplates":
            return self.b.insert_instance_template(project, scope.get("region"), body, request_id=rid)
        if kind == "reservations":
            return self.b.insert_reservation(project, scope["zone"], body, request_id=rid)
        if kind == "subnetworks":
            return self.b.insert_subnetwork(project, scope["region"], body, request_id=rid)
        if kind == "resourcePolicies":
            return self.b.insert_resource_policy(project, scope["region"], body, request_id=rid)
        if kind == "routers":
            return self.b.insert_router(project, scope["region"], body, request_id=rid)
        if kind == "networks":
            return self.b.insert_network(project, body, request_id=rid)
        if kind == "firewalls":
            return self.b.insert_firewall(project, body, request_id=rid)
        if kind == "addresses":
            return self.b.insert_global_address(project, body, request_id=rid)
        if kind == "disks":
            return self.b.insert_disk(project, scope["zone"], body, request_id=rid)
        raise ApiError(400, "invalid", f"Creating {kind} is not supported by the emulator.")

    def _check_scope(self, scope: dict) -> None:
        if "zone" in scope:
            self.b._check_zone(scope["zone"])
        elif "region" in scope:
            self.b._check_region(scope["region"])

    # -- managed instance groups --------------------------------------------------------
    def on_mig_list(self, req: Request, body: dict, project: str, **scope: str) -> dict:
        out = _filtered_list("instanceGroupManagers", project, _scope(scope),
                             lambda: self.b.list_migs(project, _scope(scope)), req)
        return {**out, "kind": "compute#" + ("regionInstanceGroupManagerList" if "region" in scope
                                             else "instanceGroupManagerList")}

    def on_mig_insert(self, req: Request, body: dict, project: str, **scope: str) -> dict:
        return self.b.insert_mig(project, _scope(scope), body, request_id=req.args.get("requestId"))

    def on_mig_get(self, req: Request, body: dict, project: str, name: str, **scope: str) -> dict:
        return self.b.get_mig(project, _scope(scope), name)

    def on_mig_delete(self, req: Request, body: dict, project: str, name: str, **scope: str) -> dict:
        return self.b.delete_mig(project, _scope(scope), name, request_id=req.args.get("requestId"))

    def on_mig_resize(self, req: Request, body: dict, project: str, name: str, **scope: str) -> dict:
        size = req.args.get("size")
        if size is None:
            raise ApiError(400, "required", "Required field 'size' not specified")
        try:
            n = int(size)
        except ValueError as e:
            raise invalid("size", size, "Must be an integer.") from e
        return self.b.resize_mig(project, _scope(scope), name, n, request_id=req.args.get("requestId"))

    def on_mig_instances(self, req: Request, body: dict, project: str, name: str, **scope: str) -> dict:
        page, nxt = _page(self.b.managed_instances(project, _scope(scope), name), req)
        return {"managedInstances": page, **({"nextPageToken": nxt} if nxt else {})}

    def on_autoscalers(self, req: Request, body: dict, project: str, **scope: str) -> dict:
        self._check_scope(scope)
        return {**_list_response("autoscalers", project, _scope(scope), [], req), "kind": "compute#autoscalerList"}

    def on_rr_list(self, req: Request, body: dict, project: str, name: str, **scope: str) -> dict:
        out = _filtered_list("resizeRequests", project, _scope(scope),
                             lambda: self.b.resize_requests(project, _scope(scope), name), req)
        return {**out, "kind": "compute#instanceGroupManagerResizeRequestsListResponse"}

    def on_rr_insert(self, req: Request, body: dict, project: str, name: str, **scope: str) -> dict:
        return self.b.insert_resize_request(project, _scope(scope), name, body, request_id=req.args.get("requestId"))

    def on_rr_get(self, req: Request, body: dict, project: str, name: str, rr: str, **scope: str) -> dict:
        return self.b.resize_request(project, _scope(scope), name, rr)

    def on_rr_delete(self, req: Request, body: dict, project: str, name: str, rr: str, **scope: str) -> dict:
        return self.b.delete_resize_request(project, _scope(scope), name, rr, request_id=req.args.get("requestId"))

    def on_rr_cancel(self, req: Request, body: dict, project: str, name: str, rr: str, **scope: str) -> dict:
        return self.b.cancel_resize_request(project, _scope(scope), name, rr, request_id=req.args.get("requestId"))

    # -- instance verbs ----------------------------------------------------------------
    def on_bulk_insert(self, req: Request, body: dict, project: str, **scope: str) -> dict:
        if "region" in scope:
            return self.b.bulk_insert_regional(project, scope["region"], body, request_id=req.args.get("requestId"))
        return self.b.bulk_insert(project, scope["zone"], body, request_id=req.args.get("requestId"))

    def on_instance_action(self, req: Request, body: dict, project: str, zone: str, name: str, action: str) -> dict:
        rid = req.args.get("requestId")
        if action == "setLabels":
            return self.b.set_labels(project, zone, name, body, request_id=rid)
        if action == "setTags":
            return self.b.set_tags(project, zone, name, body, request_id=rid)
        if action == "setMetadata":
            return self.b.set_metadata(project, zone, name, body, request_id=rid)
        if action == "setDeletionProtection":
            # The query parameter defaults to true, as the API reference gives it.
            protect = req.args.get("deletionProtection", "true").lower() != "false"
            return self.b.set_deletion_protection(project, zone, name, protect, request_id=rid)
        if action == "stop":
            return self.b.stop(project, zone, name, request_id=rid)
        if action in ("attachDisk", "detachDisk"):  # compute/disks.py
            return (self.b.attach_disk(project, zone, name, body, request_id=rid) if action == "attachDisk" else
                    self.b.detach_disk(project, zone, name, req.args.get("deviceName", ""), request_id=rid))
        return self.b.start(project, zone, name, request_id=rid)

    # -- operations --------------------------------------------------------------------
    def on_ops_list(self, req: Request, body: dict, project: str, **scope: str) -> dict:
        self._check_scope(scope)
        items = self.b.list_operations(project, _scope(scope), req.args.get("filter"))
        return _list_response("operations", project, _scope(scope), items, req)

    def on_op_get(self, req: Request, body: dict, project: str, op: str, **scope: str) -> dict:
        return self.b.get_operation(project, _scope(scope), op)

    def on_op_wait(self, req: Request, body: dict, project: str, op: str, **scope: str) -> dict:
        return self.b.wait_operation(project, _scope(scope), op, timeout=self.wait_timeout)

    def on_op_delete(self, req: Request, body: dict, project: str, op: str, **scope: str) -> dict:
        self.b.delete_operation(project, _scope(scope), op)
        # Google's JSON APIs answer an empty message as `{}` with 200; compute_v1 parses the body
        # as JSON and fails on an empty 204.
        return {}

    wait_timeout = 120.0  # the real operations.wait returns after at most about 2 minutes

    @classmethod
    def for_beta(cls, emulator: Any) -> _BetaAsV1:
        """Compute beta's paths served by the v1 methods (SkyPilot sends resize requests through
        beta); beta-only fields are refused as unknown, and links in answers say v1."""
        return _BetaAsV1(cls(emulator.compute))


class _BetaAsV1:
    def __init__(self, rest: ComputeRest) -> None:
        self.rest = rest

    def handle(self, request: Request) -> tuple[int, dict | None]:
        environ = {**request.environ, "PATH_INFO": request.path.replace("/compute/beta/", "/compute/v1/", 1)}
        return self.rest.handle(Request(environ))


__all__ = ["ComputeRest", "ZONAL", "REGIONAL", "GLOBAL"]
