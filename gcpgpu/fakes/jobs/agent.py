"""The emulated cluster job agent, and instances.getGuestAttributes that reads what it reports.

On a real node, the gcpgpu job agent (templates/job_agent.sh.j2, started by the node's bootstrap
when the instance metadata names a new job) runs the job's container with torchrun and reports
its state as guest attributes in the `gcpgpu/` namespace. Here, a hook on the Compute emulator's
setMetadata does the same for emulated nodes: when a node's metadata names a job (`gcpgpu-job`)
it starts that node's process with the rank, node count and master the metadata gives, on
127.0.0.1 (emulated nodes' internal IPs do not exist) and a master port free on this machine;
`gcpgpu-job-cancel` naming the job stops it.

Compute announces both the metadata change and a lost VM on the world's VmEvents (fakes/events.py);
the agent listens there, never to Compute itself.

A job runs locally when it runs the bundled trainer (see host/runner.trainer_argv): per node,
`torchrun --nnodes N --node-rank R --nproc-per-node 1 -m gcpgpu.trainer ARGS`, as the image's
entrypoint would start it with one process per GPU. Any other command runs through the image's
entrypoint in a sandbox (host/sandbox.py) when the emulator's owner allowed users' commands, and FAILS at
once with one line saying how to allow them otherwise. A job with no command whose image is not
gcpgpu's is simulated: RUNNING, then SUCCEEDED after `simulated_run_s` of the emulator's clock, and its
reports say so.

Guest attributes written per node: job-id, state (PENDING, RUNNING, SUCCEEDED, FAILED, CANCELLED),
rank, started, ended, exit-code, message. Values stay under 256 bytes, as the real service allows.

The run of the node of rank 0 also names its cluster, project and zone for the trainer's metrics
reporter (Run.metrics), which LocalJobs starts beside it when the trainer writes --log-json.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gcpgpu.trainer.argv import MODULE as TRAINER_MODULE
from gcpgpu.trainer.argv import TORCHRUN_MODULE

from ..activity import Activity, step_in
from ..core import ApiError, parse_rfc3339
from ..guest.health import NodeHealth
from ..host import mounts
from ..host.lastwords import killed
from ..host.ports import free_block
from ..host.runner import LogLine, MetricsTarget, ReplicaSpec, Run, Runner, trainer_argv
from ..host.sandbox import UserCommands, is_user_command
from ..host.shared_mounts import SharedStorage
from ..host.storage import PathRefused, Storage

if TYPE_CHECKING:

    from ..compute.backend import ComputeBackend
    from ..events import VmEvents

NAMESPACE = "gcpgpu"
MAX_VALUE = 256
SIMULATED_RUN_S = 3.0  # how long a job the emulator cannot run pretends to run
LOG_NAME = "gcplogs-docker-driver"  # what Docker's gcplogs driver writes to


def _stamp(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def container_name(job_id: str) -> str:
    """The Docker container name the agent gives a job (also how its log entries are found)."""
    return f"gcpgpu-job-{job_id}"


class ClusterAgent:
    """Runs cluster jobs on emulated nodes and keeps their guest attributes."""

    def __init__(self, compute: ComputeBackend | None, runner: Runner, activity: Activity | None = None,
                 events: VmEvents | None = None, storage: Storage | None = None,
                 user: UserCommands | None = None, shared: SharedStorage | None = None) -> None:
        self.compute = compute
        self.runner = runner
        # Where the agent records which node runs which job, for Monitoring to observe (busy vs idle nodes).
        self.activity = activity
        self.simulated_run_s = SIMULATED_RUN_S
        self.pull_s = 0.0  # how long a node's first pull of an image takes (its later pulls: none, it has it)
        self.images: dict[str, set[str]] = {}  # instance id -> the images its Docker holds
        self.storage = storage or Storage()  # where --output-dir folders live, across jobs
        # Users' own commands: run through the image's entrypoint in a sandbox, when the owner allowed it.
        self.user = user or UserCommands(gcs_root=lambda: self.storage.root / "gcs")
        # The node's shared file systems (gcpgpu-storage metadata); the emulator plugs its services in.
        self.shared = shared or SharedStorage()
        self.guest: dict[str, dict[str, str]] = {}  # instance id -> {"namespace/key": value}
        self.ports: dict[tuple[str, str], int] = {}  # (project, job id) -> master port on loopback
        self.node_runs: dict[str, str] = {}  # instance id -> run id of its current job
        self.containers: dict[str, str] = {}  # instance id -> its current sandboxed job's container name (docker exec)
        self.lost: set[str] = set()  # instance ids taken away (preempted, host error): their agents died with them
        self.nodes = NodeHealth()  # what each node's startup script reports (gcpgpu-node/)
        self._timers: list[threading.Timer] = []
        self._lock = threading.RLock()
        if events is not None:
            events.on_metadata_changed(self.on_metadata)
            events.on_vm_lost(self.on_lost)

    def reset(self) -> None:
        with self._lock:
            for timer in self._timers:
                timer.cancel()
            self._timers.clear()
            self.guest.clear()
            self.nodes.reset()
            self.ports.clear()
            self.node_runs.clear()
            self.containers.clear()
            self.lost.clear()
            self.simulated_run_s = SIMULATED_RUN_S
            self.pull_s = 0.0
            self.images.clear()
        self.storage.reset()

    def snapshot(self) -> dict[str, dict[str, str]]:
        """The nodes' guest attributes (their reports), for the server's --state-file."""
        with self._lock:
            return {iid: dict(attrs) for iid, attrs in self.guest.items()}

    def restore(self, guest: dict[str, dict[str, str]]) -> None:
        with self._lock:
            self.guest = {str(iid): dict(attrs) for iid, attrs in guest.items()}

    def ran_a_job(self, inst: dict) -> bool:
        """Whether a job (not a Slurm node's task: Slurm's own story) was on `inst` by its last report."""
        items = {i.get("key"): i.get("value") for i in (inst.get("metadata") or {}).get("items", [])}
        state = self.attributes(str(inst.get("id"))).get(f"{NAMESPACE}/state")
        return items.get("gcpgpu-scheduler") != "slurm" and state not in (None, "SUCCEEDED", "FAILED", "CANCELLED")

    # -- guest attributes ---------------------------------------------------------------------
    def report(self, instance_id: str, **values: Any) -> None:
        with self._lock:
            attrs = self.guest.setdefault(instance_id, {})
            for key, value in values.items():
                attrs[f"{NAMESPACE}/{key.replace('_', '-')}"] = str(value).encode()[:MAX_VALUE].decode("utf-8", "ignore")

    def attributes(self, instance_id: str) -> dict[str, str]:
        with self._lock:
            return dict(self.guest.get(instance_id, {}))

    # -- the setMetadata hook -------------------------------------------------------------------
    def on_metadata(self, project: str, zone: str, name: str) -> None:
        """The setMetadata hook. The real agent's troubles never fail the API call, and neither do these."""
        try:
            self._on_metadata(project, zone, name)
        except Exception as e:
            print(f"gcpgpu emulator: job agent on {name}: {type(e).__name__}: {e}", file=sys.stderr)

    def _on_metadata(self, project: str, zone: str, name: str) -> None:
        try:
            inst = self.compute.get(project, f"zones/{zone}/instances", name)
        except ApiError:
            return
        items = {i.get("key"): i.get("value") or "" for i in inst.get("metadata", {}).get("items", [])}
        raw = items.get("gcpgpu-job")
        if not raw:
            return
        try:
            job = json.loads(raw)
            job_id = str(job.get("run") or job["id"])  # this attempt of the job (recoveries rerun it)
            rank = int(items.get("gcpgpu-node-rank", "0"))
            nnodes = int(items.get("gcpgpu-nnodes", "1"))
        except (ValueError, KeyError, TypeError):
            self.report(inst["id"], state="FAILED", message="gcpgpu-job metadata is not the agent's JSON")
            return
        run_id = f"cluster/{project}/{job_id}/{name}"
        with self._lock:
            current = self.node_runs.get(inst["id"])
            if items.get("gcpgpu-job-cancel") == job_id:
                self._cancel(inst["id"], run_id)
                return
            if current == run_id:
                if items.get("gcpgpu-job-dump") == job_id:
                    self._dump(inst, run_id, job)
                return  # the same job again (e.g. a retried setMetadata): already handled
            self._take(inst["id"], run_id)
            if inst.get("status") != "RUNNING":
                self.report(inst["id"], job_id=job_id, state="PENDING", rank=rank,
                            message="the node is not RUNNING; the agent starts the job when it boots")
                return
            self._start(project, zone, inst, job, job_id, rank, nnodes, run_id)

    def _take(self, instance_id: str, run_id: str) -> None:
        """`run_id` is the node's job now: a new job replaces the node's old one, as the real agent does."""
        current = self.node_runs.get(instance_id)
        if current is not None and current != run_id:
            self.runner.cancel(current)
            if self.activity is not None:
                self.activity.end(instance_id, current)
        self.node_runs[instance_id] = run_id

    # -- a Slurm task's container (slurm_engine.py) ---------------------------------------------
    def run_job(self, project: str, zone: str, inst: dict, job: dict, job_id: str, rank: int, nnodes: int) -> str:
        """Run `job` (attempt `job_id`) on node `inst` exactly as for a job put in its metadata, with the rank
        and node count Slurm's allocation gave; its run id."""
        run_id = f"cluster/{project}/{job_id}/{inst['name']}"
        with self._lock:
            self._take(inst["id"], run_id)
            self._start(project, zone, inst, job, job_id, rank, nnodes, run_id)
        return run_id

    def stop(self, instance_id: str, run_id: str) -> None:
        """Stop the node's run `run_id` (SIGTERM, SIGKILL after the runner's grace), as a cancel does."""
        with self._lock:
            if self.node_runs.get(instance_id) == run_id:
                self._cancel(instance_id, run_id)

    def exit_code(self, instance_id: str, job_id: str) -> int | None:
        """How the node's process of attempt `job_id` ended, as a container's exit code; None while it has not."""
        attrs = self.attributes(instance_id)
        state = attrs.get(f"{NAMESPACE}/state")
        if attrs.get(f"{NAMESPACE}/job-id") != job_id or state not in ("SUCCEEDED", "FAILED", "CANCELLED"):
            return None
        if state == "SUCCEEDED":
            return 0
        code = attrs.get(f"{NAMESPACE}/exit-code", "")
        return int(code) if code.lstrip("-").isdigit() and int(code) > 0 else 143 if state == "CANCELLED" else 1

    def on_lost(self, project: str, zone: str, name: str, instance_id: str, kind: str, notice_s: float) -> None:
        """A loss observer: the VM was preempted (SIGTERM, then SIGKILL after the notice) or its host failed
        (SIGKILL now). The node's agent goes with it, so it reports nothing more."""
        with self._lock:
            self.lost.add(str(instance_id))
            run_id = self.node_runs.get(str(instance_id))
        if run_id is None:
            return
        run = self.runner.get(run_id)
        why = {"preempt": "preempted", "max_run_duration": "ended by Compute Engine at its maxRunDuration"}.get(
            kind, "lost to a host error")
        if run is not None and run.replicas and not run.done:
            run.log("", "stderr", f"gcpgpu emulator: node {name} was {why}"
                                  + (f": SIGTERM now, SIGKILL in {notice_s:g}s" if notice_s > 0 else ": killed"))
            self.runner.lose(run_id, notice_s, f"node {name} was {why}")
        elif self.activity is not None:  # a simulated job stops being busy with its node
            self.activity.end(instance_id, run_id)

    def _cancel(self, instance_id: str, run_id: str) -> None:
        if instance_id in self.lost:
            return  # nobody on that node to hear it
        run = self.runner.get(run_id)
        if run is not None and run.replicas and not run.done:
            self.runner.cancel(run_id)  # CANCELLED reported when its processes are gone
        elif self.attributes(instance_id).get(f"{NAMESPACE}/state") not in ("SUCCEEDED", "FAILED", "CANCELLED"):
            self.report(instance_id, state="CANCELLED", ended=_stamp(self._now()), message="cancelled")
        if self.activity is not None and (run is None or not run.replicas):  # a simulated job stops being busy here
            self.activity.end(instance_id, run_id)

    def _dump(self, inst: dict, run_id: str, job: dict) -> None:
        """What the node's agent does when a follower saw the job stall (templates/job_agent.sh.j2):
        py-spy stacks of the job's processes into its log where py-spy exists, else a line saying so;
        NCCL's flight recorder is off here (CPU runs use gloo)."""
        iid = inst["id"]
        if self.attributes(iid).get(f"{NAMESPACE}/dump"):
            return  # asked once per attempt
        run = self.runner.get(run_id)
        if run is None or not run.replicas or run.done:
            self.report(iid, dump="absent", nccl_trace="off")
            return
        spy = shutil.which("py-spy")
        if spy is None:
            run.log(inst["name"], "stderr", "gcpgpu agent: py-spy is not in the image: no Python stacks captured")
        for pid in run.alive() if spy else []:
            done = subprocess.run([spy, "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=30,
                                  check=False)
            for line in [f"== py-spy dump of pid {pid}", *(done.stdout or done.stderr).splitlines()]:
                run.log(inst["name"], "stdout", line)
        trace = str((job.get("env") or {}).get("TORCH_NCCL_TRACE_BUFFER_SIZE", "0")) not in ("", "0")
        self.report(iid, dump="py-spy" if spy else "absent", nccl_trace="off (gloo on CPU)" if trace else "off")

    def _start(self, project: str, zone: str, inst: dict, job: dict, job_id: str, rank: int, nnodes: int,
               run_id: str, pulled: float | None = None) -> None:
        iid = inst["id"]
        self.lost.discard(iid)  # running again (instances.start): its agent is back
        if pulled is None:
            self.guest.pop(iid, None)
            self.report(iid, job_id=job_id, state="PENDING", rank=rank, message="pulling the image")
            # The agent pulls the job's image first (templates/job_agent.sh.j2): a node's first pull of it
            # takes pull_s, on the emulator's clock; a node that holds it (an earlier job's) none.
            image = str(job.get("image") or "")
            took = 0.0 if image in self.images.get(iid, set()) else self._left_to_pull(inst, image)
            self.images.setdefault(iid, set()).add(image)
            if took > 0:
                self._timers.append(self._later(took, self._pulled, project, zone, inst, job, job_id, rank, nnodes,
                                                run_id, took))
                return
            pulled = took
        self.report(iid, pull_s=f"{pulled:.3f}", message="")
        if job.get("rxdm"):
            # The agent starts Google's receive-datapath manager first (TCPX/TCPXO); a node whose
            # GPUDirect host pieces are missing cannot run it, and the job fails with the agent's line.
            health = self.nodes.attributes(inst)
            if health.get("gcpgpu-node/gpudirect", "ready") != "ready":
                self.report(iid, state="FAILED", rxdm="down", ended=_stamp(self._now()),
                            message=f"receive-datapath manager ({job['rxdm']}) exited: "
                                    f"{health['gcpgpu-node/gpudirect']}")
                return
            self.report(iid, rxdm="up")
        describe = self._describer(project, zone, inst, str(job.get("id") or job_id), job.get("image", ""))
        unmounted = mounts.cluster_failure(job, self.storage)
        if unmounted is not None:  # the agent mounts every --mount bucket before the container starts
            self.runner.record(run_id, describe).log("", "stderr", f"gcpgpu agent: {unmounted}")
            self.report(iid, state="FAILED", ended=_stamp(self._now()), message=unmounted)
            return
        try:  # the node mounts its shared file systems at boot: a job on a node whose mount failed fails
            shared = self.shared.mounts(inst)
        except PathRefused as e:
            self._fail_at_once(iid, run_id, describe, str(e))
            return
        self.storage.share(iid, [(m.target, m.parts) for m in shared])
        argv = trainer_argv(job.get("image", ""), list(job.get("command") or []), list(job.get("args") or []))
        if argv is None and is_user_command(list(job.get("command") or []), list(job.get("args") or [])) \
                and nnodes >= 1:
            self._start_user(project, job, job_id, inst, rank, nnodes, run_id, describe, shared)
            return
        if argv is None or nnodes < 1:
            run = self.runner.record(run_id, describe)
            why = f"image {job.get('image')!r}" + (f" with command {job.get('command')!r}" if job.get("command") else "")
            run.log("", "stdout", f"gcpgpu emulator: this job is simulated on node {inst['name']}, nothing runs: "
                                  f"{why} is not the bundled trainer.")
            self.report(iid, state="RUNNING", started=_stamp(self._now()), message="simulated by the emulator")
            if self.activity is not None:
                self.activity.begin(iid, run_id)
            self._timers.append(self._later(self.simulated_run_s, self._simulated_end, iid, run_id))
            return
        port = self.ports.setdefault((project, job_id), free_block())
        # Output folders (gs:// buckets, node paths) as local folders that outlive the job, as on a node.
        try:
            env = self.storage.localize_env({str(k): str(v) for k, v in (job.get("env") or {}).items()}, iid)
            argv = [*argv[:3], *self.storage.localize_args(argv[3:], iid, self.runner.workdir(run_id))]
        except PathRefused as e:
            self._fail_at_once(iid, run_id, describe, str(e))
            return
        env.update(NNODES=str(nnodes), NODE_RANK=str(rank), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   GCPGPU_TRAINER_ALLOW_CPU="1")
        if not job.get("command"):
            # The image's entrypoint: torchrun with one process per GPU; one process on this CPU. torchrun's
            # own code, ended without the interpreter's teardown (trainer/torchrun.py): ~1 s less per node.
            argv = [sys.executable, "-m", TORCHRUN_MODULE, "--nnodes", str(nnodes), "--node-rank", str(rank),
                    "--nproc-per-node", "1", "--master-addr", "127.0.0.1", "--master-port", str(port),
                    "-m", TRAINER_MODULE, *argv[3:]]
        cluster = _cluster_of(inst, job)
        metrics = MetricsTarget(project, zone, "cluster", cluster) if rank == 0 and cluster else None
        run = self.runner.start(run_id, [ReplicaSpec(inst["name"], argv, env)],
                                on_change=self._on_change(iid), describe=describe, metrics=metrics,
                                on_line=self._stepper(run_id))
        run.log("", "stdout", f"gcpgpu emulator: node {inst['name']} (rank {rank} of {nnodes}) runs job {job_id} "
                              f"locally on 127.0.0.1:{port}, CPU only, one process")

    def _pulled(self, project: str, zone: str, inst: dict, job: dict, job_id: str, rank: int, nnodes: int,
                run_id: str, took: float) -> None:
        """The pull is over: start the job, unless the node went, or the job was cancelled or replaced meanwhile."""
        with self._lock:
            iid = inst["id"]
            state = self.attributes(iid).get(f"{NAMESPACE}/state")
            if self.node_runs.get(iid) != run_id or iid in self.lost or state != "PENDING":
                return
            try:
                self._start(project, zone, inst, job, job_id, rank, nnodes, run_id, pulled=took)
            except Exception as e:  # as on_metadata: the agent's troubles are its node's, never a crash here
                print(f"gcpgpu emulator: job agent on {inst['name']}: {type(e).__name__}: {e}", file=sys.stderr)

    def _start_user(self, project: str, job: dict, job_id: str, inst: dict, rank: int, nnodes: int, run_id: str,
                    describe: Callable[[LogLine], dict], shared: list | None = None) -> None:
        """A user's command on this node: the image's entrypoint in a sandbox (host/sandbox.py), or FAILED at once
        with the one line saying why it cannot run here."""
        iid = inst["id"]
        why = self.user.refusal()
        if why is not None:
            self._fail_at_once(iid, run_id, describe, why)
            return
        port = self.ports.setdefault((project, job_id), free_block())
        env = {str(k): str(v) for k, v in (job.get("env") or {}).items()}
        env.update(NNODES=str(nnodes), NODE_RANK=str(rank), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        command = [*map(str, job.get("command") or []), *map(str, job.get("args") or [])]
        replica = self.user.replica(inst["name"], command, env, self.runner.workdir(run_id) / "workdir",
                                    shared=shared, shared_root=self.storage.root)
        run = self.runner.start(run_id, [replica], on_change=self._on_change(iid), describe=describe,
                                on_line=self._stepper(run_id))
        self.containers[iid] = container_name(str(job.get("id") or job_id))
        run.log("", "stdout", f"gcpgpu emulator: node {inst['name']} (rank {rank} of {nnodes}) runs job {job_id}'s "
                              f"command through the image's entrypoint in a sandbox, on 127.0.0.1:{port}, CPU only")

    def _fail_at_once(self, iid: str, run_id: str, describe: Callable[[LogLine], dict], why: str) -> None:
        """The node's job FAILED before anything ran, with `why` (one line) in its log and its state."""
        run = self.runner.record(run_id, describe)
        run.log("", "stderr", f"gcpgpu emulator: {why}")
        self.report(iid, state="FAILED", exit_code=-1, ended=_stamp(self._now()), message=why)

    def _left_to_pull(self, inst: dict, image: str) -> float:
        """What is left of a node's pull of `image`: pull_s, less the time since it booted where its startup
        script pulls that image ahead of the jobs (templates/startup.sh.j2, the spec's prepull)."""
        items = {i.get("key"): i.get("value") or "" for i in (inst.get("metadata") or {}).get("items", [])}
        try:
            ahead = json.loads(items.get("gcpgpu-spec") or "{}").get("prepull")
        except ValueError:
            ahead = None
        if ahead != image or not inst.get("lastStartTimestamp") or self.compute is None:
            return self.pull_s
        booted = self.compute.now() - parse_rfc3339(inst["lastStartTimestamp"])
        return max(0.0, self.pull_s - max(0.0, booted))

    def _now(self, wall: float | None = None) -> float:
        """The emulator's clock now, or at the wall-clock moment `wall` (a process's start or end, which the
        host's runner stamps on the wall clock): what a node's agent stamps its reports with, as every other
        time the emulator serves (a test that advances the clock sees a job start and end on it)."""
        now = self.compute.now() if self.compute is not None else time.time()
        return now if wall is None else now - max(0.0, time.time() - wall)

    def _later(self, seconds: float, fn: Callable[..., None], *args: Any) -> Any:
        """fn(*args) once `seconds` have passed on the emulator's clock (a test sets it forward to end a
        simulated job), or of wall time when there is no Compute to keep one."""
        if self.compute is not None:
            return self.compute.clock.call_later(seconds, fn, *args)
        timer = threading.Timer(seconds, fn, args=args)
        timer.daemon = True
        timer.start()
        return timer

    def _simulated_end(self, instance_id: str, run_id: str) -> None:
        with self._lock:
            if self.node_runs.get(instance_id) != run_id or instance_id in self.lost:
                return
            if self.attributes(instance_id).get(f"{NAMESPACE}/state") == "RUNNING":
                self.report(instance_id, state="SUCCEEDED", exit_code=0, ended=_stamp(self._now()),
                            message="simulated by the emulator: nothing ran")
            if self.activity is not None:
                self.activity.end(instance_id, run_id)

    def _on_change(self, instance_id: str) -> Callable[[Run], None]:
        def changed(run: Run) -> None:
            if self.activity is not None:  # the node was busy while the job's process ran, whoever stopped it
                if run.state == "running":
                    self.activity.begin(instance_id, run.id, job=_job_key(run.id))
                elif run.done:
                    self.activity.end(instance_id, run.id)
            with self._lock:
                if self.node_runs.get(instance_id) != run.id or instance_id in self.lost:
                    return  # a newer job owns the node, or the node (and its agent) is gone
                replica = run.replicas[0]
                if run.state == "running":
                    self.report(instance_id, state="RUNNING", started=_stamp(self._now(run.started)))
                elif run.done:
                    code = replica.returncode if replica.returncode is not None else -1
                    state = {"succeeded": "SUCCEEDED", "cancelled": "CANCELLED"}.get(run.state, "FAILED")
                    message = (run.failure[2] if run.failure else "") or ("cancelled" if state == "CANCELLED" else "")
                    if state == "FAILED":
                        message = killed(run, replica) or message
                    self.report(instance_id, state=state, exit_code=code, ended=_stamp(self._now(run.ended)),
                                message=message)

        return changed

    def _stepper(self, run_id: str) -> Callable[[LogLine], None] | None:
        """What tells Monitoring's ledger the steps a node's job logs (its nodes progress together)."""
        if self.activity is None:
            return None
        activity, job = self.activity, _job_key(run_id)

        def seen(line: LogLine) -> None:
            if (step := step_in(line.text)) is not None:
                activity.progress(job, step)

        return seen

    def _describer(self, project: str, zone: str, inst: dict, job_id: str, image: str) -> Callable[[LogLine], dict]:
        """Log entries as Docker's gcplogs driver writes a container's output (the agent runs it so)."""
        name = container_name(job_id)

        def describe(line: LogLine) -> dict:
            return {
                "logName": f"projects/{project}/logs/{LOG_NAME}",
                "resource": {"type": "gce_instance",
                             "labels": {"instance_id": inst["id"], "zone": zone, "project_id": project}},
                "jsonPayload": {"container": {"name": f"/{name}", "imageName": image},
                                "instance": {"name": inst["name"], "zone": zone, "id": inst["id"]},
                                "message": line.text},
                "severity": "ERROR" if line.stream == "stderr" else "INFO",
            }

        return describe


def _job_key(run_id: str) -> str:
    """The job attempt a node's run belongs to (its run id less the node): cluster/PROJECT/RUN."""
    return run_id.rsplit("/", 1)[0]


def _cluster_of(inst: dict, job: dict) -> str:
    """The node's cluster: what the job record says, else the node's metadata or label gcpgpu-cluster."""
    items = {i.get("key"): i.get("value") or "" for i in inst.get("metadata", {}).get("items", [])}
    return str(job.get("cluster") or items.get("gcpgpu-cluster") or (inst.get("labels") or {}).get("gcpgpu-cluster")
               or "")
