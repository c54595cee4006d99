"""What Monitoring observes of the rest of the emulator: running VMs (and what runs on them), Vertex AI jobs.

Read only: Compute's instances (their RUNNING spans, from the status history it keeps), the job
agent's busy spans (fakes/activity.py) and the Vertex AI backend's jobs, copied out under their
owners' locks into the plain values the generator needs.
"""

from __future__ import annotations

import threading
from typing import Any

from ..activity import Activity
from .synthetic import Vm


def running_spans(phases: list, gone_at: float | None) -> tuple[tuple[float, float | None], ...]:
    """[start, end) spans in RUNNING state from an instance's (time, status) history."""
    spans: list[tuple[float, float | None]] = []
    began: float | None = None
    for t, status in phases:
        if status == "RUNNING" and began is None:
            began = float(t)
        elif status != "RUNNING" and began is not None:
            spans.append((began, float(t)))
            began = None
    if began is not None:
        spans.append((began, float(gone_at) if gone_at is not None else None))
    return tuple(spans)


def vms(compute: Any, activity: Activity, project: str) -> list[Vm]:
    """The project's VMs that have run, with their RUNNING spans and the spans a job ran on them."""
    if compute is None:
        return []
    out: list[Vm] = []
    with compute._lock:
        p = compute.projects.get(project)
        if p is None:
            return []
        for _path, inst in p.iter_kind("instances"):
            spans = running_spans(inst.get("_phases", []), inst.get("_gone_at"))
            if spans:
                out.append(Vm(project, str(inst["id"]), inst["name"], inst["zone"].rsplit("/", 1)[-1],
                              inst["machineType"].rsplit("/", 1)[-1], dict(inst.get("labels", {})), spans,
                              activity.spans(str(inst["id"]))))
    return out


def vertex_jobs(vertex: Any, project: str) -> dict[str, dict]:
    """The emulator's Vertex AI custom jobs that have run in `project`, as synthetic job entries."""
    if vertex is None or not hasattr(vertex, "jobs"):
        return {}
    out: dict[str, dict] = {}
    with getattr(vertex, "_lock", threading.RLock()):
        jobs = list(vertex.jobs.items())
    for name, job in jobs:
        if job.get("_project_id") != project:
            continue
        phases = job.get("_phases") or []
        start = next((float(t) for t, state in phases if state == "JOB_STATE_RUNNING"), None)
        if start is None:
            continue
        end = next((float(t) for t, state in phases if float(t) > start and state != "JOB_STATE_RUNNING"), None)
        pools = (job.get("jobSpec") or {}).get("workerPoolSpecs") or []
        replicas = sum(int((p or {}).get("replicaCount") or 0) for p in pools[:2])
        machine = ((pools[0] or {}).get("machineSpec") or {}).get("machineType", "") if pools else ""
        if replicas:
            out[name.rsplit("/", 1)[-1]] = {"project": project, "replicas": replicas, "machine_type": machine,
                                            "start": start, "end": end, "stragglers": {}}
    return out
