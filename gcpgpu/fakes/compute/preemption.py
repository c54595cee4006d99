"""Losing a VM: Spot preemption and host errors, as Compute Engine shows them to its API's readers.

What a reader of the real API sees when a Spot VM is preempted (Compute Engine docs, "Spot VMs" and
the sample "List preemption history of a Compute Engine instance"): the instance goes STOPPING,
then TERMINATED, with `lastStopTimestamp` set, or is deleted when its instanceTerminationAction is
DELETE; and the zone's operation list holds a system operation with operationType
`compute.instances.preempted` targeting it (DONE, user `system`), which is how one finds out
afterwards (`operationType="compute.instances.preempted"` is the filter Google's sample uses). A
host error is the same with `compute.instances.hostError` and no notice (verified: the operation
type name; unverified: its statusMessage wording).

Nothing here runs on a timer: the emulator's fault clock (fakes/faults.py) decides when an armed
fault is due and calls `lose_instance`; it says so on the world's VmEvents, and the job agent stops
what ran on the VM.
"""

from __future__ import annotations

from collections.abc import Callable

from ..core import rfc3339
from ..events import VmEvents

OP_TYPES = {"preempt": "compute.instances.preempted", "host_error": "compute.instances.hostError"}
MESSAGES = {"preempt": "Instance was preempted.", "host_error": "Instance terminated by Compute Engine."}


class PreemptionMixin:
    events: VmEvents

    def find_running(self, name: str) -> list[tuple[str, str, dict]]:
        """(project, zone, instance) for every RUNNING VM named `name`, in any project and zone."""
        out = []
        with self._lock:
            for p in self.projects.values():
                for path, inst in p.iter_kind("instances"):
                    if inst.get("name") == name and inst.get("_gone_at") is None \
                            and self.instance_status(inst) == "RUNNING":
                        out.append((p.name, path.split("/")[1], inst))
        return out

    def lose_instance(self, project: str, zone: str, name: str, kind: str, grace_s: float) -> str | None:
        """Take a RUNNING VM away (`kind` preempt or host_error); returns its id, or None if it was not running.

        A preempted VM gets `grace_s` of notice (STOPPING) before it is TERMINATED; a host error none.
        """
        with self._lock:
            p = self.project(project)
            inst = p.coll(f"zones/{zone}/instances").get(name)
            if inst is None or inst.get("_gone_at") is not None or self.instance_status(inst) != "RUNNING":
                return None
            now = self.now()
            notice = grace_s if kind == "preempt" else 0.0
            inst["_phases"] = [ph for ph in inst["_phases"] if ph[0] <= now]
            inst["_phases"] += [[now, "STOPPING"], [now + notice, "TERMINATED"]]
            inst["lastStopTimestamp"] = rfc3339(now + notice)
            if (inst.get("scheduling") or {}).get("instanceTerminationAction") == "DELETE":
                inst["_gone_at"] = now + notice  # a Spot/flex-start VM set to DELETE goes away instead
            op = self._new_op(project, f"zones/{zone}", OP_TYPES[kind], inst["selfLink"], inst["id"])
            # A system event: done when it is seen, started by no user.
            op.update(user="system", statusMessage=MESSAGES[kind], _pending_s=0.0, _done_at=now)
            iid = str(inst["id"])
        self.events.vm_lost(project, zone, name, iid, kind, notice)  # outside the lock: the job agent signals processes
        return iid

    def lose_hosts(self, died: Callable[[dict], bool]) -> list[str]:
        """Every RUNNING VM for which `died(instance)` says that what ran on it died with the emulator's old
        process, lost to a host error, as when the emulator restarts on its state file. Their names."""
        with self._lock:
            hosted = [(p.name, path.split("/")[1], inst["name"]) for p in self.projects.values()
                      for path, inst in p.iter_kind("instances")
                      if inst.get("_gone_at") is None and self.instance_status(inst) == "RUNNING" and died(inst)]
        return [name for project, zone, name in hosted if self.lose_instance(project, zone, name, "host_error", 0.0)]
