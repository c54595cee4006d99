"""Run a job's replicas as local processes, as the cloud would run them on separate machines.

Each replica is one process in its own session (so a cancel stops it and every child it started,
torchrun's workers included), with the environment the caller gives (CLUSTER_SPEC for Vertex AI,
NODE_RANK/MASTER_ADDR for a cluster node). Output is captured line by line with timestamps:
that is what the emulator's Cloud Logging serves, so `job logs` shows the job's own words.

A run ends SUCCEEDED when every replica exits 0, FAILED as soon as one exits non-zero (the others
are stopped, as Vertex AI stops a job whose replica failed), CANCELLED when cancelled. Stopping is
SIGTERM first (the trainer saves a checkpoint on it), SIGKILL after a grace period.

Sidecars: `Runner(sidecar=...)`, when given, is asked for each replica it starts whether a helper
process runs beside it (the metrics reporter next to rank 0, as the image's entrypoint starts it,
for the MetricsTarget the run was started with). A
sidecar never decides how the run ends: it cannot fail the job, even by not starting. Once every
replica has ended it is sent SIGTERM and waited for (the reporter writes its last points then)
before the run is reported ended; a cancel stops it with the replicas; reset kills it at once.
"""

from __future__ import annotations

import atexit
import itertools
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from gcpgpu.trainer.argv import DIE_WITH_PARENT, trainer_args
from gcpgpu.trainer.argv import MODULE as TRAINER_MODULE

from . import forked
from .lastwords import banner
from .procs import descendants, kill_family, signal_group, spawn, start_time
from .storage import PathRefused

# Variables of the emulator's own process that must not leak into a job: a replica's rendezvous
# comes from what the job is given, never from whatever launched the emulator.
_DROP_ENV = (
    "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "ROLE_RANK", "MASTER_ADDR",
    "MASTER_PORT", "NNODES", "NODE_RANK", "CLUSTER_SPEC", "TORCHELASTIC_RUN_ID", "GCPGPU_EMULATOR",
    "CLOUD_ML_JOB_ID", "AIP_MODEL_DIR", "AIP_CHECKPOINT_DIR", "AIP_TENSORBOARD_LOG_DIR",
    "GCPGPU_TRAINER_TEST_SIGTERM_AT", "GCPGPU_TRAINER_TEST_DIE_AT", "PYTEST_CURRENT_TEST",
)  # fmt: skip
# A job's variables that would make a process load code from wherever they point: the dynamic loader's,
# glibc's, Python's (all but a few switches), and the caches torch.compile loads compiled kernels from. A
# replica started without a sandbox (the bundled trainer: no `prepare`) runs as the emulator's own user on
# this machine, so they are dropped from the job's environment there, with a line in its log saying which.
# In the sandbox (sandbox.py) a job's command keeps them.
_SAFE_PYTHON = ("PYTHONUNBUFFERED", "PYTHONHASHSEED", "PYTHONFAULTHANDLER", "PYTHONDONTWRITEBYTECODE",
                "PYTHONIOENCODING", "PYTHONUTF8")
_LOADS_CODE = re.compile(r"LD_\w*|GCONV_PATH|LOCPATH|NLSPATH|HOSTALIASES|BASH_ENV|ENV|PYTHON\w*|TORCHINDUCTOR_CACHE_DIR"
                         r"|TRITON_CACHE_DIR|TORCH_EXTENSIONS_DIR")
# Keep what the captured log holds per run bounded (a long --follow demo must not grow forever).
MAX_LINES = 20000
STOP_GRACE_S = 5.0
# What the training image's entrypoint gives the reporter after the trainer ends (stop_reporter: 300 tenths
# of a second) before it SIGKILLs it: its stop may join a write in flight and then make a last one, each up
# to its 10 s timeout, so 20 s was less than the reporter can need on a loaded node.
SIDECAR_STOP_S = 30.0
FAMILY_SCAN_S = 0.5  # how often a running replica's processes are listed (/proc), so its orphans can be killed


@dataclass(frozen=True)
class MetricsTarget:
    """Where a run's trainer numbers go: `--cluster NAME` or `--job ID` of gcpgpu.node.reporter."""

    project: str
    location: str  # the node's zone, or the Vertex job's region
    kind: str  # cluster | job
    name: str


# What a replica's `prepare` gives the runner: the command line, the process's whole environment and the
# file descriptors it inherits (the runner closes its own copies once the process has started).
Launch = tuple[list[str], dict[str, str], list[int]]


