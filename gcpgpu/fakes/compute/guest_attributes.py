"""instances.getGuestAttributes over REST (queryPath or variableKey): the wire format of what nodes report.

The values come from the job agent's reports (jobs/agent.py, namespace gcpgpu/) and from the VM's own
scripts' (guest/reports.py: gcpgpu-node/, gcpgpu-diag/, gcpgpu-loader/); a VM Compute does not have is
the 404 Compute answers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from ..core import ApiError
from ..guest.reports import GuestReports

if TYPE_CHECKING:
    from werkzeug.wrappers import Request

    from .backend import ComputeBackend


class AgentReports(Protocol):
    """What the front end reads of the job agent (jobs/agent.py's ClusterAgent): a node's gcpgpu/ attributes."""

    def attributes(self, instance_id: str) -> dict[str, str]: ...


class GuestAttributesRest:
    """instances.getGuestAttributes (queryPath or variableKey), answered from the nodes' reports."""

    @classmethod
    def for_emulator(cls, emulator: Any) -> GuestAttributesRest:
        agent = emulator.jobs.agent
        return cls(emulator.compute, agent, GuestReports(emulator.compute, emulator.faults, agent.nodes,
                                                         agent.shared, lambda: agent.storage.root))

    def __init__(self, compute: ComputeBackend, agent: AgentReports, reports: GuestReports) -> None:
        self.compute = compute
        self.agent = agent
        self.reports = reports

    def handle(self, request: Request) -> tuple[int, dict]:
        if request.method != "GET":
            raise ApiError(405, "methodNotAllowed", "getGuestAttributes is a GET.")
        parts = request.path.strip("/").split("/")
        project, zone, name = parts[3], parts[5], parts[7]
        inst = self.compute.get(project, f"zones/{zone}/instances", name)  # 404 as compute answers it
        attrs = {**self.reports.attributes(project, zone, inst), **self.agent.attributes(inst["id"])}
        link = f"https://www.googleapis.com/compute/v1/projects/{project}/zones/{zone}/instances/{name}/guestAttributes"
        key = request.args.get("variableKey")
        if key:
            if key not in attrs:
                raise ApiError(404, "notFound", f"The resource '{link}/{key}' was not found")
            return 200, {"kind": "compute#guestAttributes", "selfLink": f"{link}/{key}", "variableKey": key,
                         "variableValue": attrs[key]}
        path = request.args.get("queryPath", "")
        prefix = path.rstrip("/") + "/" if path else ""
        items = [{"namespace": k.split("/", 1)[0], "key": k.split("/", 1)[1], "value": v}
                 for k, v in sorted(attrs.items()) if k.startswith(prefix)]
        return 200, {"kind": "compute#guestAttributes", "selfLink": f"{link}/{path}", "queryPath": path,
                     "queryValue": {"items": items} if items else {}}
