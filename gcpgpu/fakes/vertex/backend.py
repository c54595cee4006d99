"""Vertex AI custom jobs (aiplatform v1 JobService): their state machine over in-memory state.

The front ends (rest.py, service.py for gRPC) turn wire messages into the camelCase JSON the REST
API carries, with enum values by name; this backend keeps jobs in that shape. A job is checked
first (validation.py), then goes QUEUED -> PENDING -> RUNNING -> SUCCEEDED / FAILED /
CANCELLING -> CANCELLED, its state derived from timed phases when read.

A job that runs the bundled trainer really runs as local processes (local_run.py); its state, exit
code and logs are the trainer's. Any other job is simulated: it runs for
`timings["simulated_run_s"]` and succeeds, and says so in its first log line and in the label
gcpgpu-emulator=simulated.
"""

from __future__ import annotations

import base64
import json
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..activity import step_in
from ..core import Clock, IdSource, proto_timestamp, stable_number
from ..host.runner import MetricsTarget, Run, Runner
from ..host.storage import PathRefused
from . import local_run
from .errors import VertexError, invalid_argument
from .list_filter import parse_filter
from .validation import validate

TERMINAL = ("JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED", "JOB_STATE_CANCELLED", "JOB_STATE_EXPIRED",
            "JOB_STATE_PARTIALLY_SUCCEEDED")
EMULATOR_LABEL = "gcpgpu-emulator"
PROJECT_ID = re.compile(r"^[a-z][-a-z0-9]{4,28}[a-z0-9]$|^\d{6,20}$")
# Seconds a job spends in each phase; tests shorten them. pending_s is the wait before a local run starts.
DEFAULT_TIMINGS = {"queued_s": 0.1, "pending_s": 0.4, "simulated_run_s": 3.0, "cancel_s": 0.3, "delete_s": 0.2}
DEFAULT_PAGE = 100
MAX_PAGE = 1000

# google.rpc.Code numbers a job's `error` carries.
CODE_CANCELLED = 1
CODE_INVALID_ARGUMENT = 3
CODE_FAILED_PRECONDITION = 9


