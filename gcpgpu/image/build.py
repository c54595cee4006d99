"""Building the training image: the build context, the Cloud Build request, and running either build.

A build context is a gzipped tarball of what containers/Dockerfile copies (the gcpgpu source,
templates/, containers/) plus the rendered cloudbuild.yaml. It is built byte for byte the same
from the same sources (fixed order, owners and times), so its digest names the sources and the
default image tag follows it.

Two ways to build it:
  local        `docker build` against a Docker engine on this machine, then `docker push`
  cloud-build  upload the context to Cloud Storage and submit it to Cloud Build, which builds and
               pushes to Artifact Registry; status (and the log, where readable) is streamed.
In emulator mode the context goes to the emulator through its own upload method (the emulator
serves no Cloud Storage API), and the emulator validates the build rather than running it.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import re
import shutil
import subprocess
import tarfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gcpgpu import catalog, nccl, resources
from gcpgpu.errors import CloudError, UsageProblem

DOCKERFILE = "containers/Dockerfile"
# What the Dockerfile copies: these files and folders from the top of the sources.
TOP_FILES = ("pyproject.toml", "setup.py", "README.md")
FOLDERS = ("gcpgpu", "templates", "containers")
BUILDER = "gcr.io/cloud-builders/docker"
BUILD_MACHINE = "E2_HIGHCPU_8"
BUILD_DISK_GB = 200
BUILD_TIMEOUT = "3600s"
FLAVOR_CHOICES = ("auto", *nccl.FLAVORS)
TERMINAL = ("SUCCESS", "FAILURE", "INTERNAL_ERROR", "TIMEOUT", "CANCELLED", "EXPIRED")

# 2020-01-01: one fixed time for every file, so the tarball only changes when content does
# (and not 0: the wheel the Dockerfile builds cannot hold dates before 1980).
_FIXED_MTIME = 1577836800
_SKIP_DIRS = {"__pycache__", "_bundled", ".pytest_cache", ".ruff_cache"}
_SKIP_SUFFIXES = (".pyc", ".pyo", ".swp")
_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
_REPO = re.compile(r"^[a-z](?:[a-z0-9-]{0,61}[a-z0-9])?$")
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]$")


# --- what to build ---------------------------------------------------------------------------------------


def resolve_flavor(flavor: str, machine_type: str | None) -> tuple[str, catalog.MachineType | None]:
    """The concrete flavour for --flavor and --machine-type; refuses a pair that cannot work together."""
    if flavor not in FLAVOR_CHOICES:
        raise UsageProblem(f"--flavor {flavor!r} is not one of {', '.join(FLAVOR_CHOICES)}")
    machine = catalog.get_machine_type(machine_type) if machine_type else None
    if flavor == "auto":
        if machine is None:
            raise UsageProblem(
                "--flavor auto needs --machine-type MT to pick the NCCL plugin; or pass "
                "--flavor none|tcpx|tcpxo|rdma"
            )
        return machine.gpudirect, machine
    if machine is not None and machine.gpudirect != flavor:
        raise UsageProblem(
            f"--flavor {flavor} does not fit --machine-type {machine.name}, which needs {machine.gpudirect}; "
            f"drop --flavor or pass --flavor {machine.gpudirect}"
        )
    return flavor, machine


def check_tag(tag: str) -> str:
    if not _TAG.match(tag):
        raise UsageProblem(f"--tag {tag!r} is not a Docker tag (letters, digits, _ . -; 128 at most; not starting with . or -)")
    return tag


def check_repo(repo: str) -> str:
    if not _REPO.match(repo):
        raise UsageProblem(
            f"--repo {repo!r} is not an Artifact Registry repository ID (lowercase letters, digits and -, "
            "starting with a letter, 63 at most)"
        )
    return repo


def parse_staging(value: str) -> tuple[str, str]:
    """gs://BUCKET[/PREFIX] -> (bucket, prefix)."""
    if not value.startswith("gs://"):
        raise UsageProblem(f"--staging-dir {value!r} is not gs://BUCKET[/PATH]")
    bucket, _, prefix = value[len("gs://"):].partition("/")
    if not _BUCKET.match(bucket):
        raise UsageProblem(f"--staging-dir {value!r}: {bucket!r} is not a Cloud Storage bucket name")
    return bucket, prefix.strip("/")


