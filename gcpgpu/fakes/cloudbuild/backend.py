"""Cloud Build state and behaviour: builds recorded, validated and timed, never executed.

Builds are stored as the JSON the real API speaks (camelCase), plus private "_" keys. Status is
derived from timestamps when read (QUEUED -> WORKING -> SUCCESS or FAILURE), as the compute
backend does for operations, so nothing runs in the background and a frozen clock makes tests
deterministic. What the emulator can check without Docker it checks: the request's shape (as the
real service refuses it), that the source object exists in the emulator's Cloud Storage (where
gcpgpu, google-cloud-storage or gcloud uploaded it), that the Dockerfile a `docker build`
step names is in that source, and that every image to push is one a step tags. The outcome, the
log and a warning on the build all say that no Docker ran and no image was pushed.
"""

from __future__ import annotations

import base64
import copy
import gzip
import hashlib
import io
import posixpath
import re
import tarfile
import threading
import uuid
from typing import TYPE_CHECKING, Any

from ..core import ApiError, Clock, Faults, IdSource, not_found, rfc3339

if TYPE_CHECKING:
    from ..storage.backend import StorageBackend

DEFAULT_SECONDS = 4.0  # QUEUED a quarter of it, WORKING the rest; Faults.operation_seconds overrides
QUEUED_SHARE = 0.25
MAX_STEPS = 300
TERMINAL = ("SUCCESS", "FAILURE", "INTERNAL_ERROR", "TIMEOUT", "CANCELLED", "EXPIRED")
SIMULATED = "Simulated by the gcpgpu emulator: the build was recorded and validated; no Docker ran and no image was pushed."

# A container image reference (the distribution spec's grammar, as docker enforces it).
_DOMAIN = r"(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)(?:\.(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?))*(?::[0-9]+)?"
_PATH = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*"
IMAGE_RE = re.compile(rf"^(?:(?P<domain>{_DOMAIN})/)?(?P<path>{_PATH})(?::(?P<tag>[\w][\w.-]{{0,127}}))?(?:@(?P<digest>sha256:[a-f0-9]{{64}}))?$")
_PROJECT = re.compile(r"^(?:[a-z][a-z0-9.-]*:)?[a-z][-a-z0-9]{4,28}[a-z0-9]$")
_LOCATION = re.compile(r"^[a-z]+(?:-[a-z]+\d*)*$|^global$")
_USER_SUBST = re.compile(r"^_[A-Z0-9_]+$")
_BUILTIN_SUBST = ("PROJECT_ID", "PROJECT_NUMBER", "BUILD_ID", "LOCATION", "REPO_NAME", "BRANCH_NAME",
                  "TAG_NAME", "REVISION_ID", "COMMIT_SHA", "SHORT_SHA", "SERVICE_ACCOUNT_EMAIL", "SERVICE_ACCOUNT")
_DOCKER_BUILDERS = re.compile(r"^(?:(?:[a-z0-9.-]+\.)?gcr\.io/cloud-builders/docker|docker)(?::[\w.-]+)?(?:@sha256:[a-f0-9]{64})?$")


def invalid_build(message: str) -> ApiError:
    return ApiError(400, "invalidArgument", f"invalid build: {message}")


def project_number(project: str) -> str:
    """A stable fake project number for a project ID (the emulator has no resource manager)."""
    return str(int(hashlib.sha256(project.encode()).hexdigest()[:10], 16) % 10**12).rjust(12, "1")