def project_number(project: str) -> str:
    """The project number the emulator gives a project id (the same as the Compute emulator's)."""
    return project if project.isdigit() else str(100000000000 + stable_number(project, 899999999999))


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
                 compute: Any = None, storage: Any = None, user: Any = None, activity: Any = None,
                 nfs: Callable[[str, str], tuple[str, ...] | None] | None = None) -> None:
        self.regions = regions
        # The world's ledger of what runs (fakes/activity.py): a local run's steps, which its metrics follow.
        self.activity = activity
        self.clock = clock
        self.ids = ids
        self.runner = runner
        # The emulator's storage folder (host/storage.Storage): a job's gs:// output is objects there.
        self.storage = storage
        # The Compute emulator, to check that a reservation a job names exists; None: don't check.
        self.compute = compute
        # Whether and how users' own commands run (host/sandbox.UserCommands); None: never.
        self.user = user
        # Where a worker pool's nfsMounts (server, path) are: the emulator's Filestore folder parts, or None.
        self.nfs = nfs
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
            out["startTime"] = proto_timestamp(started)
        if ended is not None:
            out["endTime"] = proto_timestamp(ended)
        out["updateTime"] = proto_timestamp(max(t for t, _ in job["_phases"] if t <= now) if any(
            t <= now for t, _ in job["_phases"]) else job["_t0"])
        if state in ("JOB_STATE_FAILED", "JOB_STATE_CANCELLED") and job.get("_error"):
            out["error"] = dict(job["_error"])
        if state == "JOB_STATE_RUNNING" and (job.get("jobSpec") or {}).get("enableWebAccess"):
            out["webAccessUris"] = web_access_uris(job)
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
            job["createTime"] = proto_timestamp(now)
            job["_t0"] = now
            job["_project_id"] = self.project_ids.get(number, project)
            q, p = self.timings["queued_s"], self.timings["pending_s"]
            job["_phases"] = [[now, "JOB_STATE_QUEUED"], [now + q, "JOB_STATE_PENDING"]]
            self.jobs[name] = job
            plan = local_run.local_plan(job, self.user, self.storage, self.nfs)
            describe = local_run.describer(job)
            replicas = []
            if isinstance(plan, local_run.LocalPlan):
                try:
                    replicas = local_run.replicas(job, plan, self.runner.workdir(name), self.storage, self.user)
                except PathRefused as e:
                    plan = local_run.Refusal(str(e))
            if isinstance(plan, local_run.Refusal):
                job["_error"] = {"code": CODE_FAILED_PRECONDITION, "message": plan.message}
                job["_phases"] = [[now, "JOB_STATE_QUEUED"], [now, "JOB_STATE_FAILED"]]
                job["labels"] = {**(job.get("labels") or {}), EMULATOR_LABEL: "refused"}
                self.runner.record(name, describe).log("", "stderr", f"gcpgpu emulator: {plan.message}")
            elif isinstance(plan, str):
                run_s = self.timings["simulated_run_s"]
                job["_phases"] += [[now + q + p, "JOB_STATE_RUNNING"], [now + q + p + run_s, "JOB_STATE_SUCCEEDED"]]
                job["labels"] = {**(job.get("labels") or {}), EMULATOR_LABEL: "simulated"}
                run = self.runner.record(name, describe)
                run.log("", "stdout", f"gcpgpu emulator: this job is simulated, nothing runs: {plan}. It will "
                                      f"report RUNNING, then SUCCEEDED after {run_s:g} s.")
            else:
                job["labels"] = {**(job.get("labels") or {}), EMULATOR_LABEL: "local-run"}
                # Rank 0's trainer numbers go to this job's cloudml_job series, under its numeric id.
                metrics = MetricsTarget(job["_project_id"], location, "job", job_id)
                run = self.runner.start(name, replicas, delay_s=q + p, on_change=self._on_run_change(name),
                                        describe=describe, metrics=metrics, on_line=self._stepper(name))
                gpus = plan.gpus_per_replica
                out = local_run.output_uri(job)
                outputs = (f"outputs under {out} are objects in the emulator's Cloud Storage" if out and self.storage
                           else f"outputs under {run.workdir / 'gcs'} stand in for gs://")
                run.log("", "stdout", f"gcpgpu emulator: running this job locally: {len(replicas)} replica "
                                      f"process(es) on 127.0.0.1, CPU only (the real job would have {gpus} GPU(s) "
                                      f"per replica); {outputs}.")
            return self.render(job)

    def reservation_exists(self, name: str) -> bool:
        """Whether the Compute emulator holds the reservation projects/P/zones/Z/reservations/R."""
        _, project, _, zone, _, res = name.split("/")
        candidates = [project] if not project.isdigit() else self.compute.project_ids(project)
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

    def _stepper(self, name: str) -> Callable[[Any], None] | None:
        """What records the steps a local run's replicas log, under the job's name."""
        if self.activity is None:
            return None
        activity = self.activity

        def seen(line: Any) -> None:
            if (step := step_in(line.text)) is not None:
                activity.progress(name, step)

        return seen

    def started_jobs(self, project: str) -> list[dict]:
        """Jobs of project id `project` with a RUNNING phase, for readers outside Vertex AI (Monitoring's
        cloudml_job metrics): name, jobSpec as submitted, start, end (the next other phase, or None) and
        the steps its replicas logged."""
        with self._lock:
            jobs = [(name, job.get("jobSpec"), list(job.get("_phases") or [])) for name, job in self.jobs.items()
                    if job.get("_project_id") == project]
        out = []
        for name, spec, phases in jobs:
            start = next((float(t) for t, state in phases if state == "JOB_STATE_RUNNING"), None)
            if start is None:
                continue
            end = next((float(t) for t, state in phases if float(t) > start and state != "JOB_STATE_RUNNING"), None)
            steps = self.activity.steps(name) if self.activity is not None else ()
            out.append({"name": name, "jobSpec": spec, "start": start, "end": end, "steps": steps})
        return out

    # -- local runs -------------------------------------------------------------------------
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


def web_access_uris(job: dict) -> dict[str, str]:
    """One interactive-shell URI per replica (workerpool0-0, workerpool1-0, ...), in the shape Vertex AI gives
    them; the emulator serves no shell behind them (a replica's shell is `job attach` on a cluster job)."""
    region = job.get("name", "").split("/locations/")[-1].split("/")[0] or "us-central1"
    number = job.get("name", "").rsplit("/", 1)[-1]
    out = {}
    for i, pool in enumerate((job.get("jobSpec") or {}).get("workerPoolSpecs") or []):
        for r in range(int(pool.get("replicaCount") or 0)):
            out[f"workerpool{i}-{r}"] = (f"https://{number}-{i}-{r}-dot-{region}.aiplatform-training."
                                         "googleusercontent.com/")
    return out
