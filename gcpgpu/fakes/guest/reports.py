"""What an emulated VM's own scripts report as guest attributes, beside the job agent's (jobs/agent.py).

On a real node the startup script writes gcpgpu-node/ (health.py), the diagnostics script gcpgpu-diag/ when
metadata asks for it (diag.py, with the shared mounts' measured rates: host/shared_mounts.measure), and a
Hyperdisk ML loader VM's startup script gcpgpu-loader/ once its copy is done (loader.py). Here they are worked
out when the attributes are read (instances.getGuestAttributes: compute/guest_attributes.py), and what must
happen once (a loader's copy, one measure per diagnostics request, which host a fault is in) is kept here.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..host.shared_mounts import SharedStorage, measure
from ..host.storage import PathRefused
from .diag import NodeDiagnostics
from .health import NodeHealth
from .loader import DiskLoader

if TYPE_CHECKING:
    from ..compute.backend import ComputeBackend
    from ..core import Faults


class GuestReports:
    """Every report of a VM's own scripts, for the VMs of one emulator."""

    def __init__(self, compute: ComputeBackend, faults: Faults, health: NodeHealth, shared: SharedStorage,
                 root: Callable[[], Path]) -> None:
        self.compute = compute
        self.faults = faults  # gpu_fault, slow_nic: the nodes whose diagnostics they break
        self.health = health  # the startup reports (the job agent holds them too: its RxDM needs GPUDirect)
        self.shared = shared
        self.root = root  # the emulator's storage root
        self._loader: DiskLoader | None = None  # made when first asked (it reads nothing until then)
        self._diag: NodeDiagnostics | None = None
        # The host each fault is in, per emulated project: a project lives until a reset makes a new one.
        self._bound: weakref.WeakKeyDictionary[Any, dict[str, str | None]] = weakref.WeakKeyDictionary()
        self._storage_done: dict[tuple[str, str | None], str] = {}

    def attributes(self, project: str, zone: str, inst: dict) -> dict[str, str]:
        """{"namespace/key": value} of the reports the VM `inst` (Compute's resource) has written."""
        return {**self.health.attributes(inst), **self._diagnostics(project, zone, inst), **self._loaded(inst)}

    def _loaded(self, inst: dict) -> dict[str, str]:
        """A Hyperdisk ML loader VM's copy (loader.py), done when its guest attributes are first read."""
        if self._loader is None:
            self._loader = DiskLoader(self.shared, self.root)
        return self._loader.attributes(inst)

    def _diagnostics(self, project: str, zone: str, inst: dict) -> dict[str, str]:
        """Active diagnostics (diag.py) over the node's cluster: its label names the peers."""
        if self._diag is None:
            self._diag = NodeDiagnostics()
        cluster = (inst.get("labels") or {}).get("gcpgpu-cluster")

        def peers() -> list[str]:
            return [i["name"] for i in self.compute.list(project, f"zones/{zone}/instances")
                    if cluster and (i.get("labels") or {}).get("gcpgpu-cluster") == cluster]

        # A fault is in the host under the VM the fault named when diagnostics first saw it: a
        # replacement of the same name (a new instance id) lands on a healthy host. The bindings
        # live as long as the emulated project does (a reset makes a new one).
        bound = self._bound.setdefault(self.compute.project(project), {})

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

        out = self._diag.attributes(inst, hit(list(self.faults.gpu_fault)), hit(list(self.faults.slow_nic)), peers)
        return {**out, **self._storage_rates(inst, out.get("gcpgpu-diag/request"))} if out else out

    def _storage_rates(self, inst: dict, request: str | None) -> dict[str, str]:
        """gcpgpu-diag/storage: the node's shared mounts measured once per diagnostics request."""
        key = (inst["id"], request)
        if key not in self._storage_done:
            try:
                mounts = self.shared.mounts(inst)
            except PathRefused:
                mounts = []  # a mount that fails: nothing measured, as on a node whose mount failed
            self._storage_done[key] = measure(mounts, self.root(), inst["name"]) if mounts else ""
        return {"gcpgpu-diag/storage": self._storage_done[key]} if self._storage_done[key] else {}