class CloudBuildBackend:
    """Builds per project, and the derived status, log and operation of each; sources are read from `storage`."""

    def __init__(self, faults: Faults, clock: Clock | None = None, ids: IdSource | None = None,
                 storage: StorageBackend | None = None) -> None:
        self.faults = faults
        self.clock = clock or Clock()
        self.ids = ids or IdSource()
        self.storage = storage  # the emulator's Cloud Storage (None: every source object is missing)
        self._lock = threading.RLock()
        self.builds: dict[str, dict] = {}
        self.operations: dict[str, str] = {}  # operation name -> build id

    def reset(self) -> None:
        with self._lock:
            self.builds.clear()
            self.operations.clear()

    def _seconds(self) -> float:
        s = self.faults.operation_seconds
        return DEFAULT_SECONDS if s is None else float(s)

    # ------------------------------------------------------------------ builds
    def create(self, project_id: str, parent: str, build: dict) -> dict:
        """CreateBuild: validate like the real service, record, and return the build (QUEUED)."""
        project, location = self._where(project_id, parent)
        body = copy.deepcopy(build)
        for key in ("id", "status", "createTime", "startTime", "finishTime", "results", "logUrl", "name"):
            body.pop(key, None)  # output-only fields: the service sets them
        build_id = str(uuid.uuid4())
        subst = self._substitutions(project, location, build_id, body)
        steps = self._check_steps(body, subst)
        images = self._check_images(body, subst)
        now = self.clock.now()
        total = self._seconds()
        body.update(
            id=build_id,
            name=f"projects/{project_number(project)}/locations/{location}/builds/{build_id}",
            projectId=project,
            createTime=rfc3339(now),
            logUrl=f"https://console.cloud.google.com/cloud-build/builds;region={location}/{build_id}?project={project_number(project)}",
            logsBucket=body.get("logsBucket") or f"gs://{project_number(project)}.cloudbuild-logs.googleusercontent.com",
            timeout=body.get("timeout") or "600s",
            queueTtl=body.get("queueTtl") or "3600s",
            warnings=[*body.get("warnings", []), {"text": SIMULATED, "priority": "INFO"}],
        )
        outcome, log = self._rehearse(project, body, steps, images, now, total)
        record = {
            **body,
            "_project": project,
            "_location": location,
            "_t0": now,
            "_started_at": now + total * QUEUED_SHARE,
            "_done_at": now + total,
            "_outcome": outcome,
            "_log": log,
            "_images": images,
            "_cancelled_at": None,
        }
        op_name = f"operations/build/{project}/{base64.b64encode(build_id.encode()).decode().rstrip('=')}"
        with self._lock:
            self.builds[build_id] = record
            self.operations[op_name] = build_id
        record["_operation"] = op_name
        return self.render(record)

    def get(self, project_id: str, build_id: str, name: str = "") -> dict:
        return self.render(self._find(project_id, build_id, name))

    def list(self, project_id: str, parent: str, page_size: int = 0, page_token: str = "", flt: str = "") -> tuple[list[dict], str]:
        project, location = self._where(project_id, parent)
        wanted = _parse_filter(flt)
        with self._lock:
            records = [r for r in self.builds.values() if r["_project"] == project
                       and (not parent or r["_location"] == location)]
        records.sort(key=lambda r: r["_t0"], reverse=True)  # newest first, as the service lists
        rendered = [b for b in (self.render(r) for r in records) if _matches(b, wanted)]
        size = page_size if 0 < page_size <= 1000 else 50
        try:
            start = int(page_token or 0)
        except ValueError:
            raise ApiError(400, "invalidArgument", f"invalid page token {page_token!r}") from None
        page = rendered[start : start + size]
        return page, str(start + size) if start + size < len(rendered) else ""

    def cancel(self, project_id: str, build_id: str, name: str = "") -> dict:
        record = self._find(project_id, build_id, name)
        with self._lock:
            if self._status(record) not in TERMINAL:
                record["_cancelled_at"] = self.clock.now()
        return self.render(record)

    def operation(self, name: str) -> tuple[dict, bool]:
        """(build, done) for a CreateBuild operation name."""
        build_id = self.operations.get(name)
        if build_id is None:
            raise not_found(name)
        build = self.render(self.builds[build_id])
        return build, build["status"] in TERMINAL

    def read_log(self, project_id: str, build_id: str, offset: int = 0) -> tuple[str, int, bool]:
        """(text after `offset`, new offset, finished): the log as far as the build has got."""
        record = self._find(project_id, build_id, "")
        now = self.clock.now()
        cancelled = record["_cancelled_at"]
        upto = min(now, cancelled) if cancelled is not None else now
        lines = [line for at, line in record["_log"] if at <= upto]
        status = self._status(record)
        if status == "CANCELLED":
            lines.append("ERROR: build cancelled")
        text = "".join(line + "\n" for line in lines)
        return text[offset:], len(text), status in TERMINAL

    # ------------------------------------------------------------------ derived state
    def _status(self, record: dict) -> str:
        now = self.clock.now()
        cancelled = record["_cancelled_at"]
        if cancelled is not None and cancelled <= now:
            return "CANCELLED"
        if now < record["_started_at"]:
            return "QUEUED"
        if now < record["_done_at"]:
            return "WORKING"
        return record["_outcome"]["status"]

    def render(self, record: dict) -> dict:
        out = {k: copy.deepcopy(v) for k, v in record.items() if not k.startswith("_")}
        status = self._status(record)
        out["status"] = status
        if status != "QUEUED":
            out["startTime"] = rfc3339(record["_started_at"])
        if status in TERMINAL:
            end = record["_cancelled_at"] if status == "CANCELLED" else record["_done_at"]
            out["finishTime"] = rfc3339(max(end, record["_started_at"]))
            outcome = record["_outcome"]
            if status == "CANCELLED":
                out["statusDetail"] = "Build was cancelled"
            elif status == "SUCCESS":
                out["statusDetail"] = SIMULATED
                out["results"] = {
                    "images": [{"name": image, "digest": _digest(record, image)} for image in record["_images"]],
                    "buildStepImages": [_digest(record, step.get("name", "")) for step in record.get("steps", [])],
                }
            else:
                out["statusDetail"] = outcome["detail"]
                out["failureInfo"] = {"type": outcome["failure"], "detail": outcome["detail"]}
        return out

    # ------------------------------------------------------------------ validation
    def _where(self, project_id: str, parent: str) -> tuple[str, str]:
        project, location = project_id, "global"
        if parent:
            match = re.match(r"^projects/([^/]+)/locations/([^/]+)$", parent)
            if not match:
                raise ApiError(400, "invalidArgument", f"invalid parent {parent!r}: want projects/PROJECT/locations/LOCATION")
            if project_id and project_id != match.group(1):
                raise ApiError(400, "invalidArgument", f"project_id {project_id!r} does not match parent {parent!r}")
            project, location = match.group(1), match.group(2)
        if not project:
            raise ApiError(400, "invalidArgument", "project_id or parent is required")
        if not _PROJECT.match(project):
            raise ApiError(400, "invalidArgument", f"invalid project ID {project!r}")
        if not _LOCATION.match(location):
            raise ApiError(400, "invalidArgument", f"invalid location {location!r}")
        return project, location

    def _find(self, project_id: str, build_id: str, name: str) -> dict:
        if name and not build_id:
            match = re.match(r"^projects/([^/]+)/locations/([^/]+)/builds/([^/]+)$", name)
            if not match:
                raise ApiError(400, "invalidArgument", f"invalid build name {name!r}")
            build_id = match.group(3)
            project_id = project_id or match.group(1)
        record = self.builds.get(build_id)
        # The name may carry the project number, as the service returns it, or the ID.
        if record is None or project_id not in (record["_project"], project_number(record["_project"])):
            raise not_found(f"builds/{build_id}")
        return record

    def _substitutions(self, project: str, location: str, build_id: str, body: dict) -> dict[str, str]:
        user = body.get("substitutions") or {}
        for key in user:
            if not _USER_SUBST.match(key) and key not in _BUILTIN_SUBST:
                raise invalid_build(
                    f'invalid value for "build.substitutions": key {key!r} is not a valid built-in '
                    "substitution; user-defined keys begin with an underscore and use capital letters"
                )
        return {
            "PROJECT_ID": project,
            "PROJECT_NUMBER": project_number(project),
            "BUILD_ID": build_id,
            "LOCATION": location,
            **{k: str(v) for k, v in user.items()},
        }

    def _check_steps(self, body: dict, subst: dict[str, str]) -> list[dict]:
        steps = body.get("steps") or []
        if not steps:
            raise invalid_build("a build needs at least one step (.steps is empty)")
        if len(steps) > MAX_STEPS:
            raise invalid_build(f"{len(steps)} steps; at most {MAX_STEPS}")
        seen: set[str] = set()
        for i, step in enumerate(steps):
            if not step.get("name"):
                raise invalid_build(f"build step {i} must specify name")
            step_id = step.get("id")
            for wanted in step.get("waitFor", []):
                if wanted != "-" and wanted not in seen:
                    raise invalid_build(f"build step {i} depends on unknown step {wanted!r} (waitFor names an earlier id)")
            if step_id:
                if step_id in seen:
                    raise invalid_build(f"build step {i} repeats id {step_id!r}")
                seen.add(step_id)
            for var in step.get("env", []):
                if "=" not in var:
                    raise invalid_build(f"build step {i} env {var!r} is not KEY=VALUE")
        return [{**step, "args": [_substitute(a, subst) for a in step.get("args", [])]} for step in steps]

    def _check_images(self, body: dict, subst: dict[str, str]) -> list[str]:
        images = [_substitute(image, subst) for image in body.get("images", [])]
        for image in images:
            match = IMAGE_RE.match(image)
            if not match or len(image) > 255:
                raise invalid_build(f"invalid image name {image!r}")
            domain = match.group("domain") or ""
            if domain.endswith("-docker.pkg.dev") and len(match.group("path").split("/")) < 3:
                raise invalid_build(
                    f"invalid image name {image!r}: Artifact Registry images are LOCATION-docker.pkg.dev/PROJECT/REPOSITORY/IMAGE"
                )
        return images

    # ------------------------------------------------------------------ the rehearsal
    def _rehearse(self, project: str, body: dict, steps: list[dict], images: list[str], now: float,
                  total: float) -> tuple[dict, list[tuple[float, str]]]:
        """What would happen, checked without Docker: the outcome and the log lines with their times (from
        `now`, the build's creation, over its `total` seconds: the last line is there when it ends, however
        long reading the source took)."""
        lines: list[str] = [f'starting build "{body["id"]}"', "", "FETCHSOURCE"]
        files: set[str] | None = None
        outcome: dict[str, Any] = {"status": "SUCCESS"}
        storage = (body.get("source") or {}).get("storageSource")
        if storage:
            key = f"{storage.get('bucket', '')}/{storage.get('object', '')}"
            held = self.storage.read_bytes(storage.get("bucket", ""), storage.get("object", "")) if self.storage else None
            lines.append(f"Fetching storage object: gs://{key}")
            if held is None:
                detail = f"failed to fetch source: storage object gs://{key} not found"
                outcome = {"status": "FAILURE", "failure": "FETCH_SOURCE_FAILED", "detail": detail}
                lines.append(f"ERROR: {detail}")
            else:
                files = _tar_members(held)
                if files is None:
                    lines.append(f"[emulator] gs://{key} is not a gzipped tarball; its contents were not checked")
                else:
                    lines.append(f"[emulator] the source holds {len(files)} files ({len(held)} bytes)")
        built: set[str] = set()
        if outcome["status"] == "SUCCESS":
            lines.append("BUILD")
            for i, step in enumerate(steps):
                lines.append(f"Starting Step #{i}" + (f' - "{step["id"]}"' if step.get("id") else ""))
                lines.append(f"Step #{i}: [emulator] would run {step['name']} {' '.join(step.get('args', []))}".rstrip())
                problem = self._check_docker_step(step, files, built)
                if problem:
                    lines.append(f"Step #{i}: {problem}")
                    detail = f'Build step failure: build step {i} "{step["name"]}" failed: {problem}'
                    outcome = {"status": "FAILURE", "failure": "USER_BUILD_STEP", "detail": detail}
                    lines.append(f"ERROR: {detail}")
                    break
                lines.append(f"Finished Step #{i}")
        if outcome["status"] == "SUCCESS" and images:
            lines.append("PUSH")
            for image in images:
                if image not in built:
                    detail = f"An image does not exist locally with the tag: {image}"
                    outcome = {"status": "FAILURE", "failure": "PUSH_IMAGE_NOT_FOUND", "detail": detail}
                    lines.append(f"ERROR: {detail}")
                    break
                lines.append(f"Pushing {image}")
                lines.append("[emulator] listed in the emulator's Artifact Registry (dockerImages.list); no image bytes exist")
        lines.append("DONE" if outcome["status"] == "SUCCESS" else "ERROR")
        lines.append(f"[emulator] {SIMULATED}")
        # Each line shows up as the build gets there: spread over WORKING, the last at the end.
        start = now + total * QUEUED_SHARE
        span = total * (1 - QUEUED_SHARE)
        timed = [(start + span * i / max(len(lines) - 1, 1), line) for i, line in enumerate(lines)]
        timed[-1] = (now + total, timed[-1][1])  # exactly _done_at: the status and the last line agree
        return outcome, timed

    @staticmethod
    def _check_docker_step(step: dict, files: set[str] | None, built: set[str]) -> str | None:
        """For a `docker build` step: the failure docker would report, or None; records what it tags."""
        args = step.get("args", [])
        if not _DOCKER_BUILDERS.match(step.get("name", "")) or not args or args[0] != "build":
            return None
        dockerfile, context, tags = None, None, []
        with_value = ("-f", "--file", "-t", "--tag", "--build-arg", "--target", "--platform", "--cache-from",
                      "--network", "--label", "--secret", "--progress", "--ssh", "--add-host")
        i = 1
        while i < len(args):
            arg = args[i]
            name, eq, inline = arg.partition("=")
            if arg in with_value or (eq and name in with_value):
                value = inline if eq else (args[i + 1] if i + 1 < len(args) else "")
                if name in ("-f", "--file"):
                    dockerfile = value
                elif name in ("-t", "--tag"):
                    tags.append(value)
                i += 1 if eq else 2
                continue
            if not arg.startswith("-"):
                context = arg
            i += 1
        if context is None:
            return '"docker build" requires exactly 1 argument (the build context)'
        if files is not None:
            # Steps run in /workspace (or its `dir`); -f is relative to that, the default is CONTEXT/Dockerfile.
            base = step.get("dir", "")
            path = posixpath.normpath(posixpath.join(base, dockerfile or posixpath.join(context, "Dockerfile")))
            path = path.removeprefix("/workspace/")
            if path not in files:
                return (f"unable to prepare context: unable to evaluate symlinks in Dockerfile path: "
                        f"lstat /workspace/{path}: no such file or directory")
        built.update(tags)
        return None


