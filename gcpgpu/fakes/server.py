"""The emulator as a process: one WSGI app (REST APIs + control endpoints), an optional gRPC server,
a state file, and the same backends behind `mock_gcp()` (in-process) and `gcpgpu emulator start`.

Everything binds 127.0.0.1: the emulator has no authentication and must never face a network. Every HTTP
request passes gate.py first (a loopback Host, no foreign Origin, JSON bodies of bounded size), so no web
page can drive it either; http_server.py serves it with a bounded number of threads.
"""

from __future__ import annotations

import json
import os
import re
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from werkzeug.wrappers import Request, Response

from .activity import Activity
from .artifactregistry.backend import ArtifactRegistryBackend
from .clock import MAX_ADVANCE, MAX_RATE, checked
from .cloudbuild.backend import CloudBuildBackend
from .compute.backend import ComputeBackend
from .core import ApiError, Clock, Faults, IdSource, LoggedRequest, RequestLog, write_private
from .events import VmEvents
from .faults import FaultClock
from .filestore.backend import FilestoreBackend
from .gate import guarded
from .guest.sshd import NodeSsh
from .host.nsexec import Engine
from .host.sandbox import UserCommands
from .host.shared_mounts import SharedStorage, disk_resolver
from .host.storage import Storage
from .host.tunnel import IapTunnel
from .jobs import LocalJobs
from .logging.backend import LoggingBackend
from .lro import Operations
from .lustre.backend import LustreBackend
from .monitoring.backend import MonitoringBackend
from .partial import partial_response
from .routes import REST_APIS, batch
from .schema import check_served
from .secretmanager.backend import SecretManagerBackend
from .secretmanager.grants import Grants, sandbox_refusal
from .servicenetworking.backend import ServiceNetworkingBackend
from .storage.backend import StorageBackend
from .vertex.backend import VertexBackend
from .world import default_world

HOST = "127.0.0.1"
STATE_VERSION = 1

# REST APIs plug in through routes.py's REST_APIS (one line each); gRPC services here.
# gRPC: "module:factory"; factory(emulator) -> grpc.GenericRpcHandler. Started only when non-empty.
GRPC_SERVICES: list[str] = [
    # First: it hands GetOperation calls for names that are not Vertex's on to the services below.
    "gcpgpu.fakes.vertex:grpc_service",
    "gcpgpu.fakes.cloudbuild:grpc_service",
    "gcpgpu.fakes.monitoring:grpc_service",
    "gcpgpu.fakes.monitoring:dashboards_service",
]
# Factories added at run time (tests); same contract as GRPC_SERVICES' factories.
GRPC_SERVICE_FACTORIES: list[Callable[[Emulator], Any]] = []


class PortUnavailable(OSError):
    """A port it cannot listen on (taken, privileged): `server` ("REST" or "gRPC") names the flag that chose it."""

    def __init__(self, server: str, port: int, errno_: int, why: str) -> None:
        super().__init__(errno_, why)
        self.server, self.port = server, port


def _load(target: str) -> Any:
    import importlib

    module, _, attr = target.partition(":")
    obj: Any = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj

_TRANSIENT = {
    429: ("rateLimitExceeded", "Rate Limit Exceeded"),
    500: ("backendError", "Internal error. Please try again."),
    502: ("backendError", "Bad gateway."),
    503: ("backendError", "The service is currently unavailable."),
    504: ("backendError", "Deadline exceeded."),
    408: ("requestTimeout", "Request timeout."),
}


def _json(status: int, body: Any) -> Response:
    if body is None:
        return Response(b"", status=status if status != 200 else 204)
    return Response(json.dumps(body), status=status, mimetype="application/json")


