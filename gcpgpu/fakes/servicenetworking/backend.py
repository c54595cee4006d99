"""Private service access: connections between a consumer VPC and Google's service producers.

    POST   /v1/services/servicenetworking.googleapis.com/connections                 connections.create
    GET    /v1/services/servicenetworking.googleapis.com/connections?network=N       connections.list
    PATCH  /v1/services/servicenetworking.googleapis.com/connections/-               connections.patch
    POST   /v1/services/servicenetworking.googleapis.com/connections/C                connections.deleteConnection
    GET    /v1/operations/ID                                                          operations.get

A connection names its network as projects/{project number}/global/networks/{name} (the discovery
document says a number; a project id is taken too) and one or more allocated ranges: Compute global
addresses of purpose VPC_PEERING on that network. One connection per network. Deleting a connection a
Managed Lustre (or PRIVATE_SERVICE_ACCESS Filestore) instance still uses is refused. The wording of these
refusals is the emulator's own (Google's exact messages were not verified).
"""

from __future__ import annotations

import copy
import re
import threading
from collections.abc import Callable
from typing import Any

from ..core import ApiError
from ..lro import GoogleError, Operations, invalid_argument, json_body

SERVICE = "services/servicenetworking.googleapis.com"
PEERING = "servicenetworking-googleapis-com"
CONNECTION = "type.googleapis.com/google.cloud.servicenetworking.v1.Connection"
_NETWORK = re.compile(r"^projects/(?P<project>[^/]+)/global/networks/(?P<name>[^/]+)$")
_ROUTE = re.compile(r"^/servicenetworking/v1/(?:(?P<svc>services/[^/]+)/connections(?:/(?P<conn>[^/:]+)"
                    r"(?::(?P<verb>[A-Za-z]+))?)?|operations(?:/(?P<op>[^/:]+)(?::(?P<opverb>[A-Za-z]+))?)?)/?$")


