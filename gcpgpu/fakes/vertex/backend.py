"""Vertex AI custom jobs (aiplatform v1 JobService) over in-memory state, as REST-style JSON dicts.

The front ends (rest.py, service.py for gRPC) turn wire messages into the camelCase JSON the REST
API carries, with enum values by name; this backend validates and keeps jobs in that shape.

What is real and what is not:
  * validation follows the real service's rules (pool 0 has exactly one replica, every pool a
    machine and an image, accelerator type and count that fit the machine type, reservations only
    with the standard strategy, gs:// output directories) and answers INVALID_ARGUMENT with the
    field named, before a job exists;
  * states go QUEUED -> PENDING -> RUNNING -> SUCCEEDED / FAILED / CANCELLING -> CANCELLED;
  * a job whose replicas run the bundled trainer (the gcpgpu-trainer image with trainer
    arguments, or a `python -m gcpgpu.trainer` command) really runs: one local process per
    replica, with CLUSTER_SPEC on loopback ports and AIP_* output directories under a local
    folder standing in for base_output_directory; its state, exit code and logs are the trainer's;
  * any other job is simulated: it runs for `timings["simulated_run_s"]` and succeeds, and says
    so in its first log line and in the label gcpgpu-emulator=simulated.
"""

from __future__ import annotations

import base64
import importlib.util
import json
import re
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import yaml

from ..core import Clock, IdSource, parse_rfc3339, stable_number
from ..jobs import filters
from ..jobs.runner import LogLine, ReplicaSpec, Run, Runner, trainer_argv

TERMINAL = ("JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED", "JOB_STATE_CANCELLED", "JOB_STATE_EXPIRED",
            "JOB_STATE_PARTIALLY_SUCCEEDED")
STATES = ("JOB_STATE_QUEUED", "JOB_STATE_PENDING", "JOB_STATE_RUNNING", "JOB_STATE_SUCCEEDED",
          "JOB_STATE_FAILED", "JOB_STATE_CANCELLING", "JOB_STATE_CANCELLED", "JOB_STATE_PAUSED",
          "JOB_STATE_EXPIRED", "JOB_STATE_UPDATING", "JOB_STATE_PARTIALLY_SUCCEEDED", "JOB_STATE_UNSPECIFIED")
STRATEGIES = ("STRATEGY_UNSPECIFIED", "ON_DEMAND", "LOW_COST", "STANDARD", "SPOT", "FLEX_START")
RESERVATION_KEY = "compute.googleapis.com/reservation-name"
EMULATOR_LABEL = "gcpgpu-emulator"
# N1 machines take these GPUs, 1, 2, 4 or 8 of them; A2/A3/A4/G2 come with theirs (from the catalog).
N1_ACCELERATORS = ("NVIDIA_TESLA_K80", "NVIDIA_TESLA_P100", "NVIDIA_TESLA_V100", "NVIDIA_TESLA_P4", "NVIDIA_TESLA_T4")
CPU_MACHINE = re.compile(r"^(n1|n2|n2d|n4|e2|c2|c2d|c3|m1)-(standard|highmem|highcpu|ultramem|megamem)-\d+$")
PROJECT_ID = re.compile(r"^[a-z][-a-z0-9]{4,28}[a-z0-9]$|^\d{6,20}$")
MAX_POOLS = 4
# Seconds a job spends in each phase; tests shorten them. pending_s is the wait before a local run starts.
DEFAULT_TIMINGS = {"queued_s": 0.1, "pending_s": 0.4, "simulated_run_s": 3.0, "cancel_s": 0.3, "delete_s": 0.2}
DEFAULT_PAGE = 100
MAX_PAGE = 1000

# google.rpc.Code numbers a job's `error` carries.
CODE_CANCELLED = 1
CODE_INVALID_ARGUMENT = 3


