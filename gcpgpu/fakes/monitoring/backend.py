"""Cloud Monitoring state and behaviour: time series (written and synthetic), metric descriptors, dashboards.

Plain Python in, plain Python out: the gRPC front end (service.py) converts to and from the
library's messages. Written points are kept per series; synthetic series for the Compute
backend's VMs (and registered Vertex jobs) are generated on demand for the queried window, so a
64-node cluster costs nothing until someone asks. Errors are core.ApiError with the HTTP code the
REST API would use; the gRPC layer maps them to status codes.
"""

from __future__ import annotations

import copy
import threading
from dataclasses import dataclass, field
from typing import Any

from ..activity import Activity
from ..core import ApiError, Clock, Faults
from . import aggregate, filters, observed
from .catalog import BUILTIN, RESOURCE_LABELS, metric_descriptor, resource_descriptor
from .dashboards import DashboardsMixin
from .paging import invalid_argument, page
from .reading import ReadingMixin
from .synthetic import Knobs, Vm

WRITABLE_PREFIXES = ("custom.googleapis.com/", "workload.googleapis.com/", "external.googleapis.com/")
MAX_SERIES_PER_WRITE = 200


@dataclass
class Series:
    """One stored time series: header plus points, oldest first."""

    project: str
    metric_type: str
    metric_labels: dict[str, str]
    resource_type: str
    resource_labels: dict[str, str]
    kind: str
    value_type: str
    unit: str = ""
    points: list[aggregate.Point] = field(default_factory=list)


def _key(project: str, metric_type: str, metric_labels: dict, resource_type: str, resource_labels: dict) -> tuple:
    return (project, metric_type, tuple(sorted(metric_labels.items())), resource_type,
            tuple(sorted(resource_labels.items())))