def _substitute(text: str, subst: dict[str, str]) -> str:
    def replace(match: re.Match) -> str:
        key = match.group(1) or match.group(2)
        return subst.get(key, match.group(0))

    return re.sub(r"\$\{([A-Z_][A-Z0-9_]*)\}|\$([A-Z_][A-Z0-9_]*)", replace, text)


def _tar_members(data: bytes) -> set[str] | None:
    try:
        raw = gzip.decompress(data)
        with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
            return {posixpath.normpath(m.name) for m in tar.getmembers() if m.isfile()}
    except (OSError, tarfile.TarError, EOFError):
        return None


def _digest(record: dict, what: str) -> str:
    # Not a real image digest (nothing was built): stable per build and name, and shaped like one.
    return "sha256:" + hashlib.sha256(f"{record['id']}/{what}".encode()).hexdigest()


_FILTER_CLAUSE = re.compile(r'^\s*(status|tags|id|images)\s*=\s*"?([^"]*)"?\s*$')


def _parse_filter(flt: str) -> list[tuple[str, str]]:
    if not flt.strip():
        return []
    clauses = []
    for part in re.split(r"\s+AND\s+", flt.strip()):
        match = _FILTER_CLAUSE.match(part)
        if not match:
            raise ApiError(400, "invalidArgument", f"the emulator's filter takes status=, tags=, id= or images= joined by AND; not {part!r}")
        clauses.append((match.group(1), match.group(2)))
    return clauses


def _matches(build: dict, clauses: list[tuple[str, str]]) -> bool:
    for key, value in clauses:
        have = build.get(key)
        if isinstance(have, list):
            if value not in have:
                return False
        elif have != value:
            return False
    return True