@dataclass(frozen=True)
class ReplicaSpec:
    """One process of a job: `task` names it in logs and status (workerpool0-0, or a node's name).

    `prepare`, when given, is asked right before the process starts, with the runner's environment for it
    (this machine's less _DROP_ENV, without `env`), and says how to start it (a Launch): a sandboxed
    command (sandbox.py) opens its mounts then, so nothing changes between their check and their use,
    and hands `env` to the sandbox alone. A PathRefused it raises fails the run with its one line.
    """

    task: str
    argv: list[str]
    env: dict[str, str]
    prepare: Callable[[dict[str, str]], Launch] | None = None


@dataclass(frozen=True)
class LogLine:
    seq: int
    time: float
    task: str
    stream: str  # stdout | stderr
    text: str


@dataclass
class Replica:
    spec: ReplicaSpec
    popen: subprocess.Popen | forked.Forked | None = None
    returncode: int | None = None
    started: float | None = None
    ended: float | None = None
    last_error: str = ""  # the last non-empty stderr line: what a failure message quotes
    readers: list[threading.Thread] = field(default_factory=list)
    # Every process seen under it, as (pid, start time): a worker orphaned when its launcher died of
    # a SIGTERM is still the replica's to kill.
    family: set[tuple[int, int]] = field(default_factory=set)


