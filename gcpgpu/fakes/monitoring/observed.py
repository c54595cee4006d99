"""What Monitoring observes of the rest of the emulator: running VMs (and what runs on them), Vertex AI jobs.

Read only, and only through the other backends' public methods: Compute's running history of its
instances, the job agent's busy spans (fakes/activity.py) and the Vertex AI backend's started
jobs, as the plain values the generator needs.
"""

from __future__ import annotations

from typing import Any

from ..activity import Activity
from .synthetic import Vm


def vms(compute: Any, activity: Activity, project: str, ids: set[str] | None = None) -> list[Vm]:
    """The project's VMs that have run (those of `ids` only, when given), with their RUNNING spans and
    the spans a job ran on them, with the steps each job logged."""
    if compute is None:
        return []
    history = compute.running_history(project, ids)
    work = activity.work_of([h["id"] for h in history])
    return [Vm(project, h["id"], h["name"], h["zone"], h["machineType"], h["labels"], h["spans"], busy, steps)
            for h, (busy, steps) in zip(history, work, strict=True)]


def vertex_jobs(vertex: Any, project: str) -> dict[str, dict]:
    """The emulator's Vertex AI custom jobs that have run in `project`, as synthetic job entries."""
    if vertex is None:
        return {}
    out: dict[str, dict] = {}
    for job in vertex.started_jobs(project):
        pools = (job["jobSpec"] or {}).get("workerPoolSpecs") or []
        replicas = sum(int((p or {}).get("replicaCount") or 0) for p in pools[:2])
        machine = ((pools[0] or {}).get("machineSpec") or {}).get("machineType", "") if pools else ""
        if replicas:
            out[job["name"].rsplit("/", 1)[-1]] = {"project": project, "replicas": replicas, "machine_type": machine,
                                                   "start": job["start"], "end": job["end"], "stragglers": {},
                                                   "steps": job.get("steps") or ()}
    return out