class Emulator:
    """State (backends, faults, clock, request log) plus the servers that expose it."""

    def __init__(self, faults: Faults | None = None, state_file: str | os.PathLike | None = None,
                 run_user_commands: bool = False) -> None:
        self.state_file = Path(state_file) if state_file else None
        self._http: Any = None
        self._grpc = None
        self.port: int | None = None
        self.grpc_port: int | None = None
        # The shared world: every backend gets what it needs of it, and of the others, here and only here.
        self.world = default_world()
        self.faults = faults or Faults()
        self.clock = Clock()
        self.ids = IdSource()
        self.requests = RequestLog()
        self.activity = Activity(self.clock)  # what runs where: the job agent writes it, Monitoring reads it
        self.events = VmEvents()  # Compute announces metadata changes and lost VMs; the job agent acts on them
        # One folder for Cloud Storage's buckets and jobs' outputs and node disks; it outlives a restart when the state does.
        disk = Storage(self.state_file.with_name(self.state_file.name + ".storage") if self.state_file else None)
        self.storage = StorageBackend(disk, self.clock)
        self.compute = ComputeBackend(self.world, self.faults, self.clock, self.ids, self.events)
        self.cloudbuild = CloudBuildBackend(self.faults, self.clock, self.ids, self.storage)
        self.artifactregistry = ArtifactRegistryBackend(self.cloudbuild)  # what the builds pushed
        self.secretmanager = SecretManagerBackend(self.clock)
        # Local processes for Vertex and cluster jobs (their reporters write here); users' own commands only when allowed.
        self.grants = Grants()  # what a user's sandboxed command may read of Secret Manager: its own --secrets
        self.user_commands = UserCommands(run_user_commands, lambda: disk.root / "gcs", self.serving_address,
                                          self.grants.mint)
        # Shared file systems (issue 41): one folder per instance under the storage root, bound into the jobs
        # of the nodes whose gcpgpu-storage metadata names it (and Vertex AI's nfsMounts); private service
        # access (Service Networking) on the networks that need it.
        self.servicenetworking = ServiceNetworkingBackend(self.clock, self._operation_seconds, self.compute,
                                                          self._private_access_users)
        self.filestore = FilestoreBackend(
            self.world, self.clock, self._operation_seconds, lambda: disk.root,
            Operations(self.clock, "type.googleapis.com/google.cloud.common.OperationMetadata"),
            network_exists=self._network_exists, has_private_access=self.servicenetworking.connected)
        self.lustre = LustreBackend(
            self.world, self.clock, self._operation_seconds, lambda: disk.root,
            Operations(self.clock, "type.googleapis.com/google.cloud.lustre.v1.OperationMetadata",
                       cancel_field="requestedCancellation"),
            network_exists=self._network_exists, has_private_access=self.servicenetworking.connected)
        shared = SharedStorage()
        shared.services.update(filestore=self.filestore, lustre=self.lustre)
        shared.disk = disk_resolver(self.compute, lambda: disk.root)
        self.jobs = LocalJobs(self.compute, self.activity, self.events, disk, address=self.serving_address,
                              user=self.user_commands, clock_file=lambda: self.clock.published, shared=shared,
                              faults=self.faults)
        # Cloud Logging's entries: what the local runs (jobs' processes, the VMs' own programs) printed.
        self.logging = LoggingBackend(self.jobs.runner)
        self.vertex = VertexBackend(self.world.regions, self.clock, self.ids, self.jobs.runner, self.compute, disk,
                                    user=self.user_commands, activity=self.activity, nfs=self.filestore.nfs_folder)
        # Each node's real sshd, reachable only through the stand-in for IAP TCP forwarding (guest/sshd.py, host/tunnel.py).
        self.engine = Engine(self.jobs.container)  # `docker exec` into a node's job (host/nsexec.py)
        self.node_ssh = NodeSsh(self.compute, self.user_commands, lambda: disk.root, shared, self.jobs.node_workdir,
                                self.engine.socket_for)
        self.iap = IapTunnel(self.node_ssh.connect, self.node_ssh.running)
        self.monitoring = MonitoringBackend(self.faults, self.clock, self.compute, self.activity, self.vertex)
        # Fires armed node losses (preemptions, host errors) while the emulator serves.
        self.fault_clock = FaultClock(self.faults, self.compute, self.activity, self.clock)
        self._rest = [(re.compile(pattern), _load(target)(self)) for pattern, target in REST_APIS]
        if self.state_file and self.state_file.exists():
            self.load(self.state_file)

    # -- state ---------------------------------------------------------------------------
    def reset(self) -> None:
        """Forget every resource, fault and logged request (the world's data stays)."""
        self.compute.reset()
        self.cloudbuild.reset()
        self.artifactregistry.reset()
        self.secretmanager.reset()
        self.grants.reset()
        self.vertex.reset()
        self.jobs.reset()
        self.node_ssh.reset()
        self.engine.reset()
        self.monitoring.reset()
        self.storage.reset()
        self.filestore.reset()
        self.lustre.reset()
        self.servicenetworking.reset()
        self.activity.reset()
        self.faults.update(Faults().to_dict())
        self.requests.clear()
        self.clock.reset()

    def save(self, path: str | os.PathLike | None = None) -> Path:
        target = Path(path or self.state_file or ".emulator-state.json")
        data = {"version": STATE_VERSION, "compute": self.compute.snapshot(), "faults": self.faults.to_dict(),
                "filestore": self.filestore.snapshot(), "lustre": self.lustre.snapshot(),
                "servicenetworking": self.servicenetworking.snapshot(),
                "secretmanager": self.secretmanager.snapshot(), "guest": self.jobs.agent.snapshot()}
        write_private(target, data)
        return target

    def load(self, path: str | os.PathLike) -> None:
        data = json.loads(Path(path).read_text())
        if data.get("version") != STATE_VERSION:
            raise ValueError(f"{path}: state file version {data.get('version')} is not {STATE_VERSION}")
        self.compute.restore(data.get("compute", {}))
        self.filestore.restore(data.get("filestore", {}))
        self.lustre.restore(data.get("lustre", {}))
        self.servicenetworking.restore(data.get("servicenetworking", []))
        self.secretmanager.restore(data.get("secretmanager", []))
        self.jobs.agent.restore(data.get("guest", {}))
        self.faults.update(data.get("faults", {}))
        # A job's processes died with the old process: its VMs are lost to a host error, which the tool recovers
        # from (or reports) as it does any, so none reads RUNNING for ever. (A Slurm node's and a node agent's
        # come back by themselves on a RUNNING VM, and Slurm requeues what ran there.)
        self.compute.lose_hosts(self.jobs.agent.ran_a_job)

    def _network_exists(self, project: str, name: str) -> bool:
        if project.isdigit():  # a network named by its project's number
            project = next(iter(self.compute.project_ids(project)), "")
        try:
            self.compute.get(project, "global/networks", name)
        except ApiError:
            return False
        return True

    def _operation_seconds(self) -> float:
        """How long an operation takes (Faults.operation_seconds, else the world's), as Compute's do."""
        s = self.faults.operation_seconds
        return self.world.timings["operation_seconds"] if s is None else float(s)

    def _private_access_users(self, project: str, network: str) -> list[str]:
        """The instances that need the private service connection on `network` (Lustre's, Filestore's in
        PRIVATE_SERVICE_ACCESS mode): Service Networking refuses to delete it under them."""
        return [*self.lustre.on_network(project, network), *self.filestore.on_network(project, network)]

    # -- addresses -----------------------------------------------------------------------
    @property
    def address(self) -> str:
        if self.port is None:
            raise RuntimeError("the emulator is not started")
        return f"{HOST}:{self.port}"

    def serving_address(self) -> str | None:
        """HOST:PORT once the emulator serves; None before (what the job runner's reporters write to)."""
        return self.address if self.port is not None else None

    @property
    def url(self) -> str:
        return f"http://{self.address}"

    def info(self) -> dict:
        return {
            "name": "gcpgpu-emulator",
            "rest": self.address,
            "grpc": f"{HOST}:{self.grpc_port}" if self.grpc_port else None,
            # Each API and where it answers: a REST base URL, or "grpc" (on the port above).
            "apis": {
                "compute": f"{self.url}/compute/v1/",
                "aiplatform": f"{self.url}/v1/ and grpc",
                "logging": f"{self.url}/v2/",
                "cloudbuild": "grpc",
                "monitoring": f"{self.url}/monitoring/ and grpc",
                "storage": f"{self.url}/storage/v1/ (uploads /upload/storage/v1/, downloads /download/storage/v1/)",
                "secretmanager": f"{self.url}/v1/",
                "artifactregistry": f"{self.url}/v1/ (dockerImages.list)",
                "file": f"{self.url}/filestore/",
                "lustre": f"{self.url}/lustre/",
                "servicenetworking": f"{self.url}/servicenetworking/",
            },
            # gcloud's api_endpoint_overrides/NAME for every API it can reach here over REST
            # (Cloud Build is served over gRPC only, which gcloud does not speak).
            "gcloud_overrides": {
                "compute": f"{self.url}/compute/v1/",
                "aiplatform": f"{self.url}/",
                "logging": f"{self.url}/",
                "monitoring": f"{self.url}/monitoring/",
                "storage": f"{self.url}/storage/v1/",
                "secretmanager": f"{self.url}/",
                "artifactregistry": f"{self.url}/",
                "file": f"{self.url}/filestore/",
                "lustre": f"{self.url}/lustre/",
                "servicenetworking": f"{self.url}/servicenetworking/",
            },
            "iap_tunnel": f"{HOST}:{self.iap.port}" if self.iap.port else None,  # host/tunnel.py
            "simulated": "All resources are simulated in memory; no VM, GPU or network exists.",
        }

    # -- WSGI ----------------------------------------------------------------------------
    def wsgi(self, environ: dict, start_response: Callable) -> Any:
        request = Request(environ)
        refused = sandbox_refusal(self.grants, self.jobs.runner, request)
        if refused is not None:
            response = _json(refused.code, refused.to_json())
        elif request.path.startswith("/_emulator/"):
            response = self._control(request)
        elif request.path.startswith("/batch/") and request.method == "POST":
            response = self._batch(request)
        else:
            response = self._api(request)
        return response(environ, start_response)

    def _api(self, request: Request) -> Response:
        t0 = time.perf_counter()
        # Cloud Storage's media paths (/upload/storage/..., /download/storage/...) are storage's too.
        api = re.sub(r"^/((resumable/)?upload|download)/", "/", request.path).strip("/").split("/", 1)[0]
        status = 500
        try:
            if self.faults.latency_ms:
                time.sleep(self.faults.latency_ms / 1000.0)
            code = self.faults.roll_error(request.method)
            if code is not None:
                reason, message = _TRANSIENT.get(code, ("backendError", "Injected failure."))
                raise ApiError(code, reason, message)
            handler = next((h for pattern, h in self._rest if pattern.match(request.path)), None)
            if handler is None:
                raise ApiError(404, "notFound", f"The emulator serves no API at {request.path}.")
            check_served(request)  # each REST service's published schema
            result = handler.handle(request)
            mask = request.args.get("fields") or request.headers.get("X-Goog-FieldMask")
            if mask and not isinstance(result, Response) and isinstance(result[1], dict):
                result = (result[0], partial_response(result[1], mask))
            response = result if isinstance(result, Response) else _json(*result)
            status = response.status_code
        except ApiError as e:
            status = e.code
            response = _json(e.code, e.to_json())
        except Exception as e:  # a bug in the emulator: say so in Google's shape, never hang the client
            status = 500
            response = _json(500, ApiError(500, "backendError", f"emulator error: {type(e).__name__}: {e}").to_json())
        self.requests.add(
            LoggedRequest(api, request.method, request.path, request.query_string.decode(), status, time.perf_counter() - t0)
        )
        return response

    def _batch(self, request: Request) -> Response:
        """Google's HTTP batch (routes.batch): each part answered as one request."""
        return batch(request, self._api)

    def _control(self, request: Request) -> Response:
        what = request.path[len("/_emulator/"):].strip("/")
        if what == "info":
            return _json(200, self.info())
        if what == "reset" and request.method == "POST":
            self.reset()
            return _json(200, {"reset": True})
        if what == "faults":
            if request.method in ("PUT", "POST", "PATCH"):
                try:
                    self.faults.update(json.loads(request.get_data() or b"{}"))
                except (ValueError, TypeError) as e:
                    return _json(400, ApiError(400, "invalid", str(e)).to_json())
            return _json(200, self.faults.to_dict())
        if what == "requests":
            if request.method == "DELETE":
                self.requests.clear()
                return _json(200, {"cleared": True})
            return _json(200, [r.__dict__ for r in self.requests.all()])
        if what == "clock":
            return self._clock_control(request)
        if what == "save" and request.method == "POST":
            return _json(200, {"saved": str(self.save())})
        return _json(404, ApiError(404, "notFound", f"no emulator control endpoint {request.path}").to_json())

    def _clock_control(self, request: Request) -> Response:
        """GET: the emulator's time; POST {"advance": SECONDS} and/or {"rate": R} sets it forward or runs it
        R times as fast (0 stops it): what every process on its published clock (gcpgpu.gcp.clock) sees."""
        if request.method == "POST":
            try:
                body = json.loads(request.get_data() or b"{}")
                if not isinstance(body, dict) or not set(body) <= {"advance", "rate"}:
                    raise ValueError('give {"advance": SECONDS} and/or {"rate": R}')
                advance = checked("advance", body.get("advance", 0), MAX_ADVANCE)
                rate = None if body.get("rate") is None else checked("rate", body["rate"], MAX_RATE)
                if rate is not None:  # both checked before either moves the clock
                    self.clock.scale(rate)
                self.clock.advance(advance)
            except (ValueError, TypeError) as e:
                return _json(400, ApiError(400, "invalid", str(e)).to_json())
        return _json(200, {"now": self.clock.now(), "rate": self.clock.rate, "published": self.clock.published})

    # -- servers -------------------------------------------------------------------------
    def start(self, port: int = 0, grpc_port: int = 0) -> Emulator:
        """Serve REST on 127.0.0.1:`port` and gRPC on 127.0.0.1:`grpc_port` in background threads; 0 picks a
        free one. Every request passes the gate first (gate.py: loopback Host, own Origin, JSON bodies, a size
        cap). A port it cannot listen on raises PortUnavailable, with nothing left listening."""
        from .http_server import HttpServer

        try:
            self._http = HttpServer(guarded(self.wsgi, lambda: self.port), HOST, port)
        except OSError as e:
            raise PortUnavailable("REST", port, e.errno or 0, e.strerror or str(e)) from e
        self.port = self._http.port
        if GRPC_SERVICES or GRPC_SERVICE_FACTORIES:
            try:
                self._start_grpc(grpc_port)
            except PortUnavailable:
                self._http.stop()
                self._http, self.port = None, None
                raise
        self.fault_clock.start()
        self.iap.start(HOST)
        return self

    def _start_grpc(self, port: int = 0) -> None:
        import errno
        import socket
        from concurrent import futures

        import grpc

        if port:  # tried first with a plain socket: its error says why, where grpc's core logs a paragraph
            with socket.socket() as probe:
                try:
                    probe.bind((HOST, port))
                except OSError as e:
                    raise PortUnavailable("gRPC", port, e.errno or 0, e.strerror or str(e)) from e
        # No SO_REUSEPORT (grpc's default): a second emulator on the same --grpc-port would answer half the calls.
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=16, thread_name_prefix="emulator-grpc"),
                             options=[("grpc.so_reuseport", 0)])
        try:
            bound = server.add_insecure_port(f"{HOST}:{port}")
        except RuntimeError:  # grpcio >= 1.56 raises where older ones returned 0
            bound = 0
        if not bound:
            server.stop(None)
            raise PortUnavailable("gRPC", port, errno.EADDRINUSE, "Address already in use")
        factories = [_load(t) for t in GRPC_SERVICES] + list(GRPC_SERVICE_FACTORIES)
        server.add_generic_rpc_handlers([factory(self) for factory in factories])
        server.start()
        self._grpc, self.grpc_port = server, bound

    def stop(self) -> None:
        self.fault_clock.stop()
        self.iap.stop()
        self.node_ssh.reset()
        self.engine.reset()
        if self._http is not None:
            self._http.stop()
            self._http = None
        if self._grpc is not None:
            self._grpc.stop(grace=0.5)
            self._grpc = None
        if self.state_file is not None:
            self.save()

    def __enter__(self) -> Emulator:
        return self.start() if self.port is None else self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


