"""scheduling.maxRunDuration: Compute Engine ends a VM itself when its run time is up.

What Google documents ("Limit the run time of a VM"; gcloud's --max-run-duration help): a VM with
a time limit gets a termination timestamp, `resourceStatus.scheduling.terminationTimestamp`, each
time it enters RUNNING (the limit counts from that moment, so a VM started again gets a fresh one);
the timestamp is removed while the VM is stopped. When it comes, Compute Engine performs
`instanceTerminationAction`: STOP (the VM goes STOPPING, then TERMINATED, and can be started
again) or DELETE. Limits: 30 s to 120 days (flex-start: its own range, instance_spec.py), not on
legacy preemptible VMs. Google allows the action to come up to 30 s late; the emulator is exact.

Nobody could confirm what a reader of the zone's operations sees afterwards; the emulator records
a system operation (user `system`, DONE) of type `compute.instances.stop` or
`compute.instances.delete` targeting the VM, as it records preemptions (unverified: the type names
and the statusMessage wording).

Nothing here runs on a timer of its own: the emulator's fault clock (fakes/faults.py), which
already fires preemptions, calls `end_expired_runs` on every tick; a test with a frozen clock
advances it and calls `gcp.fault_clock.tick()`. The VM's notice before TERMINATED is
faults.preempt_grace_s, as a preempted VM's is.
"""

from __future__ import annotations

from ..core import invalid, rfc3339
from ..events import VmEvents
from .instances import running_spans

RUN_LIMIT_RANGE = (30, 120 * 86400)  # seconds, standard and Spot VMs
OP_TYPES = {"STOP": "compute.instances.stop", "DELETE": "compute.instances.delete"}
MESSAGE = "Instance reached its maxRunDuration."
LOSS_KIND = "max_run_duration"  # what VmEvents listeners are told


def run_limit_seconds(sched: dict) -> float | None:
    """maxRunDuration in seconds (a Duration: int64 `seconds` as a string, int32 `nanos`), or None."""
    raw = sched.get("maxRunDuration") or {}
    if not raw:
        return None
    return int(raw.get("seconds") or 0) + int(raw.get("nanos") or 0) / 1e9


class RunDurationMixin:
    events: VmEvents

    def _check_run_limit(self, sched: dict, field: str) -> None:
        """A time limit on a STANDARD or SPOT VM, checked as Google documents it (flex-start's own
        range is checked with the rest of flex-start)."""
        secs = run_limit_seconds(sched)
        if secs is None or sched.get("provisioningModel") == "FLEX_START":
            return
        if sched.get("preemptible"):
            raise invalid(f"{field}.scheduling.maxRunDuration", sched["maxRunDuration"],
                          "Time limits are not supported on preemptible VMs; use Spot VMs instead.")
        if not RUN_LIMIT_RANGE[0] <= secs <= RUN_LIMIT_RANGE[1]:
            raise invalid(f"{field}.scheduling.maxRunDuration.seconds", sched["maxRunDuration"].get("seconds"),
                          f"Must be between {RUN_LIMIT_RANGE[0]} and {RUN_LIMIT_RANGE[1]} seconds.")

    def run_deadline(self, inst: dict) -> float | None:
        """When the VM's current run ends by its maxRunDuration: the moment it last entered RUNNING
        plus the limit; None when it has no limit or is not in a run (never started, stopped, gone)."""
        secs = run_limit_seconds(inst.get("scheduling") or {})
        # A VM bound to a calendar-mode reservation ends with the reservation's window (compute/dense.py).
        window_end = inst.get("_window_end")
        if (secs is None and window_end is None) or inst.get("_gone_at") is not None:
            return None
        spans = running_spans(inst.get("_phases", []), None)
        if not spans or spans[-1][1] is not None or spans[-1][0] > self.now():
            return None
        return min(x for x in (None if secs is None else spans[-1][0] + secs, window_end) if x is not None)

    def end_expired_runs(self) -> list[str]:
        """Stop or delete every VM whose run time is up (the fault clock asks on each tick); returns
        their names. Each gets a system operation and is announced as lost, as a preempted VM is."""
        ended: list[tuple[str, str, str, str, float]] = []
        with self._lock:
            now = self.now()
            grace = float(self.faults.preempt_grace_s)
            for p in self.projects.values():
                for path, inst in p.iter_kind("instances"):
                    deadline = self.run_deadline(inst)
                    if deadline is None or deadline > now:
                        continue
                    zone = path.split("/")[1]
                    action = (inst.get("scheduling") or {}).get("instanceTerminationAction") or "STOP"
                    # Placed at the deadline itself, however late the tick: what the API shows is
                    # derived from these times, so a reader sees the end where Compute put it.
                    inst["_phases"] = [ph for ph in inst["_phases"] if ph[0] <= deadline]
                    inst["_phases"] += [[deadline, "STOPPING"], [deadline + grace, "TERMINATED"]]
                    inst["lastStopTimestamp"] = rfc3339(deadline + grace)
                    if action == "DELETE":
                        inst["_gone_at"] = deadline + grace
                    op = self._new_op(p.name, f"zones/{zone}", OP_TYPES.get(action, OP_TYPES["STOP"]),
                                      inst["selfLink"], inst["id"])
                    op.update(user="system", statusMessage=MESSAGE, insertTime=rfc3339(deadline), _t0=deadline,
                              _pending_s=0.0, _done_at=deadline + grace)
                    ended.append((p.name, zone, inst["name"], str(inst["id"]), max(deadline + grace - now, 0.0)))
        for project, zone, name, iid, notice in ended:  # outside the lock: the job agent signals processes
            self.events.vm_lost(project, zone, name, iid, LOSS_KIND, notice)
        return [name for _p, _z, name, _i, _n in ended]

    def _termination_status(self, inst: dict) -> dict | None:
        """resourceStatus.scheduling while the VM is in a run with a time limit, else None."""
        deadline = self.run_deadline(inst)
        return None if deadline is None else {"terminationTimestamp": rfc3339(deadline)}