class VertexError(Exception):
    """An error as Vertex AI returns it: a canonical status, a message, optional field violations."""

    HTTP = {"INVALID_ARGUMENT": 400, "FAILED_PRECONDITION": 400, "OUT_OF_RANGE": 400, "NOT_FOUND": 404,
            "ALREADY_EXISTS": 409, "PERMISSION_DENIED": 403, "RESOURCE_EXHAUSTED": 429, "UNIMPLEMENTED": 501,
            "INTERNAL": 500, "UNAVAILABLE": 503, "DEADLINE_EXCEEDED": 504, "UNAUTHENTICATED": 401}

    def __init__(self, status: str, message: str, violations: list[tuple[str, str]] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.violations = violations or []

    @property
    def http(self) -> int:
        return self.HTTP.get(self.status, 500)

    def to_json(self) -> dict:
        """The REST error body Google's newer APIs send (no compute-style `errors` list)."""
        body: dict[str, Any] = {"code": self.http, "message": self.message, "status": self.status}
        if self.violations:
            body["details"] = [{
                "@type": "type.googleapis.com/google.rpc.BadRequest",
                "fieldViolations": [{"field": f, "description": d} for f, d in self.violations],
            }]
        return {"error": body}


def invalid_argument(violations: list[tuple[str, str]]) -> VertexError:
    # The real service lists every problem in one message, numbered, tab-separated.
    listed = "\t".join(f"{i}.Field: {f}; Message: {d}" for i, (f, d) in enumerate(violations, 1))
    return VertexError("INVALID_ARGUMENT", f"List of found errors:\t{listed}\t", violations)


@dataclass(frozen=True)
class GpuMachine:
    name: str
    vertex_accelerator: str | None  # None: Vertex AI does not offer this machine type
    gpu_count: int


@cache
def gpu_machines() -> dict[str, GpuMachine]:
    """GPU machine types and their Vertex accelerator, read from the catalog data (not the tool's code)."""
    raw = yaml.safe_load(resources.files("gcpgpu").joinpath("data/machines.yaml").read_text())
    out = {}
    for name, entry in raw["machine_types"].items():
        family = raw["families"].get(entry["family"], {})
        offered = entry.get("vertex", family.get("vertex", True))
        accel = raw["gpus"][entry["gpu"]].get("vertex_accelerator") if offered else None
        out[name] = GpuMachine(name, accel, int(entry["gpu_count"]))
    return out


def project_number(project: str) -> str:
    """The project number the emulator gives a project id (the same as the Compute emulator's)."""
    return project if project.isdigit() else str(100000000000 + stable_number(project, 899999999999))


def _seconds(value: Any, field: str, problems: list[tuple[str, str]]) -> float | None:
    """A google.protobuf.Duration in JSON ("3600s", "1.5s") as seconds."""
    if value in (None, ""):
        return None
    match = re.fullmatch(r"(\d+(?:\.\d{1,9})?)s", str(value))
    if not match:
        problems.append((field, f"Invalid duration {value!r}; expected a number of seconds like \"3600s\"."))
        return None
    return float(match.group(1))


def rfc3339(ts: float) -> str:
    """protobuf Timestamp JSON: UTC with nanoseconds."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts)) + f".{int((ts % 1) * 1e9):09d}Z"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --------------------------------------------------------------------------------------- validation


def validate(job: dict, location: str, regions: dict[str, list[str]]) -> None:
    """Refuse a CustomJob the real service would refuse (INVALID_ARGUMENT naming every bad field)."""
    problems: list[tuple[str, str]] = []
    name = job.get("displayName") or ""
    if not name:
        problems.append(("custom_job.display_name", "Required field is not set."))
    elif len(name) > 128:
        problems.append(("custom_job.display_name", "Display name must be at most 128 characters."))
    spec = job.get("jobSpec") or {}
    pools = spec.get("workerPoolSpecs") or []
    if not pools:
        problems.append(("custom_job.job_spec.worker_pool_specs", "At least one worker pool spec is required."))
    if len(pools) > MAX_POOLS:
        problems.append(("custom_job.job_spec.worker_pool_specs", f"At most {MAX_POOLS} worker pools are allowed."))
    for i, pool in enumerate(pools):
        _check_pool(i, pool or {}, location, regions, problems)
    sched = spec.get("scheduling") or {}
    strategy = sched.get("strategy") or "STRATEGY_UNSPECIFIED"
    if strategy not in STRATEGIES:
        problems.append(("custom_job.job_spec.scheduling.strategy", f"Unknown strategy {strategy!r}."))
    _seconds(sched.get("timeout"), "custom_job.job_spec.scheduling.timeout", problems)
    wait = _seconds(sched.get("maxWaitDuration"), "custom_job.job_spec.scheduling.max_wait_duration", problems)
    if wait is not None and strategy != "FLEX_START":
        problems.append(("custom_job.job_spec.scheduling.max_wait_duration",
                         "max_wait_duration is only supported with the FLEX_START strategy."))
    if strategy in ("SPOT", "FLEX_START"):
        for i, pool in enumerate(pools):
            aff = ((pool or {}).get("machineSpec") or {}).get("reservationAffinity") or {}
            if aff.get("reservationAffinityType") in ("ANY_RESERVATION", "SPECIFIC_RESERVATION"):
                problems.append((f"custom_job.job_spec.worker_pool_specs[{i}].machine_spec.reservation_affinity",
                                 f"Reservations cannot be used with the {strategy} scheduling strategy; use "
                                 "STANDARD or remove the reservation affinity."))
    out = (spec.get("baseOutputDirectory") or {}).get("outputUriPrefix")
    if out is not None and not re.match(r"^gs://[a-z0-9][a-z0-9._-]{1,220}[a-z0-9](/.*)?$", out):
        problems.append(("custom_job.job_spec.base_output_directory.output_uri_prefix",
                         f"{out!r} is not a Cloud Storage URI (gs://BUCKET/PATH)."))
    for key, value in (job.get("labels") or {}).items():
        if not re.match(r"^[a-z][a-z0-9_-]{0,62}$", key) or not re.match(r"^[a-z0-9_-]{0,63}$", str(value)):
            problems.append((f"custom_job.labels[{key}]", "Label keys and values must be lowercase letters, "
                                                          "digits, '_' or '-', at most 63 characters."))
    if problems:
        raise invalid_argument(problems)


def _check_pool(i: int, pool: dict, location: str, regions: dict[str, list[str]],
                problems: list[tuple[str, str]]) -> None:
    field = f"custom_job.job_spec.worker_pool_specs[{i}]"
    empty = not pool.get("machineSpec") and not pool.get("containerSpec") and not pool.get("pythonPackageSpec")
    replicas = int(pool.get("replicaCount") or 0)
    if empty and i > 0:
        return  # an empty placeholder pool (e.g. no workers, but a reduction server in pool 2)
    if i == 0 and replicas != 1:
        problems.append((f"{field}.replica_count", f"The first worker pool (the chief) must have exactly 1 "
                                                   f"replica, got {replicas}."))
    elif replicas < 1:
        problems.append((f"{field}.replica_count", "replica_count must be at least 1."))
    machine = pool.get("machineSpec") or {}
    mt = machine.get("machineType") or ""
    if not mt:
        problems.append((f"{field}.machine_spec.machine_type", "Required field is not set."))
    accel = machine.get("acceleratorType") or "ACCELERATOR_TYPE_UNSPECIFIED"
    count = int(machine.get("acceleratorCount") or 0)
    if mt:
        _check_accelerator(f"{field}.machine_spec", mt, accel, count, problems)
    aff = machine.get("reservationAffinity") or {}
    kind = aff.get("reservationAffinityType") or "TYPE_UNSPECIFIED"
    if kind == "SPECIFIC_RESERVATION":
        values = list(aff.get("values") or [])
        if aff.get("key") != RESERVATION_KEY:
            problems.append((f"{field}.machine_spec.reservation_affinity.key",
                             f"Must be {RESERVATION_KEY!r} for SPECIFIC_RESERVATION."))
        if len(values) != 1:
            problems.append((f"{field}.machine_spec.reservation_affinity.values",
                             "Exactly one reservation name is required for SPECIFIC_RESERVATION."))
        for value in values:
            match = re.fullmatch(r"projects/[^/]+/zones/([a-z0-9-]+)/reservations/[a-z]([-a-z0-9]*[a-z0-9])?", value)
            if not match:
                problems.append((f"{field}.machine_spec.reservation_affinity.values",
                                 f"{value!r} is not a full reservation name "
                                 "(projects/PROJECT/zones/ZONE/reservations/NAME)."))
            elif match.group(1) not in regions.get(location, []):
                problems.append((f"{field}.machine_spec.reservation_affinity.values",
                                 f"Reservation zone {match.group(1)} is not in the job's region {location}."))
    elif kind in ("ANY_RESERVATION", "NO_RESERVATION") and (aff.get("key") or aff.get("values")):
        problems.append((f"{field}.machine_spec.reservation_affinity",
                         f"key and values are only allowed with SPECIFIC_RESERVATION, not {kind}."))
    container = pool.get("containerSpec")
    package = pool.get("pythonPackageSpec")
    if not container and not package:
        problems.append((f"{field}.container_spec", "One of container_spec or python_package_spec is required."))
    elif container:
        image = container.get("imageUri") or ""
        if not image:
            problems.append((f"{field}.container_spec.image_uri", "Required field is not set."))
        elif re.search(r"\s", image):
            problems.append((f"{field}.container_spec.image_uri", f"{image!r} is not a container image URI."))
        for j, env in enumerate(container.get("env") or []):
            if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", env.get("name") or ""):
                problems.append((f"{field}.container_spec.env[{j}].name",
                                 f"{env.get('name')!r} is not a valid environment variable name."))


def _check_accelerator(field: str, mt: str, accel: str, count: int, problems: list[tuple[str, str]]) -> None:
    gpu = gpu_machines().get(mt)
    unspecified = accel == "ACCELERATOR_TYPE_UNSPECIFIED"
    if gpu is not None:
        if gpu.vertex_accelerator is None:
            problems.append((f"{field}.machine_type", f"Machine type \"{mt}\" is not supported by Vertex AI training."))
        elif unspecified or accel != gpu.vertex_accelerator or count != gpu.gpu_count:
            shown = "none" if unspecified else f"\"{accel}\" with count {count}"
            problems.append((f"{field}.accelerator_type",
                             f"Accelerator {shown} is not supported for machine type \"{mt}\"; it takes "
                             f"\"{gpu.vertex_accelerator}\" with accelerator_count {gpu.gpu_count}."))
        return
    if not CPU_MACHINE.match(mt):
        problems.append((f"{field}.machine_type", f"Machine type \"{mt}\" is not supported."))
        return
    if unspecified:
        if count:
            problems.append((f"{field}.accelerator_type", "accelerator_count is set but accelerator_type is not."))
        return
    if not mt.startswith("n1-") or accel not in N1_ACCELERATORS:
        problems.append((f"{field}.accelerator_type",
                         f"Accelerator \"{accel}\" is not supported for machine type \"{mt}\"."))
    elif count not in (1, 2, 4, 8):
        problems.append((f"{field}.accelerator_count",
                         f"Accelerator count {count} is not supported for \"{accel}\"; use 1, 2, 4 or 8."))


# --------------------------------------------------------------------------------------- list filters


_FIELDS = ("display_name", "state", "create_time", "start_time", "end_time", "update_time", "labels")


def parse_filter(text: str) -> Callable[[dict], bool]:
    """ListCustomJobs' filter (AIP-160): display_name, state, create_time/start_time/end_time/
    update_time and labels.KEY, with = != < <= > >= and : (has; * is a wildcard), AND, OR, NOT."""

    def compare(path: list[str], op: str, value: str) -> Callable[[dict], bool]:
        root = path[0]
        if root not in _FIELDS or (root == "labels") != (len(path) == 2) or len(path) > 2:
            raise invalid_filter(text, f"unsupported field {'.'.join(path)!r} (supported: display_name, state, "
                                       "create_time, start_time, end_time, update_time, labels.KEY)")
        return _compare(".".join(path), op, value, text)

    try:
        return filters.parse(text, compare)
    except filters.FilterError as e:
        raise invalid_filter(text, str(e)) from None


def invalid_filter(text: str, why: str) -> VertexError:
    return VertexError("INVALID_ARGUMENT", f"Invalid filter {text!r}: {why}.", [("filter", why)])


def _compare(field: str, op: str, value: str, text: str) -> Callable[[dict], bool]:
    import fnmatch

    if field.endswith("_time"):
        if op == ":":
            raise invalid_filter(text, f"{field} does not support ':'")
        try:
            bound = parse_rfc3339(value)
        except ValueError:
            raise invalid_filter(text, f"{field} needs an RFC 3339 time like \"2024-05-18T00:00:00Z\"") from None
        key = "".join(w.capitalize() if i else w for i, w in enumerate(field.split("_")))

        def by_time(job: dict) -> bool:
            got = job.get(key)
            if not got:
                return op == "!="
            t = parse_rfc3339(got)
            return {"=": t == bound, "!=": t != bound, "<": t < bound, "<=": t <= bound, ">": t > bound,
                    ">=": t >= bound}[op]

        return by_time
    if field == "state":
        if op not in ("=", "!="):
            raise invalid_filter(text, "state supports only = and !=")
        if value not in STATES:
            raise invalid_filter(text, f"{value!r} is not a JobState (e.g. JOB_STATE_RUNNING)")
        return lambda job: (job.get("state") == value) == (op == "=")
    if op not in ("=", "!=", ":"):
        raise invalid_filter(text, f"{field} supports only =, != and :")

    def get(job: dict) -> str | None:
        if field == "display_name":
            return job.get("displayName", "")
        return (job.get("labels") or {}).get(field.split(".", 1)[1])

    def match(job: dict) -> bool:
        got = get(job)
        if op == ":":
            if got is None:
                return False
            if value == "*":
                return True
            return fnmatch.fnmatchcase(got, value) if "*" in value else value in got
        return (got == value) == (op == "=")

    return match


# --------------------------------------------------------------------------------------- the backend


@dataclass
class Operation:
    name: str
    kind: str  # "delete"
    target: str
    created: float
    done_at: float


class VertexBackend:
    """Custom jobs per project and location, their state machine, and the local runs behind them."""

    def __init__(self, regions: dict[str, list[str]], clock: Clock, ids: IdSource, runner: Runner,
                 compute: Any = None) -> None:
        self.regions = regions
        self.clock = clock
        self.ids = ids
        self.runner = runner
        # The Compute emulator, to check that a reservation a job names exists; None: don't check.
        self.compute = compute
        self.timings = dict(DEFAULT_TIMINGS)
        self.jobs: dict[str, dict] = {}  # full name (project number) -> job
        self.operations: dict[str, Operation] = {}
        self.project_ids: dict[str, str] = {}  # number -> id, as first seen
        self._lock = threading.RLock()

    def reset(self) -> None:
        with self._lock:
            self.jobs.clear()
            self.operations.clear()
            self.timings = dict(DEFAULT_TIMINGS)
        # The runner is shared with cluster jobs and reset by its owner.

    # -- names -----------------------------------------------------------------------------
    def _parent(self, parent: str) -> tuple[str, str]:
        match = re.fullmatch(r"projects/([^/]+)/locations/([^/]+)", parent or "")
        if not match:
            raise VertexError("INVALID_ARGUMENT", f"Invalid parent {parent!r}; expected projects/PROJECT/locations/LOCATION.",
                              [("parent", "expected projects/PROJECT/locations/LOCATION")])
        project, location = match.groups()
        self._check_project(project)
        if location not in self.regions:
            raise VertexError("INVALID_ARGUMENT", f"Location {location!r} is not a region Vertex AI training "
                                                  f"runs in here; known: {', '.join(sorted(self.regions))}.",
                              [("parent", f"unknown location {location}")])
        return project, location

    def _check_project(self, project: str) -> None:
        if not PROJECT_ID.match(project):
            raise VertexError("INVALID_ARGUMENT", f"Invalid project {project!r}: not a project id or number.",
                              [("name", "invalid project")])
        if not project.isdigit():
            self.project_ids.setdefault(project_number(project), project)

    def _key(self, name: str) -> str:
        match = re.fullmatch(r"projects/([^/]+)/locations/([^/]+)/customJobs/([^/]+)", name or "")
        if not match:
            raise VertexError("INVALID_ARGUMENT", f"Invalid CustomJob name {name!r}; expected "
                                                  "projects/PROJECT/locations/LOCATION/customJobs/ID.",
                              [("name", "expected projects/PROJECT/locations/LOCATION/customJobs/ID")])
        project, location, job_id = match.groups()
        self._check_project(project)
        return f"projects/{project_number(project)}/locations/{location}/customJobs/{job_id}"

    def _job(self, name: str) -> dict:
        key = self._key(name)
        job = self.jobs.get(key)
        if job is None or (job.get("_deleted_at") is not None and job["_deleted_at"] <= self.clock.now()):
            raise VertexError("NOT_FOUND", f"The CustomJob {name} does not exist.")
        return job

    # -- state, derived from phases ----------------------------------------------------------
    def state(self, job: dict) -> str:
        now = self.clock.now()
        state = job["_phases"][0][1]
        for t, s in job["_phases"]:
            if t <= now:
                state = s
        return state

    def _phase_time(self, job: dict, wanted: tuple[str, ...]) -> float | None:
        now = self.clock.now()
        return next((t for t, s in job["_phases"] if s in wanted and t <= now), None)

    def render(self, job: dict) -> dict:
        out = {k: v for k, v in job.items() if not k.startswith("_")}
        state = self.state(job)
        out["state"] = state
        now = self.clock.now()
        started = self._phase_time(job, ("JOB_STATE_RUNNING",))
        ended = self._phase_time(job, TERMINAL)
        if started is not None:
            out["startTime"] = rfc3339(started)
        if ended is not None:
            out["endTime"] = rfc3339(ended)
        out["updateTime"] = rfc3339(max(t for t, _ in job["_phases"] if t <= now) if any(
            t <= now for t, _ in job["_phases"]) else job["_t0"])
        if state in ("JOB_STATE_FAILED", "JOB_STATE_CANCELLED") and job.get("_error"):
            out["error"] = dict(job["_error"])
        return out

    # -- CRUD ------------------------------------------------------------------------------
    def create(self, parent: str, body: dict) -> dict:
        project, location = self._parent(parent)
        validate(body, location, self.regions)
        self._check_reservations(body)
        with self._lock:
            job_id = self.ids.next()
            number = project_number(project)
            name = f"projects/{number}/locations/{location}/customJobs/{job_id}"
            now = self.clock.now()
            job = {k: v for k, v in body.items() if k not in ("name", "state", "createTime", "startTime",
                                                                 "endTime", "updateTime", "error")}
            job["name"] = name
            job["createTime"] = rfc3339(now)
            job["_t0"] = now
            job["_project_id"] = self.project_ids.get(number, project)
            q, p = self.timings["queued_s"], self.timings["pending_s"]
            job["_phases"] = [[now, "JOB_STATE_QUEUED"], [now + q, "JOB_STATE_PENDING"]]
            self.jobs[name] = job
            plan = local_plan(job)
            describe = self._describer(job)
            if isinstance(plan, str):
                run_s = self.timings["simulated_run_s"]
                job["_phases"] += [[now + q + p, "JOB_STATE_RUNNING"], [now + q + p + run_s, "JOB_STATE_SUCCEEDED"]]
                job["labels"] = {**(job.get("labels") or {}), EMULATOR_LABEL: "simulated"}
                run = self.runner.record(name, describe)
                run.log("", "stdout", f"gcpgpu emulator: this job is simulated, nothing runs: {plan}. It will "
                                      f"report RUNNING, then SUCCEEDED after {run_s:g} s.")
            else:
                job["labels"] = {**(job.get("labels") or {}), EMULATOR_LABEL: "local-run"}
                replicas = self._replicas(job, plan)
                run = self.runner.start(name, replicas, delay_s=q + p, on_change=self._on_run_change(name),
                                        describe=describe)
                gpus = plan.gpus_per_replica
                run.log("", "stdout", f"gcpgpu emulator: running this job locally: {len(replicas)} replica "
                                      f"process(es) on 127.0.0.1, CPU only (the real job would have {gpus} GPU(s) "
                                      f"per replica); outputs under {run.workdir / 'gcs'} stand in for gs://.")
            return self.render(job)

    def reservation_exists(self, name: str) -> bool:
        """Whether the Compute emulator holds the reservation projects/P/zones/Z/reservations/R."""
        _, project, _, zone, _, res = name.split("/")
        candidates = [project] if not project.isdigit() else [
            p for p in list(self.compute.projects) if project_number(p) == project]
        for p in candidates:
            try:
                self.compute.get(p, f"zones/{zone}/reservations", res)
                return True
            except Exception:  # the Compute emulator's notFound
                continue
        return False

    def _check_reservations(self, body: dict) -> None:
        if self.compute is None:
            return
        for i, pool in enumerate((body.get("jobSpec") or {}).get("workerPoolSpecs") or []):
            aff = ((pool or {}).get("machineSpec") or {}).get("reservationAffinity") or {}
            if aff.get("reservationAffinityType") == "SPECIFIC_RESERVATION":
                for value in aff.get("values") or []:
                    if not self.reservation_exists(value):
                        raise invalid_argument([(
                            f"custom_job.job_spec.worker_pool_specs[{i}].machine_spec.reservation_affinity.values",
                            f"Reservation {value} does not exist.")])

    def get(self, name: str) -> dict:
        with self._lock:
            return self.render(self._job(name))

    def list(self, parent: str, page_size: int = 0, page_token: str = "", flt: str = "") -> tuple[list[dict], str]:
        project, location = self._parent(parent)
        pred = parse_filter(flt)
        if page_size < 0:
            raise VertexError("INVALID_ARGUMENT", "page_size must not be negative.", [("page_size", "negative")])
        size = min(page_size or DEFAULT_PAGE, MAX_PAGE)
        start = 0
        if page_token:
            try:
                token = json.loads(base64.urlsafe_b64decode(page_token.encode()))
                start = int(token["o"])
                same = token["f"] == flt
            except Exception:
                same = False
            if not same:
                raise VertexError("INVALID_ARGUMENT", "Invalid page_token: it does not belong to this request.",
                                  [("page_token", "invalid")])
        prefix = f"projects/{project_number(project)}/locations/{location}/customJobs/"
        with self._lock:
            now = self.clock.now()
            mine = [self.render(j) for n, j in self.jobs.items() if n.startswith(prefix)
                    and not (j.get("_deleted_at") is not None and j["_deleted_at"] <= now)]
        mine.sort(key=lambda j: (j["createTime"], int(j["name"].rsplit("/", 1)[1])), reverse=True)  # newest first
        matched = [j for j in mine if pred(j)]
        page = matched[start:start + size]
        nxt = ""
        if start + size < len(matched):
            nxt = base64.urlsafe_b64encode(json.dumps({"o": start + size, "f": flt}).encode()).decode()
        return page, nxt

    def cancel(self, name: str) -> None:
        with self._lock:
            job = self._job(name)
            state = self.state(job)
            if state in TERMINAL:
                raise VertexError("FAILED_PRECONDITION", f"Cannot cancel CustomJob {job['name']}: it is already "
                                                         f"in state {state}.")
            if state == "JOB_STATE_CANCELLING":
                return
            now = self.clock.now()
            job["_phases"] = [ph for ph in job["_phases"] if ph[0] <= now]
            job["_phases"].append([now, "JOB_STATE_CANCELLING"])
            job["_error"] = {"code": CODE_CANCELLED, "message": "CANCELED"}
            run = self.runner.get(job["name"])
            if run is not None and run.replicas:
                self.runner.cancel(job["name"])  # CANCELLED once its processes are gone (_on_run_change)
            else:
                job["_phases"].append([now + self.timings["cancel_s"], "JOB_STATE_CANCELLED"])

    def delete(self, name: str) -> Operation:
        with self._lock:
            job = self._job(name)
            state = self.state(job)
            if state not in TERMINAL:
                raise VertexError("FAILED_PRECONDITION", f"CustomJob {job['name']} is in state {state}; only a "
                                                         "finished job can be deleted: cancel it first.")
            now = self.clock.now()
            job["_deleted_at"] = now + self.timings["delete_s"]
            base = job["name"].rsplit("/customJobs/", 1)[0]
            op = Operation(f"{base}/operations/{self.ids.next()}", "delete", job["name"], now, job["_deleted_at"])
            self.operations[op.name] = op
            return op

    def operation(self, name: str) -> tuple[Operation, bool]:
        match = re.fullmatch(r"projects/([^/]+)/locations/([^/]+)/(?:customJobs/[^/]+/)?operations/([^/]+)", name or "")
        key = None
        if match:
            project, location, op_id = match.groups()
            key = f"projects/{project_number(project)}/locations/{location}/operations/{op_id}"
        with self._lock:
            op = self.operations.get(key or "")
        if op is None:
            raise VertexError("NOT_FOUND", f"Operation {name} does not exist.")
        return op, self.clock.now() >= op.done_at

    def owns_operation(self, name: str) -> bool:
        try:
            self.operation(name)
            return True
        except VertexError:
            return False

    # -- local runs -------------------------------------------------------------------------
    def _replicas(self, job: dict, plan: LocalPlan) -> list[ReplicaSpec]:
        pools = plan.pools
        hosts = {f"workerpool{i}": [f"127.0.0.1:{_free_port()}" for _ in range(n)] for i, n in enumerate(pools) if n}
        job_id = job["name"].rsplit("/", 1)[1]
        run_dir = self.runner.workdir(job["name"])
        out = (((job.get("jobSpec") or {}).get("baseOutputDirectory") or {}).get("outputUriPrefix")
               or f"gs://emulator-vertex-{job_id}")
        local_base = run_dir / "gcs" / out[len("gs://"):].strip("/")
        replicas = []
        for pool, count in enumerate(pools):
            for index in range(count):
                task = f"workerpool{pool}-{index}"
                env = dict(plan.env[pool])
                env.update({
                    "CLUSTER_SPEC": json.dumps({"cluster": hosts, "environment": "cloud",
                                                "task": {"type": f"workerpool{pool}", "index": index, "trial": ""},
                                                "job": json.dumps({"job_id": job_id})}),
                    "CLOUD_ML_JOB_ID": job_id,
                    "AIP_MODEL_DIR": f"{local_base}/model/",
                    "AIP_CHECKPOINT_DIR": f"{local_base}/checkpoints/",
                    "AIP_TENSORBOARD_LOG_DIR": f"{local_base}/logs/",
                    # One process per replica on this CPU-only machine; the trainer's own opt-in to CPU.
                    "GCPGPU_NPROC_PER_NODE": "1",
                    "GCPGPU_TRAINER_ALLOW_CPU": "1",
                })
                replicas.append(ReplicaSpec(task, plan.argv[pool], env))
        for sub in ("model", "checkpoints", "logs"):
            (local_base / sub).mkdir(parents=True, exist_ok=True)
        return replicas

    def _on_run_change(self, name: str) -> Callable[[Run], None]:
        def changed(run: Run) -> None:
            with self._lock:
                job = self.jobs.get(name)
                if job is None:
                    return
                now = self.clock.now()
                if run.state == "running" and self.state(job) != "JOB_STATE_CANCELLING":
                    job["_phases"] = [ph for ph in job["_phases"] if ph[0] <= now] + [[now, "JOB_STATE_RUNNING"]]
                elif run.state == "succeeded":
                    job["_phases"].append([now, "JOB_STATE_SUCCEEDED"])
                elif run.state == "cancelled":
                    job["_phases"].append([now, "JOB_STATE_CANCELLED"])
                elif run.state == "failed":
                    task, code, last = run.failure or ("?", -1, "")
                    said = f" Last error line: {last}" if last else ""
                    job["_error"] = {"code": CODE_INVALID_ARGUMENT,
                                     "message": f"The replica {task} exited with a non-zero status of {code}.{said}"}
                    job["_phases"].append([now, "JOB_STATE_FAILED"])

        return changed

    def _describer(self, job: dict) -> Callable[[LogLine], dict]:
        """Cloud Logging entries as Vertex AI writes them: resource ml_job, one log per replica, stderr as ERROR."""
        project = job["_project_id"]
        job_id = job["name"].rsplit("/", 1)[1]

        def describe(line: LogLine) -> dict:
            labels = {"job_id": job_id, "project_id": project, "task_name": line.task or "service"}
            log = line.task or f"ml.googleapis.com%2F{job_id}"
            return {
                "logName": f"projects/{project}/logs/{log}",
                "resource": {"type": "ml_job", "labels": labels},
                "labels": {"ml.googleapis.com/job_id/log_area": "user" if line.task else "service",
                           **({"ml.googleapis.com/task_name": line.task} if line.task else {})},
                "jsonPayload": {"message": line.text, **({"attrs": {"tag": line.task}} if line.task else {})},
                "severity": "ERROR" if line.stream == "stderr" else "INFO",
            }

        return describe


@dataclass
class LocalPlan:
    """How the emulator runs a job here: per pool, the argv, the container env, the replica count."""

    pools: list[int]
    argv: list[list[str]]
    env: list[dict[str, str]]
    gpus_per_replica: int


def local_plan(job: dict) -> LocalPlan | str:
    """The local processes for a job, or why it cannot run here (then it is simulated)."""
    pools = (job.get("jobSpec") or {}).get("workerPoolSpecs") or []
    counts, argvs, envs = [], [], []
    gpus = 0
    for i, pool in enumerate(pools[:2]):
        pool = pool or {}
        count = int(pool.get("replicaCount") or 0) if (pool.get("containerSpec") or pool.get("machineSpec")) else 0
        counts.append(count)
        if not count:
            argvs.append([])
            envs.append({})
            continue
        container = pool.get("containerSpec")
        if not container:
            return f"worker pool {i} uses a Python package, which the emulator cannot install"
        argv = trainer_argv(container.get("imageUri") or "", list(container.get("command") or []),
                            list(container.get("args") or []))
        if argv is None:
            return (f"worker pool {i} runs image {container.get('imageUri')!r}"
                    + (f" with command {container.get('command')!r}" if container.get("command") else "")
                    + ", which is not the bundled trainer")
        argvs.append(argv)
        envs.append({e["name"]: str(e.get("value", "")) for e in container.get("env") or []})
        gpus = max(gpus, int((pool.get("machineSpec") or {}).get("acceleratorCount") or 0))
    if any(p for p in pools[2:]):
        return "worker pools 2 and 3 (parameter or reduction servers) are not run by the emulator"
    if importlib.util.find_spec("torch") is None:
        return "torch is not installed where the emulator runs"
    return LocalPlan(counts, argvs, envs, gpus)