@contextmanager
def mock_gcp(faults: Faults | None = None, run_user_commands: bool = True) -> Iterator[Emulator]:
    """An emulator on a free loopback port for the length of a `with` block.

    It sets GCPGPU_EMULATOR, the same variable a user sets by hand, so the code under test builds
    its clients exactly as it does in production.
    """
    emu = Emulator(faults=faults, run_user_commands=run_user_commands).start()
    previous = os.environ.get("GCPGPU_EMULATOR")
    os.environ["GCPGPU_EMULATOR"] = emu.address
    try:
        yield emu
    finally:
        if previous is None:
            os.environ.pop("GCPGPU_EMULATOR", None)
        else:
            os.environ["GCPGPU_EMULATOR"] = previous
        emu.stop()


def serve_forever(
    port: int,
    state_file: str | None = None,
    faults: Faults | None = None,
    announce: Callable[[Emulator], None] | None = None,
    run_user_commands: bool = False,
    grpc_port: int = 0,
) -> None:
    """Server mode: run until SIGINT/SIGTERM, then save state (if a state file was given) and exit."""
    emu = Emulator(faults=faults, state_file=state_file, run_user_commands=run_user_commands)
    stop = threading.Event()

    def _stop(signum: int, frame: Any) -> None:
        stop.set()

    old = {s: signal.signal(s, _stop) for s in (signal.SIGINT, signal.SIGTERM)}
    started = False
    try:
        emu.start(port, grpc_port)  # a port it cannot have: nothing served, nothing saved
        started = True
        if announce:
            announce(emu)
        while not stop.wait(0.5):
            pass
    finally:
        if started:
            emu.stop()
        for s, h in old.items():
            signal.signal(s, h)