# --- the build context ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Context:
    """A gzipped tarball of the build context, and the digest of the sources in it."""

    data: bytes
    files: tuple[str, ...]
    source_digest: str  # sha256 over the source files' names and bytes (not cloudbuild.yaml)


def sources() -> dict[str, Path]:
    """Where each part of the build context is (top-level file or folder name -> path): gcpgpu's checkout
    (an editable install), else an installed wheel's package with its bundled copies (gcpgpu/_bundled:
    templates/, containers/ and the packaging files, setup.py puts them there)."""
    package = Path(__file__).resolve().parents[1]
    for top in (package.parent, package / "_bundled"):
        if (top / "pyproject.toml").is_file() and (top / DOCKERFILE).is_file():
            return {**{name: top / name for name in TOP_FILES}, "gcpgpu": package,
                    "templates": top / "templates", "containers": top / "containers"}
    raise UsageProblem(f"'container build' needs gcpgpu's sources, and this installation ({package}) has neither a "
                       "checkout around it nor the bundled copy a wheel holds; reinstall gcpgpu, or run it from a git "
                       "clone installed with 'pip install -e .'")


def context_files(places: Mapping[str, Path]) -> list[tuple[str, Path]]:
    """(name in the context, file) for everything the Dockerfile copies, sorted."""
    picked = [(name, places[name]) for name in TOP_FILES if places[name].is_file()]
    for folder in FOLDERS:
        for path in sorted(places[folder].rglob("*")):
            rel = path.relative_to(places[folder])
            if path.is_file() and not set(rel.parts) & _SKIP_DIRS and not path.name.endswith(_SKIP_SUFFIXES):
                picked.append((f"{folder}/{rel.as_posix()}", path))
    return sorted(picked)