class Run:
    """One job's processes; state is 'pending', 'running', 'cancelling' or one of TERMINAL."""

    TERMINAL = ("succeeded", "failed", "cancelled")

    def __init__(self, run_id: str, replicas: list[ReplicaSpec], workdir: Path, seq: itertools.count,
                 describe: Callable[[LogLine], dict] | None = None, metrics: MetricsTarget | None = None,
                 on_line: Callable[[LogLine], None] | None = None) -> None:
        self.id = run_id
        self.on_line = on_line  # told each line as it is captured (the job agent reads the steps a job makes)
        self.workdir = workdir
        # Turns a captured line into the Cloud Logging entry the real service would write for it.
        self.describe = describe
        # Where the trainer of its first replica (rank 0) reports its numbers; None: nowhere.
        self.metrics = metrics
        self._seq = seq
        self.replicas = [Replica(r) for r in replicas]
        self.sidecars: list[Replica] = []  # helpers beside replicas (the metrics reporter); never decide the state
        self.state = "pending"
        self.started: float | None = None
        self.ended: float | None = None
        self.failure: tuple[str, int, str] | None = None  # (task, exit code, last error line)
        self.kill_after_s: float | None = None  # the SIGTERM -> SIGKILL grace when it is not the runner's own
        self.lines: list[LogLine] = []
        self._lock = threading.Lock()
        self._cancel = threading.Event()
        self._done = threading.Event()

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the run has ended (True) or `timeout` passes (False)."""
        return self._done.wait(timeout)

    def log(self, task: str, stream: str, text: str) -> None:
        line = LogLine(next(self._seq), time.time(), task, stream, text)
        with self._lock:
            self.lines.append(line)
            if len(self.lines) > MAX_LINES:
                del self.lines[: len(self.lines) - MAX_LINES]
        if self.on_line is not None:
            try:
                self.on_line(line)
            except Exception as e:  # a watcher's bug must not stop the job's output being read
                print(f"gcpgpu emulator: job {self.id}: reading its line failed: {e}", file=sys.stderr)

    def log_lines(self) -> list[LogLine]:
        with self._lock:
            return list(self.lines)

    def pids(self) -> list[int]:
        return [r.popen.pid for r in self.replicas if r.popen is not None]

    def alive(self) -> list[int]:
        """Process ids of replicas still running (tests check that a cancel leaves none)."""
        return [r.popen.pid for r in self.replicas if r.popen is not None and r.popen.poll() is None]

    def sidecars_alive(self) -> list[int]:
        return [r.popen.pid for r in self.sidecars if r.popen is not None and r.popen.poll() is None]


class Runner:
    """Starts, watches and stops local runs; one per emulator."""

    def __init__(self, root: str | os.PathLike | None = None, stop_grace_s: float = STOP_GRACE_S,
                 sidecar: Callable[[Run, Replica], list[str] | list[list[str]] | None] | None = None) -> None:
        self._root = Path(root) if root else None
        self.stop_grace_s = stop_grace_s
        self.runs: dict[str, Run] = {}
        self._lock = threading.Lock()
        self._seq = itertools.count(1)
        # Asked once per started replica (its process is running): the argv of a helper to run beside
        # it, in the same folder and environment, or None. LocalJobs gives one that starts metrics reporters.
        self.sidecar = sidecar
        self.sidecar_stop_s = SIDECAR_STOP_S
        atexit.register(self._at_exit)  # never leave a trainer (or its files) behind the emulator

    @property
    def root(self) -> Path:
        """The folder runs work in (their output directories stand in for gs:// paths)."""
        if self._root is None:
            self._root = Path(tempfile.mkdtemp(prefix="gcpgpu-emulator-jobs-"))
        return self._root

    def workdir(self, run_id: str) -> Path:
        path = self.root / "".join(c if c.isalnum() or c in "-_." else "_" for c in run_id)
        path.mkdir(parents=True, exist_ok=True)
        return path

    def get(self, run_id: str) -> Run | None:
        with self._lock:
            return self.runs.get(run_id)

    def record(self, run_id: str, describe: Callable[[LogLine], dict] | None = None) -> Run:
        """A run that starts no process: only log lines (what a simulated job says about itself)."""
        run = Run(run_id, [], self.workdir(run_id), self._seq, describe)
        self._add(run)
        run._done.set()
        return run

    def start(self, run_id: str, replicas: list[ReplicaSpec], *, delay_s: float = 0.0,
              on_change: Callable[[Run], None] | None = None,
              describe: Callable[[LogLine], dict] | None = None, metrics: MetricsTarget | None = None,
              on_line: Callable[[LogLine], None] | None = None) -> Run:
        """Start `replicas` after `delay_s` (the provisioning the cloud would do first), in the background;
        `on_line` is told each line of their output as it comes."""
        run = Run(run_id, replicas, self.workdir(run_id), self._seq, describe, metrics, on_line)
        self._add(run)
        thread = threading.Thread(target=self._supervise, args=(run, delay_s, on_change),
                                  name=f"emulator-run-{run_id}", daemon=True)
        thread.start()
        return run

    def _add(self, run: Run) -> None:
        with self._lock:
            old = self.runs.get(run.id)
            if old is not None and not old.done:
                raise RuntimeError(f"run {run.id} is already running")
            self.runs[run.id] = run

    def all_runs(self) -> list[Run]:
        with self._lock:
            return list(self.runs.values())

    def cancel(self, run_id: str) -> None:
        """Stop a run: SIGTERM to every replica's process group, SIGKILL after the grace period."""
        run = self.get(run_id)
        if run is not None and not run.done:
            run._cancel.set()

    def lose(self, run_id: str, grace_s: float, reason: str) -> None:
        """The machine under a run went away: it fails with `reason`; SIGTERM now and SIGKILL after
        `grace_s` (a preemption notice), or SIGKILL at once when `grace_s` is 0 (a host error)."""
        run = self.get(run_id)
        if run is None or run.done:
            return
        run.kill_after_s = grace_s
        if grace_s <= 0:  # before the failure is set: the supervisor's SIGTERM must not orphan anything first
            self._stop(run, signal.SIGKILL)
        if run.failure is None:
            run.failure = (run.replicas[0].spec.task if run.replicas else "?", -1, reason)

    def reset(self) -> None:
        """Kill every run at once and forget them (the emulator's reset)."""
        self.kill_all()
        with self._lock:
            runs, self.runs = list(self.runs.values()), {}
        for run in runs:
            run.wait(10)
        if self._root is not None:
            shutil.rmtree(self._root, ignore_errors=True)
            self._root = None

    def _at_exit(self) -> None:
        self.kill_all()
        if self._root is not None:
            shutil.rmtree(self._root, ignore_errors=True)

    def kill_all(self) -> None:
        with self._lock:
            runs = list(self.runs.values())
        for run in runs:
            run._cancel.set()
            for pid in run.pids() + [r.popen.pid for r in run.sidecars if r.popen is not None]:
                signal_group(pid, signal.SIGKILL)

    # -- the supervisor thread ---------------------------------------------------------------
    def _supervise(self, run: Run, delay_s: float, on_change: Callable[[Run], None] | None) -> None:
        def changed() -> None:
            if on_change is not None:
                try:
                    on_change(run)
                except Exception as e:  # a reporting bug must not leave processes unwatched
                    print(f"gcpgpu emulator: job {run.id}: state report failed: {e}", file=sys.stderr)

        try:
            if run._cancel.wait(delay_s):
                self._finish(run, "cancelled")
                return
            self._launch(run)
            run.state = "running"
            run.started = time.time()
            changed()
            self._watch(run)
        except Exception as e:  # e.g. the executable is missing: the job fails, saying why
            run.failure = run.failure or (run.replicas[0].spec.task if run.replicas else "?", -1,
                                          str(e) if isinstance(e, PathRefused) else f"{type(e).__name__}: {e}")
            self._stop(run, signal.SIGKILL)
            self._end_sidecars(run, grace_s=0.0)
            self._finish(run, "failed")
        finally:
            if not run.done:
                self._finish(run, run.state if run.state in Run.TERMINAL else "failed")
            changed()

    def _launch(self, run: Run) -> None:
        for replica in run.replicas:
            env = {k: v for k, v in os.environ.items() if k not in _DROP_ENV}
            # The bundled trainer must import from this checkout or installation, whatever the cwd.
            pkg_root = str(Path(__file__).resolve().parents[3])
            env["PYTHONPATH"] = pkg_root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
            env.setdefault("OMP_NUM_THREADS", "1")  # many replicas share few cores here
            # Replicas talk over loopback only: gloo binds the interface it is told, not the host's name.
            env.setdefault("GLOO_SOCKET_IFNAME", "lo0" if sys.platform == "darwin" else "lo")
            env["PYTHONUNBUFFERED"] = "1"  # lines reach the log as they are printed
            if replica.spec.prepare is not None:
                argv, process_env, fds = replica.spec.prepare(dict(env))
            else:
                dropped = sorted(k for k in replica.spec.env if _LOADS_CODE.fullmatch(k) and k not in _SAFE_PYTHON)
                if dropped:
                    run.log(replica.spec.task, "stderr", f"gcpgpu emulator: {', '.join(dropped)} left out of the "
                                                         "job's environment: this process runs outside any sandbox, "
                                                         "where they would load code from where they point")
                job_env = {k: v for k, v in replica.spec.env.items() if k not in dropped}
                # The bundled trainer's workers die with the torchrun that started them (a sandbox dies whole).
                argv, process_env, fds = replica.spec.argv, {**env, **job_env, DIE_WITH_PARENT: "1"}, []
            try:
                popen = spawn(argv, process_env, run.workdir, fds)
            finally:
                for fd in fds:
                    os.close(fd)
            replica.popen, replica.started = popen, time.time()
            self._follow(run, replica)
            # A sandboxed command's environment stays in its sandbox: a helper beside it gets the runner's own.
            self._start_sidecar(run, replica, env if replica.spec.prepare is not None else process_env)

    def _follow(self, run: Run, replica: Replica) -> None:
        popen = replica.popen
        assert popen is not None
        for stream, pipe in (("stdout", popen.stdout), ("stderr", popen.stderr)):
            t = threading.Thread(target=self._read, args=(run, replica, stream, pipe), daemon=True,
                                 name=f"emulator-log-{run.id}-{replica.spec.task}-{stream}")
            t.start()
            replica.readers.append(t)

    def _start_sidecar(self, run: Run, replica: Replica, env: dict[str, str]) -> None:
        """The helper beside `replica`, if the hook names one; its troubles are logged, never the job's."""
        if self.sidecar is None:
            return
        try:
            named = self.sidecar(run, replica)
        except Exception as e:
            run.log(replica.spec.task, "stderr", f"gcpgpu emulator: no helper started beside {replica.spec.task} "
                                                 f"({type(e).__name__}: {e}); the job goes on")
            return
        # One helper's command line, or several (the metrics reporter on rank 0, the NIC sampler on every node).
        for argv in ([named] if named and isinstance(named[0], str) else named or []):
            try:
                popen = spawn(argv, env, run.workdir, [])
            except Exception as e:
                what = argv[2] if argv[1:2] == ["-m"] and len(argv) > 2 else Path(argv[0]).name
                run.log(replica.spec.task, "stderr", f"gcpgpu emulator: {what} did not start beside "
                                                     f"{replica.spec.task} ({type(e).__name__}: {e}); the job goes on")
                continue
            side = Replica(ReplicaSpec(replica.spec.task, argv, {}), popen, started=time.time())
            run.sidecars.append(side)
            self._follow(run, side)

    def _read(self, run: Run, replica: Replica, stream: str, pipe: object) -> None:
        for raw in iter(pipe.readline, b""):  # type: ignore[attr-defined]
            text = raw.decode("utf-8", "replace").rstrip("\r\n")
            run.log(replica.spec.task, stream, text)
            if stream == "stderr" and text.strip() and not banner(text):
                replica.last_error = text.strip()
        pipe.close()  # type: ignore[attr-defined]

    def _watch(self, run: Run) -> None:
        stop_sent: float | None = None
        scanned = float("-inf")
        while True:
            if stop_sent is None and time.monotonic() - scanned >= FAMILY_SCAN_S:
                scanned = time.monotonic()
                for replica in run.replicas:  # known before the replica dies: its orphans cannot be found after
                    if replica.returncode is None and replica.popen is not None:
                        replica.family |= descendants(replica.popen.pid)
            for replica in run.replicas:
                if replica.returncode is None and replica.popen is not None:
                    code = replica.popen.poll()
                    if code is not None:
                        replica.returncode, replica.ended = code, time.time()
                        if stop_sent is None:
                            # Its own end (not a stop the runner asked for): a container ends with its first
                            # process, and every process left in it is killed (a torchrun killed for memory
                            # leaves no worker training on, and no peer waiting for it).
                            kill_family(replica.family)
                        if code != 0 and run.failure is None and not run._cancel.is_set():
                            for t in replica.readers:
                                t.join(2)  # the failure message quotes the replica's last words
                            run.failure = (replica.spec.task, code, replica.last_error)
            if all(r.returncode is not None for r in run.replicas):
                if stop_sent is not None:  # a launcher gone on SIGTERM may leave workers: the grace holds for them
                    self._end_family(run, stop_sent + (self.stop_grace_s if run.kill_after_s is None
                                                       else run.kill_after_s))
                break
            if (run.failure is not None or run._cancel.is_set()) and stop_sent is None:
                run.state = "cancelling" if run._cancel.is_set() and run.failure is None else run.state
                self._stop(run, signal.SIGTERM)
                if run._cancel.is_set():
                    self._signal_sidecars(run, signal.SIGTERM)  # a cancel stops them with the replicas
                stop_sent = time.monotonic()
            elif stop_sent is not None and time.monotonic() - stop_sent > (
                    self.stop_grace_s if run.kill_after_s is None else run.kill_after_s):
                self._stop(run, signal.SIGKILL)
            time.sleep(0.05)
        # The job's processes are gone: its sidecars end now, before the run is seen to end (the
        # reporter's last points are in Monitoring by the time a `job submit --wait` returns).
        self._end_sidecars(run, grace_s=self.stop_grace_s if run._cancel.is_set() else self.sidecar_stop_s)
        for replica in run.replicas + run.sidecars:
            for t in replica.readers:
                t.join(5)
        if run._cancel.is_set() and run.failure is None:
            self._finish(run, "cancelled")
        else:
            self._finish(run, "failed" if run.failure is not None else "succeeded")

    def _stop(self, run: Run, sig: int) -> None:
        for replica in run.replicas:
            if replica.popen is None:
                continue
            replica.family |= descendants(replica.popen.pid)
            if replica.popen.poll() is None:
                signal_group(replica.popen.pid, sig)
            if sig == signal.SIGKILL:  # a dead host: whatever the replica started dies with it
                kill_family(replica.family)

    @staticmethod
    def _end_family(run: Run, deadline: float) -> None:
        """Wait until `deadline` (monotonic) for what the replicas started to exit, then SIGKILL the rest,
        as a container's end or a host's loss ends every process in it."""
        family = set().union(*(r.family for r in run.replicas))
        while any(start_time(pid) == start for pid, start in family) and time.monotonic() < deadline:
            time.sleep(0.05)
        kill_family(family)

    @staticmethod
    def _signal_sidecars(run: Run, sig: int) -> None:
        for side in run.sidecars:
            if side.popen is not None and side.popen.poll() is None:
                signal_group(side.popen.pid, sig)

    def _end_sidecars(self, run: Run, grace_s: float) -> None:
        """SIGTERM every sidecar still running and wait `grace_s` for it, then SIGKILL (at once when 0)."""
        self._signal_sidecars(run, signal.SIGTERM if grace_s > 0 else signal.SIGKILL)
        deadline = time.monotonic() + grace_s
        for side in run.sidecars:
            popen = side.popen
            if popen is None:
                continue
            try:
                popen.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                signal_group(popen.pid, signal.SIGKILL)
                popen.wait(5)
            side.returncode, side.ended = popen.returncode, time.time()

    @staticmethod
    def _finish(run: Run, state: str) -> None:
        run.state = state
        run.ended = time.time()
        run._done.set()


def trainer_argv(image: str, command: list[str], args: list[str]) -> list[str] | None:
    """The local command line for a container that runs the bundled trainer, else None (not runnable here).

    Either the gcpgpu-trainer image with trainer arguments (its entrypoint runs the trainer), or any
    image whose command is `python -m gcpgpu.trainer ...`.
    """
    own = trainer_args(image, command, args)
    return None if own is None else [sys.executable, "-m", TRAINER_MODULE, *own]