class ServiceNetworkingBackend:
    def __init__(self, clock: Any, seconds: Callable[[], float], compute: Any,
                 users: Callable[[str, str], list[str]]) -> None:
        self.clock = clock
        self._seconds = seconds
        self.compute = compute
        self._users = users  # (project, network) -> instances that use its private service access
        self.operations = Operations(clock, "")
        self.operations.name_prefix = "pssn."
        self._conns: dict[tuple[str, str], dict] = {}  # (project id, network) -> connection
        self._lock = threading.RLock()

    def reset(self) -> None:
        with self._lock:
            self._conns.clear()
        self.operations.reset()

    def snapshot(self) -> list[dict]:
        """The connections as plain JSON (the server's --state-file)."""
        with self._lock:
            return [{"project": project, "network": network, "connection": copy.deepcopy(conn)}
                    for (project, network), conn in sorted(self._conns.items())]

    def restore(self, data: list[dict]) -> None:
        with self._lock:
            self._conns = {(d["project"], d["network"]): copy.deepcopy(d["connection"]) for d in data}

    def connected(self, project: str, network: str) -> bool:
        with self._lock:
            return (project, network) in self._conns

    def _network(self, value: Any, what: str) -> tuple[str, str]:
        m = _NETWORK.match(value) if isinstance(value, str) else None
        if m is None:
            raise invalid_argument(f"{what} '{value or ''}' is not projects/PROJECT_NUMBER/global/networks/NETWORK.",
                                   what)
        project = m["project"]
        if project.isdigit():
            ids = self.compute.project_ids(project)
            if not ids:
                raise GoogleError("NOT_FOUND", f"Project number {project} was not found.")
            project = ids[0]
        try:
            self.compute.get(project, "global/networks", m["name"])
        except ApiError:
            raise GoogleError("NOT_FOUND", f"Network '{value}' was not found.") from None
        return project, m["name"]

    def _ranges(self, project: str, network: str, names: Any) -> list[str]:
        if not isinstance(names, list) or not names:
            raise invalid_argument("reservedPeeringRanges must name at least one allocated range.",
                                   "reserved_peering_ranges")
        for name in names:
            try:
                address = self.compute.get(project, "global/addresses", str(name))
            except ApiError:
                raise GoogleError("FAILED_PRECONDITION", f"Allocated IP range '{name}' not found in network.") from None
            if address.get("purpose") != "VPC_PEERING" or not str(address.get("network", "")).endswith(
                    f"/global/networks/{network}"):
                raise GoogleError("FAILED_PRECONDITION", f"Allocated IP range '{name}' is not a VPC_PEERING range "
                                  f"of network '{network}'.")
        return [str(n) for n in names]

    def create(self, body: dict) -> dict:
        project, network = self._network(body.get("network"), "network")
        ranges = self._ranges(project, network, body.get("reservedPeeringRanges"))
        with self._lock:
            if (project, network) in self._conns:
                raise GoogleError("FAILED_PRECONDITION", "Cannot modify allocated ranges in CreateConnection. "
                                  "Please use UpdateConnection.")
            conn = {"network": body["network"], "reservedPeeringRanges": ranges, "peering": PEERING, "service": SERVICE}
            self._conns[(project, network)] = conn
        return self.operations.start("", f"{SERVICE}/connections/{PEERING}", "create", self._seconds(),
                                     result=lambda: {"@type": CONNECTION, **conn})

    def update(self, body: dict) -> dict:
        project, network = self._network(body.get("network"), "network")
        ranges = self._ranges(project, network, body.get("reservedPeeringRanges"))
        with self._lock:
            conn = self._conns.get((project, network))
            if conn is None:
                raise GoogleError("NOT_FOUND", f"No private service connection on network '{body['network']}'.")
            conn["reservedPeeringRanges"] = ranges
            done = dict(conn)
        return self.operations.start("", f"{SERVICE}/connections/{PEERING}", "update", self._seconds(),
                                     result=lambda: {"@type": CONNECTION, **done})

    def list(self, network: Any) -> dict:
        if not network:
            raise invalid_argument("network is required.", "network")
        project, name = self._network(network, "network")
        with self._lock:
            conn = self._conns.get((project, name))
            return {"connections": [dict(conn)]} if conn else {}

    def delete(self, body: dict) -> dict:
        project, network = self._network(body.get("consumerNetwork"), "consumerNetwork")
        with self._lock:
            if (project, network) not in self._conns:
                raise GoogleError("NOT_FOUND", f"No private service connection on network '{body['consumerNetwork']}'.")
            users = self._users(project, network)
            if users:
                raise GoogleError("FAILED_PRECONDITION", "Producer services are still using this connection: "
                                  f"{', '.join(users)}.")
            del self._conns[(project, network)]
        return self.operations.start("", f"{SERVICE}/connections/{PEERING}", "delete", self._seconds())


class ServiceNetworkingRest:
    def __init__(self, backend: ServiceNetworkingBackend) -> None:
        self.backend = backend

    def handle(self, request: Any) -> tuple[int, Any]:
        m = _ROUTE.match(request.path)
        method, b = request.method, self.backend
        if m is None:
            raise GoogleError("NOT_FOUND", f"The emulator's servicenetworking API serves no method at {request.path}.")
        if m["svc"] is not None:
            if m["svc"] != SERVICE:
                raise GoogleError("NOT_FOUND", f"Service '{m['svc']}' is not served here; use {SERVICE}.")
            if m["conn"] is None and method == "POST":
                return 200, b.create(json_body(request.get_data()))
            if m["conn"] is None and method == "GET":
                return 200, b.list(request.args.get("network"))
            # deleteConnection: POST v1/{+name} in the discovery document (no ':verb'); ':deleteConnection' also taken.
            if m["conn"] is not None and m["verb"] in (None, "deleteConnection") and method == "POST":
                return 200, b.delete(json_body(request.get_data()))
            if m["conn"] is not None and m["verb"] is None and method == "PATCH":
                return 200, b.update(json_body(request.get_data()))
        else:
            ops = b.operations
            if m["op"] is None and method == "GET":
                return 200, ops.list("", request.args)
            name = f"operations/{m['op']}"
            if m["opverb"] is None and method == "GET":
                return 200, ops.get(name)
            if m["opverb"] is None and method == "DELETE":
                return 200, ops.delete(name)
            if m["opverb"] == "cancel" and method == "POST":
                return 200, ops.cancel(name)
        raise GoogleError("UNIMPLEMENTED", f"The emulator's servicenetworking API does not serve {method} {request.path}.")