def source_digest(files: Iterable[tuple[str, Path]]) -> str:
    digest = hashlib.sha256()
    for name, path in files:
        digest.update(name.encode() + b"\0" + hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def build_context(files: list[tuple[str, Path]], extra: dict[str, str] | None = None) -> Context:
    """The tarball: `files` plus `extra` ({name: text}, e.g. the rendered cloudbuild.yaml)."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        entries = [(name, path.read_bytes(), path.stat().st_mode & 0o111) for name, path in files]
        entries += [(name, text.encode(), 0) for name, text in (extra or {}).items()]
        for name, data, executable in sorted(entries):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mtime = _FIXED_MTIME
            info.mode = 0o755 if executable else 0o644
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            tar.addfile(info, io.BytesIO(data))
    packed = io.BytesIO()
    with gzip.GzipFile(fileobj=packed, mode="wb", mtime=0) as gz:
        gz.write(raw.getvalue())
    names = tuple(sorted([name for name, _ in files] + list(extra or {})))
    return Context(packed.getvalue(), names, source_digest(files))


def render_cloudbuild(image: str, flavor: str, region: str, *, user_image: str | None = None,
                      build_base: bool = True) -> str:
    """templates/cloudbuild.yaml.j2 for this image and flavour; with `user_image`, also the --context image
    FROM it (and without `build_base`, that step only: the registry holds the base image already)."""
    from gcpgpu.image import user_layer as container_user

    return resources.render(
        "cloudbuild.yaml.j2",
        image=image,
        user_image=user_image,
        user_dockerfile=container_user.DOCKERFILE,
        build_base=build_base or user_image is None,
        flavor=flavor,
        build_args=build_args(flavor),
        region=region,
        builder=BUILDER,
        dockerfile=DOCKERFILE,
        machine_type=BUILD_MACHINE,
        disk_size_gb=BUILD_DISK_GB,
        timeout=BUILD_TIMEOUT,
    )


def build_request(project: str, region: str, config_yaml: str, bucket: str, obj: str) -> dict[str, Any]:
    """The CreateBuildRequest as JSON: the rendered config, with the uploaded context as its source."""
    import yaml

    build = yaml.safe_load(config_yaml)
    build["source"] = {"storageSource": {"bucket": bucket, "object": obj}}
    return {"projectId": project, "parent": f"projects/{project}/locations/{region}", "build": build}


# --- local: docker -------------------------------------------------------------------------------------------


def docker_engine() -> tuple[bool, str]:
    """(reachable, what was found): whether `docker info` gets an answer from an engine."""
    docker = shutil.which("docker")
    if docker is None:
        return False, "no docker command on PATH"
    try:
        done = subprocess.run(
            [docker, "info", "--format", "{{.ServerVersion}}"], capture_output=True, text=True, timeout=20
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return False, f"'docker info' failed ({e})"
    if done.returncode != 0:
        why = next((line.strip() for line in (done.stderr or done.stdout).splitlines() if line.strip()), "no answer")
        return False, f"the docker client found no engine ({why})"
    return True, f"Docker engine {done.stdout.strip() or '(version unknown)'}"


def build_args(flavor: str) -> list[str]:
    """KEY=VALUE build args: the flavour and containers/versions.env (the one PyTorch pairing)."""
    # TORCH_MIN is the trainer's floor, read at run time, and TCPXO_RXDM_IMAGE runs on the node, not in
    # the image; every other key is an ARG of the Dockerfile.
    pins = {k: v for k, v in resources.image_versions().items() if k not in ("TORCH_MIN", "TCPXO_RXDM_IMAGE")}
    return [f"FLAVOR={flavor}", *(f"{k}={v}" for k, v in pins.items())]


def docker_commands(image: str, flavor: str, push: bool, user_image: str | None = None) -> list[list[str]]:
    """The docker command lines a local build runs (the context goes to each `docker build -` on stdin);
    with `user_image`, the --context image is built FROM the base just built, and only it is pushed."""
    from gcpgpu.image import user_layer as container_user

    args = [part for arg in build_args(flavor) for part in ("--build-arg", arg)]
    commands = [["docker", "build", *args, "--file", DOCKERFILE, "--tag", image, "-"]]
    if user_image:
        commands.append(["docker", "build", "--file", container_user.DOCKERFILE, "--tag", user_image, "-"])
    if push:
        commands.append(["docker", "push", user_image or image])
    return commands


def run_local(commands: list[list[str]], context: Context, echo: Callable[[str], None]) -> None:
    """Run the docker commands, the first fed the context; their output goes to `echo` line by line."""
    import os

    env = {**os.environ, "DOCKER_BUILDKIT": "1"}
    for argv in commands:
        proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env
        )

        def feed(pipe: Any = proc.stdin, data: bytes = context.data if argv[1] == "build" else b"") -> None:
            try:
                pipe.write(data)
            except BrokenPipeError:
                pass  # docker stopped reading: its exit status will say why
            finally:
                pipe.close()

        writer = threading.Thread(target=feed, daemon=True)
        writer.start()
        assert proc.stdout is not None
        for line in proc.stdout:
            echo(line.decode(errors="replace").rstrip("\n"))
        writer.join()
        if proc.wait() != 0:
            raise CloudError(f"'{' '.join(argv[:2])}' failed with exit status {proc.returncode} (output above)")


# --- Cloud Build ------------------------------------------------------------------------------------------------


def upload_source(clients: Any, bucket: str, obj: str, data: bytes, *, create_bucket: bool) -> None:
    """Put the context at gs://bucket/obj with google-cloud-storage (the emulator serves Cloud Storage too)."""
    from google.api_core import exceptions

    client = clients.storage()
    try:
        client.bucket(bucket).blob(obj).upload_from_string(data, content_type="application/gzip")
    except exceptions.NotFound:
        if not create_bucket:
            raise
        # gcloud builds submit makes the same default bucket the first time.
        client.create_bucket(bucket, location="US")
        client.bucket(bucket).blob(obj).upload_from_string(data, content_type="application/gzip")


def _emulator_call(clients: Any, method: str, payload: bytes) -> dict:
    import json

    channel = clients.cloudbuild().transport.grpc_channel
    call = channel.unary_unary(method, request_serializer=lambda b: b, response_deserializer=json.loads)
    return call(payload, timeout=30)


class LogReader:
    """A build's log, read on from where it was last read: Cloud Storage, or the emulator's method."""

    def __init__(self, clients: Any, project: str, echo: Callable[[str], None]) -> None:
        self.clients = clients
        self.project = project
        self.echo = echo
        self.offset = 0
        self.disabled: str | None = None

    def poll(self, build: dict) -> None:
        if self.disabled:
            return
        try:
            text = self._read(build)
        except Exception as e:  # logs are a courtesy: status streaming goes on without them
            from gcpgpu.errors import describe_google_error, is_google_error

            why = describe_google_error(e) if is_google_error(e) else f"{type(e).__name__}: {e}"
            self.disabled = why
            where = "" if self.clients.is_emulated else f"; it is at {build.get('logUrl', 'the Cloud Build console')}"
            self.echo(f"(cannot read the build log: {why}{where})")
            return
        for line in text.splitlines():
            self.echo(line)

    def _read(self, build: dict) -> str:
        if self.clients.is_emulated:
            import json

            answer = _emulator_call(
                self.clients, "/gcpgpu.emulator.v1.CloudBuildLogs/Read",
                json.dumps({"project": self.project, "id": build["id"], "offset": self.offset}).encode(),
            )  # fmt: skip
            self.offset = answer["offset"]
            return answer["text"]
        from google.api_core import exceptions
        from google.cloud import storage

        bucket = build.get("logsBucket", "").removeprefix("gs://")
        if not bucket:
            raise CloudError("the build has no logs bucket (logging goes to Cloud Logging only)")
        blob = storage.Client(project=self.project).bucket(bucket).blob(f"log-{build['id']}.txt")
        try:
            data = blob.download_as_bytes(start=self.offset)
        except (exceptions.NotFound, exceptions.RequestRangeNotSatisfiable):
            return ""  # not written yet, or nothing new
        self.offset += len(data)
        return data.decode(errors="replace")


def submit(
    clients: Any,
    request: dict[str, Any],
    *,
    on_status: Callable[[dict], None],
    on_log: Callable[[str], None],
    poll_seconds: float,
    timeout_seconds: float = 4 * 3600,
) -> dict:
    """Create the build, then follow it until it ends; returns the final build as JSON."""
    from google.cloud.devtools import cloudbuild_v1
    from google.protobuf import json_format

    client = clients.cloudbuild()
    pb = json_format.ParseDict(request, cloudbuild_v1.CreateBuildRequest.pb()())
    operation = client.create_build(request=cloudbuild_v1.CreateBuildRequest.wrap(pb))
    created = operation.metadata.build
    project = request["projectId"]
    get = cloudbuild_v1.GetBuildRequest(name=created.name, project_id=project, id=created.id)
    logs = LogReader(clients, project, on_log)
    last_status = None
    deadline = time.monotonic() + timeout_seconds
    build = _as_json(created)
    try:
        while True:
            changed, last_status = build["status"] != last_status, build["status"]
            if changed and last_status not in TERMINAL:
                on_status(build)
            logs.poll(build)
            if changed and last_status in TERMINAL:
                on_status(build)  # after the log lines that led to it
            if build["status"] in TERMINAL:
                return build
            if time.monotonic() > deadline:
                raise CloudError(f"gave up following build {created.id} after {timeout_seconds:.0f} s; it may still run")
            time.sleep(poll_seconds)
            build = _as_json(client.get_build(request=get))
    except KeyboardInterrupt:
        on_log(
            f"Stopped following build {created.id}; it goes on in Cloud Build "
            f"(cancel it with: gcloud builds cancel {created.id} --region {request['parent'].rsplit('/', 1)[-1]})"
        )
        raise


def _as_json(build: Any) -> dict:
    from google.protobuf import json_format

    data = json_format.MessageToDict(type(build).pb(build))
    data.setdefault("status", "STATUS_UNKNOWN")
    return data