class MonitoringBackend(ReadingMixin, DashboardsMixin):
    """The Monitoring API's behaviour over in-memory state."""

    def __init__(self, faults: Faults, clock: Clock, compute: Any | None = None, activity: Activity | None = None,
                 vertex: Any | None = None) -> None:
        self.faults = faults
        self.clock = clock
        self.compute = compute  # its instances' running history: the VMs made-up metrics are for
        # What runs on which VM (written by the job agent): busy minutes look busy, the rest idle.
        self.activity = activity if activity is not None else Activity(clock)
        self.vertex = vertex  # the emulator's Vertex AI backend, when it has one: its jobs get cloudml_job metrics
        self._lock = threading.RLock()
        self.knobs = Knobs()
        # The real API refuses points written more often than this per series (custom metrics: 5 s).
        self.min_point_spacing_s = 5.0
        self.series: dict[tuple, Series] = {}
        # Bumped whenever a series is added or all go: reading.py keeps the series a filter matched (and their
        # points as arrays) until it changes, so 40,000 NIC series are not scanned and matched on every call.
        self.series_version = 0
        self.points_version = 0  # bumped by every point written: what was read of the series stays valid until
        self._stored_matches: dict[tuple, tuple] = {}
        self._stored_arrays: dict[int, tuple] = {}
        self._synthetic: dict[tuple, tuple] = {}  # see reading._matching
        self._made = 0  # entries of _synthetic ever made: their serial numbers
        self._heads: dict[tuple, tuple] = {}  # see reading._aggregate
        self.descriptors: dict[str, dict[str, dict]] = {}  # project -> metric type -> descriptor
        self.dashboards: dict[str, dict[str, dict]] = {}  # project -> name -> dashboard JSON

    # ------------------------------------------------------------------ state and knobs
    def reset(self) -> None:
        with self._lock:
            self.series.clear()
            self.series_version += 1
            self._stored_matches.clear()
            self._stored_arrays.clear()
            self._synthetic.clear()
            self._heads.clear()
            self.descriptors.clear()
            self.dashboards.clear()
            self.knobs = Knobs()
            self.min_point_spacing_s = 5.0

    def straggler(self, instance: str, factor: float = 0.5, gpu: int | None = None) -> None:
        """Make one VM (or one of its GPUs) run at `factor` of its peers' pace in the synthetic metrics."""
        if not 0 <= factor <= 1:
            raise ValueError("factor must be between 0 and 1")
        with self._lock:
            self.knobs.stragglers[instance] = (factor, gpu)

    def clear_stragglers(self) -> None:
        with self._lock:
            self.knobs.stragglers.clear()

    def agents(self, *, ops_agent: bool | None = None, dcgm: bool | None = None,
               instances: list[str] | None = None, interval_s: float | None = None) -> None:
        """Say which agents report GPU metrics (for every VM, or only the named ones), and how often they collect."""
        if interval_s is not None and not 10 <= interval_s <= 3600:
            raise ValueError("the agents' collection interval must be between 10 s and 1 h")
        with self._lock:
            if interval_s is not None:
                self.knobs.agent_interval_s = float(interval_s)
            for which, on in (("ops_agent", ops_agent), ("dcgm", dcgm)):
                if on is None:
                    continue
                if instances is None:
                    setattr(self.knobs, which, on)
                else:
                    for name in instances:
                        self.knobs.agent_overrides.setdefault(name, {})[which] = on

    def synthetic(self, enabled: bool) -> None:
        """Turn the made-up VM and job series on or off (off: only what was written exists)."""
        with self._lock:
            self.knobs.enabled = enabled

    def add_job(self, job_id: str, *, replicas: int = 2, machine_type: str = "a3-highgpu-8g",
                project: str | None = None, start: float | None = None,
                stragglers: dict[str, float] | None = None) -> None:
        """A Vertex AI custom job whose cloudml_job metrics the emulator should make up."""
        with self._lock:
            self.knobs.jobs[str(job_id)] = {
                "project": project, "replicas": replicas, "machine_type": machine_type,
                "start": self.clock.now() if start is None else start, "stragglers": dict(stragglers or {}),
            }

    def configure(self, settings: dict) -> dict:
        """The knobs from JSON (the emulator-only Configure method): straggler, agents, synthetic, job."""
        for s in settings.get("stragglers", []):
            self.straggler(s["instance"], float(s.get("factor", 0.5)), s.get("gpu"))
        if "agents" in settings:
            a = settings["agents"]
            self.agents(ops_agent=a.get("ops_agent"), dcgm=a.get("dcgm"), instances=a.get("instances"),
                        interval_s=a.get("interval_s"))
        if "synthetic" in settings:
            self.synthetic(bool(settings["synthetic"]))
        for j in settings.get("jobs", []):
            self.add_job(j["job_id"], replicas=int(j.get("replicas", 2)), machine_type=j.get("machine_type", "a3-highgpu-8g"),
                         project=j.get("project"))
        if "min_point_spacing_s" in settings:
            self.min_point_spacing_s = float(settings["min_point_spacing_s"])
        return {"stragglers": {k: list(v) for k, v in self.knobs.stragglers.items()}, "ops_agent": self.knobs.ops_agent,
                "dcgm": self.knobs.dcgm, "agent_interval_s": self.knobs.agent_interval_s,
                "synthetic": self.knobs.enabled, "jobs": sorted(self.knobs.jobs)}

    # ------------------------------------------------------------------ what runs, observed
    def _vms(self, project: str, ids: set[str] | None = None) -> list[Vm]:
        return observed.vms(self.compute, self.activity, project, ids) if self.knobs.enabled else []

    def _vertex_jobs(self, project: str) -> dict[str, dict]:
        return observed.vertex_jobs(self.vertex, project)

    # ------------------------------------------------------------------ descriptors
    def _descriptor(self, project: str, metric_type: str) -> dict | None:
        custom = self.descriptors.get(project, {}).get(metric_type)
        return custom if custom is not None else metric_descriptor(project, metric_type)

    def create_metric_descriptor(self, project: str, desc: dict) -> dict:
        mtype = desc.get("type", "")
        if not mtype.startswith(WRITABLE_PREFIXES):
            raise invalid_argument(f"Metric type {mtype!r} is not a user-defined type: it must start with "
                                   + " or ".join(WRITABLE_PREFIXES))
        if desc.get("metricKind") in (None, "METRIC_KIND_UNSPECIFIED") or desc.get("valueType") in (None, "VALUE_TYPE_UNSPECIFIED"):
            raise invalid_argument("A metric descriptor needs metricKind and valueType.")
        stored = {**desc, "name": f"projects/{project}/metricDescriptors/{mtype}"}
        with self._lock:
            self.descriptors.setdefault(project, {})[mtype] = stored
        return copy.deepcopy(stored)

    def get_metric_descriptor(self, project: str, metric_type: str) -> dict:
        desc = self._descriptor(project, metric_type)
        if desc is None:
            raise ApiError(404, "notFound", f"Could not find descriptor for metric '{metric_type}'.")
        return copy.deepcopy(desc)

    def delete_metric_descriptor(self, project: str, metric_type: str) -> None:
        with self._lock:
            if metric_type not in self.descriptors.get(project, {}):
                raise ApiError(404, "notFound", f"Could not find descriptor for metric '{metric_type}'.")
            del self.descriptors[project][metric_type]

    def list_metric_descriptors(self, project: str, flt: str, page_size: int, page_token: str) -> tuple[list[dict], str]:
        node = self._parse(flt) if flt else None
        types = sorted(set(BUILTIN) | set(self.descriptors.get(project, {})))
        out = []
        for t in types:
            d = self._descriptor(project, t)
            if d is None:
                continue
            if node is None or filters.matcher(node, project=project, metric_type=t, metric_labels={},
                                               resource_type="", resource_labels={}):
                out.append(d)
        return page(out, page_size or 1000, page_token, ("descriptors", project, flt))

    def list_resource_descriptors(self, project: str, flt: str, page_size: int, page_token: str) -> tuple[list[dict], str]:
        node = self._parse(flt) if flt else None
        out = [d for t in sorted(RESOURCE_LABELS) if (d := resource_descriptor(project, t)) is not None
               and (node is None or filters.matcher(node, project=project, metric_type="", metric_labels={},
                                                    resource_type=t, resource_labels={}))]
        return page(out, page_size or 1000, page_token, ("resources", project, flt))

    def get_resource_descriptor(self, project: str, resource_type: str) -> dict:
        d = resource_descriptor(project, resource_type)
        if d is None:
            raise ApiError(404, "notFound", f"The monitored resource descriptor {resource_type!r} does not exist.")
        return d

    # ------------------------------------------------------------------ writing
    def create_time_series(self, project: str, series: list[dict]) -> None:
        """Store written points; valid series are written even when others in the request are not."""
        if not series:
            raise invalid_argument("At least one TimeSeries is required.")
        if len(series) > MAX_SERIES_PER_WRITE:
            raise invalid_argument(f"A request may write at most {MAX_SERIES_PER_WRITE} TimeSeries; got {len(series)}.")
        errors: list[str] = []
        with self._lock:
            seen: set[tuple] = set()
            for i, ts in enumerate(series):
                try:
                    key = self._write_one(project, ts, seen)
                    seen.add(key)
                except ApiError as e:
                    errors.append(f"timeSeries[{i}]: {e.message}")
        if errors:
            raise invalid_argument(f"One or more TimeSeries could not be written: {'; '.join(errors)}")

    def _write_one(self, project: str, ts: dict, seen: set[tuple]) -> tuple:
        mtype = ts["metric_type"]
        if not mtype.startswith(WRITABLE_PREFIXES):
            raise invalid_argument(f"The metric type {mtype!r} cannot be written: user-defined metric types start with "
                                   + " or ".join(WRITABLE_PREFIXES))
        rtype = ts["resource_type"]
        # Cloud Monitoring fills the resource's project_id from the request's name when it is missing.
        if "project_id" in RESOURCE_LABELS.get(rtype, ()) and not ts["resource_labels"].get("project_id"):
            ts["resource_labels"] = {**ts["resource_labels"], "project_id": project}
        if rtype not in RESOURCE_LABELS:
            raise invalid_argument(f"Unsupported monitored resource type {rtype!r} for user-defined metrics: "
                                   f"use one of {', '.join(sorted(RESOURCE_LABELS))}.")
        missing = [k for k in RESOURCE_LABELS[rtype] if not ts["resource_labels"].get(k)]
        if missing:
            raise invalid_argument(f"Resource {rtype} is missing required label(s) {', '.join(missing)}.")
        if ts["resource_labels"].get("project_id") not in (None, project):
            raise invalid_argument(f"resource.labels.project_id {ts['resource_labels']['project_id']!r} is not {project!r}.")
        if len(ts["points"]) != 1:
            raise invalid_argument(f"Each TimeSeries must contain exactly one point; {mtype} has {len(ts['points'])}.")
        start, end, value = ts["points"][0]
        key = _key(project, mtype, ts["metric_labels"], rtype, ts["resource_labels"])
        if key in seen:
            raise invalid_argument(f"Field timeSeries: {mtype} appears twice in one request; write one point per series.")
        desc = self._descriptor(project, mtype)
        kind = ts.get("kind") or (desc or {}).get("metricKind") or "GAUGE"
        value_type = ts["value_type"]
        if desc is None:
            # Writing a new custom metric type creates its descriptor, as the real API does.
            desc = {"name": f"projects/{project}/metricDescriptors/{mtype}", "type": mtype, "metricKind": kind,
                    "valueType": value_type, "unit": ts.get("unit", ""), "description": "",
                    "labels": [{"key": k, "valueType": "STRING"} for k in sorted(ts["metric_labels"])]}
            self.descriptors.setdefault(project, {})[mtype] = desc
        if desc["metricKind"] != kind:
            raise invalid_argument(f"The metric kind {kind} of {mtype} does not match its descriptor's {desc['metricKind']}.")
        if desc["valueType"] != value_type:
            raise invalid_argument(f"Value type {value_type} of {mtype} must match its descriptor's {desc['valueType']}.")
        if kind == "GAUGE" and start and start != end:
            raise invalid_argument(f"A GAUGE point's start time must equal its end time ({mtype}).")
        if kind in ("DELTA", "CUMULATIVE") and not start < end:
            raise invalid_argument(f"A {kind} point needs a start time before its end time ({mtype}).")
        stored = self.series.get(key)
        if stored is not None and stored.points:
            last_end = stored.points[-1][1]
            if end <= last_end:
                raise invalid_argument("Points must be written in order. One or more of the points specified had an "
                                       "older start time than the most recent point.")
            if end - last_end < self.min_point_spacing_s:
                raise invalid_argument("One or more points were written more frequently than the maximum sampling "
                                       f"period configured for the metric ({self.min_point_spacing_s:g} s).")
        if stored is None:
            stored = Series(project, mtype, dict(ts["metric_labels"]), rtype, dict(ts["resource_labels"]), kind,
                            value_type, desc.get("unit", ""))
            self.series[key] = stored
            self.series_version += 1
        stored.points.append((start or end, end, value))
        self.points_version += 1
        return key

    def write_points(self, project: str, metric_type: str, points: list[aggregate.Point], *, kind: str = "GAUGE",
                     value_type: str = "DOUBLE", metric_labels: dict | None = None, resource_type: str = "gce_instance",
                     resource_labels: dict | None = None, unit: str = "") -> None:
        """Seed a series directly (tests): any metric type, many points, no rate limit."""
        metric_labels = dict(metric_labels or {})
        resource_labels = dict(resource_labels or {})
        with self._lock:
            key = _key(project, metric_type, metric_labels, resource_type, resource_labels)
            if key not in self.series:
                self.series_version += 1
            s = self.series.setdefault(key, Series(project, metric_type, metric_labels, resource_type, resource_labels,
                                                   kind, value_type, unit))
            s.points = sorted([*s.points, *points], key=lambda p: p[1])
            self.points_version += 1
