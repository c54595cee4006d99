"""How the emulator runs a Vertex AI custom job on this machine, when it can.

A job whose replicas run the bundled trainer (the gcpgpu-trainer image with trainer arguments, or
a `python -m gcpgpu.trainer` command) really runs: one local process per replica, with CLUSTER_SPEC
on loopback ports and AIP_* output directories under a local folder standing in for
base_output_directory. A pool whose container runs any other command runs it through the image's
entrypoint in a sandbox (host/sandbox.py), when the emulator's owner allowed users' commands; when
not, `local_plan` gives a Refusal and the job fails with its line (as it does for a GCPGPU_MOUNTS bucket
that does not exist: host/mounts.py). A pool's nfsMounts (SERVER:PATH at /mnt/nfs/MOUNT_POINT) are the
emulator's Filestore folders, bound in the sandbox (or the trainer's paths mapped there), as on a cluster
node (host/shared_mounts.py); one no instance exports fails the job in one line. Anything else (no command, an
image that is not gcpgpu's, a Python package) cannot run here; `local_plan` says why, and the job
is simulated.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..host import mounts
from ..host.ports import free_block
from ..host.runner import LogLine, ReplicaSpec, trainer_argv
from ..host.sandbox import Mount, is_user_command

if TYPE_CHECKING:
    from ..host.sandbox import UserCommands
    from ..host.storage import Storage


@dataclass(frozen=True)
class Refusal:
    """A job that must fail at once, with this one line (a user's command the emulator may not run, a
    --mount of a bucket that does not exist)."""

    message: str


@dataclass
class LocalPlan:
    """How the emulator runs a job here: per pool, the argv, the container env, the replica count."""

    pools: list[int]
    argv: list[list[str]]
    env: list[dict[str, str]]
    gpus_per_replica: int
    user: list[bool] | None = None  # per pool: a user's command (run through the entrypoint in a sandbox)
    nfs: list[list[tuple[str, tuple[str, ...]]]] | None = None  # per pool: (/mnt/nfs/POINT, folder parts)


def local_plan(job: dict, user: UserCommands | None = None, storage: Storage | None = None,
               nfs: Callable[[str, str], tuple[str, ...] | None] | None = None) -> LocalPlan | Refusal | str:
    """The local processes for a job, a Refusal (it fails at once), or why it cannot run here (then it
    is simulated). `nfs` finds a pool's nfsMounts among the emulator's Filestore instances."""
    pools = (job.get("jobSpec") or {}).get("workerPoolSpecs") or []
    counts, argvs, envs, users, shares = [], [], [], [], []
    gpus = 0
    for i, pool in enumerate(pools[:2]):
        pool = pool or {}
        count = int(pool.get("replicaCount") or 0) if (pool.get("containerSpec") or pool.get("machineSpec")) else 0
        counts.append(count)
        if not count:
            argvs.append([])
            envs.append({})
            users.append(False)
            shares.append([])
            continue
        found = _nfs_mounts(pool, nfs)
        if isinstance(found, Refusal):
            return found
        shares.append(found)
        container = pool.get("containerSpec")
        if not container:
            return f"worker pool {i} uses a Python package, which the emulator cannot install"
        argv = trainer_argv(container.get("imageUri") or "", list(container.get("command") or []),
                            list(container.get("args") or []))
        if argv is None and is_user_command(list(container.get("command") or []), list(container.get("args") or [])):
            why = user.refusal() if user is not None else "users' commands are not run here"
            if why is not None:
                return Refusal(why)
            argv = [*map(str, container.get("command") or []), *map(str, container.get("args") or [])]
            users.append(True)
        elif argv is None:
            return (f"worker pool {i} runs image {container.get('imageUri')!r} with no command, which is not "
                    "the bundled trainer")
        else:
            users.append(False)
        argvs.append(argv)
        envs.append({e["name"]: str(e.get("value", "")) for e in container.get("env") or []})
        unmounted = mounts.vertex_failure(envs[-1], storage) if storage is not None else None
        if unmounted is not None:
            return Refusal(unmounted)
        gpus = max(gpus, int((pool.get("machineSpec") or {}).get("acceleratorCount") or 0))
    if any(p for p in pools[2:]):
        return "worker pools 2 and 3 (parameter or reduction servers) are not run by the emulator"
    if not all(users) and importlib.util.find_spec("torch") is None:
        return "torch is not installed where the emulator runs"
    return LocalPlan(counts, argvs, envs, gpus, users, shares)


def _nfs_mounts(pool: dict, nfs: Callable[[str, str], tuple[str, ...] | None] | None
                ) -> list[tuple[str, tuple[str, ...]]] | Refusal:
    """A pool's nfsMounts as (mount path, folder parts): Vertex AI mounts SERVER:PATH at /mnt/nfs/MOUNT_POINT
    (aiplatform v1 NfsMount's reference); one no Filestore instance here exports fails the job, as the
    mount would."""
    out = []
    for m in pool.get("nfsMounts") or []:
        server, path, point = (str((m or {}).get(k) or "") for k in ("server", "path", "mountPoint"))
        target = f"/mnt/nfs/{point}"
        if not point or "/" in point or point in (".", "..") or not path.startswith("/"):
            return Refusal(f"nfsMounts: {server}:{path} on {target}: give a server, a path starting with '/' and "
                           "a mount point that is one folder name")
        parts = nfs(server, path) if nfs is not None else None
        if parts is None:
            return Refusal(f"nfsMounts: mounting {server}:{path} on {target} failed: no READY Filestore instance of "
                           "this emulator exports it")
        out.append((target, parts))
    return out


def output_uri(job: dict) -> str | None:
    """The job's baseOutputDirectory (gs://BUCKET/PATH), if it names one."""
    return ((job.get("jobSpec") or {}).get("baseOutputDirectory") or {}).get("outputUriPrefix") or None


def replicas(job: dict, plan: LocalPlan, run_dir: Path, storage: Storage | None = None,
             user: UserCommands | None = None) -> list[ReplicaSpec]:
    """One process per replica: CLUSTER_SPEC on loopback ports, AIP_* folders in the emulator's Cloud
    Storage (`storage`: the job's gs:// output is objects there), else under `run_dir`. The trainer's
    path arguments are kept in the storage (PathRefused, one line, when one would leave it)."""
    pools = plan.pools
    shares = plan.nfs or [[] for _ in pools]
    hosts = {f"workerpool{i}": [f"127.0.0.1:{free_block()}" for _ in range(n)] for i, n in enumerate(pools) if n}
    job_id = job["name"].rsplit("/", 1)[1]
    out = output_uri(job)
    if out and storage is not None:
        local_base = Path(storage.local(out, job_id))  # resolved inside the storage root, whatever the path says
    else:
        local_base = run_dir / "gcs" / f"emulator-vertex-{job_id}"
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
            if plan.user and plan.user[pool] and user is not None:
                # As Vertex AI gives them: gs:// URIs, which the user's code reads at /gcs/BUCKET/...
                for key, sub in (("AIP_MODEL_DIR", "model"), ("AIP_CHECKPOINT_DIR", "checkpoints"),
                                 ("AIP_TENSORBOARD_LOG_DIR", "logs")):
                    env.pop(key)
                    if out:
                        env[key] = f"{out.rstrip('/')}/{sub}/"
                del env["GCPGPU_TRAINER_ALLOW_CPU"], env["GCPGPU_NPROC_PER_NODE"]
                shared = [Mount(f"nfs {target}", parts, target, False) for target, parts in shares[pool]]
                replicas.append(user.replica(task, plan.argv[pool], env, run_dir / f"{task}-workdir", shared=shared,
                                             shared_root=storage.root if storage is not None else None))
                continue
            argv = plan.argv[pool]
            if storage is not None:  # the trainer runs outside any sandbox: its paths are the replica's own
                storage.share(f"{job_id}-{task}", shares[pool])  # its nfsMounts' paths land in their folders
                argv = [*argv[:3], *storage.localize_args(argv[3:], f"{job_id}-{task}", run_dir)]
            replicas.append(ReplicaSpec(task, argv, env))
    for sub in ("model", "checkpoints", "logs"):
        (local_base / sub).mkdir(parents=True, exist_ok=True)
    return replicas


def describer(job: dict) -> Callable[[LogLine], dict]:
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
