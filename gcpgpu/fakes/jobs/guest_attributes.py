"""instances.getGuestAttributes over REST (queryPath or variableKey): the wire format of what the
nodes report, answered from the job agent's and the node health reports (jobs/agent.py, jobs/node.py)."""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING

from ..core import ApiError

if TYPE_CHECKING:
    from werkzeug.wrappers import Request

    from .host import Host


class GuestAttributesRest:
    """instances.getGuestAttributes (queryPath or variableKey), answered from the agent's reports."""

    @classmethod
    def for_emulator(cls, emulator: Host) -> GuestAttributesRest:
        return cls(emulator)

    def __init__(self, emulator: Host) -> None:
        self.emulator = emulator

    def handle(self, request: Request) -> tuple[int, dict]:
        if request.method != "GET":
            raise ApiError(405, "methodNotAllowed", "getGuestAttributes is a GET.")
        parts = request.path.strip("/").split("/")
        project, zone, name = parts[3], parts[5], parts[7]
        inst = self.emulator.compute.get(project, f"zones/{zone}/instances", name)  # 404 as compute answers it
        agent = self.emulator.jobs.agent
        attrs = {**agent.nodes.attributes(inst), **agent.attributes(inst["id"]), **self._diagnostics(project, zone, inst),
                 **self._loader(inst)}
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

    def _loader(self, inst: dict) -> dict[str, str]:
        """A Hyperdisk ML loader VM's copy (jobs/loader.py), done when its guest attributes are first read."""
        from .loader import DiskLoader

        agent = self.emulator.jobs.agent
        loader = self.__dict__.setdefault("_disk_loader", DiskLoader(agent.shared, lambda: agent.storage.root))
        return loader.attributes(inst)

    def _diagnostics(self, project: str, zone: str, inst: dict) -> dict[str, str]:
        """Active diagnostics (jobs/diag.py) over the node's cluster: its label names the peers."""
        from .diag import NodeDiagnostics

        diag = self.__dict__.setdefault("_diag", NodeDiagnostics())
        cluster = (inst.get("labels") or {}).get("gcpgpu-cluster")

        def peers() -> list[str]:
            return [i["name"] for i in self.emulator.compute.list(project, f"zones/{zone}/instances")
                    if cluster and (i.get("labels") or {}).get("gcpgpu-cluster") == cluster]

        # A fault is in the host under the VM the fault named when diagnostics first saw it: a
        # replacement of the same name (a new instance id) lands on a healthy host. The bindings
        # live as long as the emulated project does (a reset makes a new one).
        bound = self.__dict__.setdefault("_bound", weakref.WeakKeyDictionary()).setdefault(
            self.emulator.compute.project(project), {})
        faults = self.emulator.faults

        def hit(names: list[str]) -> list[str]:
            out = []
            for name in names:
                bound.setdefault(name, inst["id"] if name == inst["name"] else None)
                if bound[name] is None and name == inst["name"]:
                    bound[name] = inst["id"]
                if name == inst["name"] and bound[name] == inst["id"]:
                    out.append(name)
                elif name != inst["name"]:
                    out.append(name)  # another node's fault: it counts for the cluster-wide all_reduce
            return out

        out = diag.attributes(inst, hit(list(faults.gpu_fault)), hit(list(faults.slow_nic)), peers)
        return {**out, **self._storage_rates(inst, out.get("gcpgpu-diag/request"))} if out else out

    def _storage_rates(self, inst: dict, request: str | None) -> dict[str, str]:
        """gcpgpu-diag/storage: the node's shared mounts measured once per diagnostics request (shared_mounts.py)."""
        from ..host.shared_mounts import measure
        from ..host.storage import PathRefused

        agent = self.emulator.jobs.agent
        done = self.__dict__.setdefault("_storage_done", {})
        key = (inst["id"], request)
        if key not in done:
            try:
                mounts = agent.shared.mounts(inst)
            except PathRefused:
                mounts = []  # a mount that fails: nothing measured, as on a node whose mount failed
            done[key] = measure(mounts, agent.storage.root, inst["name"]) if mounts else ""
        return {"gcpgpu-diag/storage": done[key]} if done[key] else {}
