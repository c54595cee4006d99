"""What a cluster job's nodes run, and putting it there: the node record, each attempt of it, the node's
job agent script (templates/job_agent.sh.j2), and the metadata that carries them to each node.

Per node, one setMetadata carrying the node record (gcpgpu-job, gcpgpu-job-id), the node's rank and the
rendezvous (gcpgpu-node-rank, gcpgpu-nnodes, gcpgpu-master-addr: rank 0's internal IP,
gcpgpu-master-port, which the image's entrypoint reads) and the rendered agent script. A Slurm cluster's
task (gcpgpu/slurm/task.py) runs the same agent script for the same record, with its rank and
rendezvous from Slurm's allocation, and resumes a requeued job as a recovery does (resumed).
"""

from __future__ import annotations

import json
import secrets
from typing import Any

from gcpgpu import catalog, nccl
from gcpgpu.cluster.observe import Node
from gcpgpu.errors import CloudError
from gcpgpu.gcp.clients import Clients
from gcpgpu.gcp.operations import batch
from gcpgpu.image.follower import AGENT_KEY, agent_image
from gcpgpu.jobs import policy, usercode
from gcpgpu.jobs.spec import ValidJob, job_env
from gcpgpu.resources import render

from .nodes import JOB_KEY, JOB_KEYS, Fence, container_name, set_metadata, unfenced
from .placement import Placement, image_of
from .record import JobRecord, stamp

MASTER_PORT = 29500
RXDM_WAIT_S = 180  # the TCPXO RxDM takes ~30 s to initialise (container-engine-accelerators README); headroom


def new_record(job: ValidJob, placed: Placement, *, scheduler: str, recover: int | None = None,
               detach: bool = False, follow: dict | None = None, agent: str | None = None) -> JobRecord:
    """The job as its nodes' agents (or a Slurm cluster's batch script) run it: image, command, the rendered
    NCCL environment, mounts, workdir and secrets' names, on `placed`'s nodes; submitted now."""
    machine = placed.machine
    job_id = f"{job.name}-{secrets.token_hex(3)}"
    profile = nccl.profile_for(machine)
    # Host support the plugin needs (devices, sockets, a host-installed plugin); /usr/local is the image's own.
    mounts = [p for p in (*profile.required_paths, *profile.advised_paths) if not p.startswith("/usr/local")]
    host_lib = profile.lib_dir if profile.lib_dir and profile.lib_dir.startswith("/var/lib/") else None
    if host_lib:  # the host installer's whole plugin dir (one version), as Cluster Toolkit's nccl-tests mount it
        mounts = [host_lib, *(p for p in mounts if not p.startswith(host_lib + "/"))]
    buckets, node_dirs = output_mounts(job.spec.output_dir)
    buckets, user_mounts = usercode.node_mounts(job.spec, job.workdir_uri, buckets)
    command, args = usercode.container_call(job)
    now = stamp()
    return JobRecord(
        id=job_id, name=job.name, cluster=placed.cluster, scheduler=scheduler, image=image_of(job), command=command,
        args=args, env=job_env(job, machine, "vm"), user_mounts=user_mounts, nnodes=len(placed.nodes),
        master_port=MASTER_PORT, machine_type=machine.name, gpus_per_node=machine.gpu_count,
        timeout=job.spec.timeout, mounts=mounts, gcs_buckets=buckets, node_dirs=node_dirs,
        output_dir=job.spec.output_dir, bundled_trainer=job.bundled_trainer, attempt=0, run=job_id, history=[],
        recover=recover, follow=dict(follow or {}), detached=detach, agent_image=agent if detach and agent else None,
        created=now, submitted=now,
        # retries, stall timeout, webhooks: read by whoever follows the job
        policy=policy.record_fields(job.spec).get("policy"),  # type: ignore[arg-type]
    )


def output_mounts(output_dir: str | None) -> tuple[list[str], list[str]]:
    """What a node mounts for the job's --output-dir: ([bucket], []) for gs://BUCKET/..., ([], [path]) for a path.

    A bucket is mounted by the node with Cloud Storage FUSE at /gcs/BUCKET and bind-mounted into the
    container at the same path, where Vertex AI puts it, so AIP_CHECKPOINT_DIR=gs://... reads the same way.
    """
    if not output_dir:
        return [], []
    if output_dir.startswith("gs://"):
        return [output_dir[len("gs://"):].split("/", 1)[0]], []
    return [], [output_dir.rstrip("/")]


def run_key(job_id: str, attempt: int) -> str:
    """What the nodes' agents run and report (gcpgpu-job-id): the job id, and -rN for its Nth recovery."""
    return job_id if attempt == 0 else f"{job_id}-r{attempt}"


def checkpoint_location(record: JobRecord) -> str | None:
    """Where the bundled trainer of `record` keeps its checkpoints: its --ckpt-dir, else the --output-dir its
    AIP_CHECKPOINT_DIR names; None when it keeps none (a later attempt then starts afresh)."""
    args = list(record.args or [])
    for i, arg in enumerate(args):
        if arg == "--ckpt-dir" and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith("--ckpt-dir="):
            return arg.split("=", 1)[1]
    return (record.env or {}).get("AIP_CHECKPOINT_DIR") or None


def resumed(record: JobRecord, attempt: int) -> JobRecord:
    """`record` as its attempt `attempt` (> 0) runs: the bundled trainer with --resume (its newest complete
    checkpoint; a fresh start if there is none) where it keeps checkpoints (checkpoint_location; without one,
    --resume would fail the attempt at once: it starts afresh), and GCPGPU_RESUME=1, GCPGPU_RESTART=N for a
    user's own command, which resumes from its own checkpoint when it sees them (containers/README.md).
    gcpgpu's recovery and a Slurm job that Slurm requeued (gcpgpu/slurm/task.py) resume the same way."""
    args = list(record.args or [])
    if record.bundled_trainer and "--resume" not in args and "--no-resume" not in args \
            and checkpoint_location(record):
        args.append("--resume")
    env = {**(record.env or {}), "GCPGPU_RESUME": "1", "GCPGPU_RESTART": str(attempt)}
    return record.but(args=args, env=env, attempt=attempt, run=run_key(record.id, attempt))


def resume_note(record: JobRecord) -> str:
    """What a recovery's step line says of how attempt `record` starts."""
    if "--resume" in (record.args or []):
        return " with --resume"
    if record.bundled_trainer and not checkpoint_location(record):
        return ", from the start: it has no --ckpt-dir or --output-dir to resume from"
    return ""


def deliver(clients: Clients, project: str, record: JobRecord, chosen: list[Node],
            fence: Fence = unfenced) -> JobRecord:
    """Put `record` (a job attempt) on `chosen` in rank order: metadata with the agent, rank and rendezvous.
    `fence()` runs right before each request (a recovery's lease check). Returns the record as delivered."""
    master = chosen[0].internal_ip
    if not master:
        raise CloudError(f"node {chosen[0].name} has no internal IP yet; try again in a moment")
    rxdm = _rxdm(record)
    now = stamp()
    record = record.but(master_addr=master, submitted=now, created=record.created or now,
                        rxdm=rxdm.rxdm_image if rxdm else None)
    want = int(record.nnodes or len(chosen))
    stored = json.dumps(record.to_json(), sort_keys=True)

    def put(pair: tuple[int, Node]) -> Any:
        rank, node = pair
        agent = agent_script(record, rank, want, master, MASTER_PORT)
        items = {k: v for k, v in node.metadata.items() if k not in JOB_KEYS}
        items.update({
            "enable-guest-attributes": "TRUE",  # how the agent reports its state
            JOB_KEY: stored,
            "gcpgpu-job-agent": agent,
            "gcpgpu-node-rank": str(rank),
            "gcpgpu-nnodes": str(want),
            "gcpgpu-master-addr": master,
            "gcpgpu-master-port": str(MASTER_PORT),
            # Last: the node's watcher wakes on this key and then reads the others.
            "gcpgpu-job-id": record.run_key,
        })
        if record.detached:  # the node runs the follower (gcpgpu/node/agent.py), from gcpgpu's own image
            items[AGENT_KEY] = agent_image(record.image, node.region, project, node.metadata.get(AGENT_KEY),
                                           record.agent_image)
        return set_metadata(clients, project, node, items, fence)

    batch(clients, project, put, list(enumerate(chosen)))
    return record


def _rxdm(record: JobRecord) -> Any:
    """TCPX/TCPXO: the agent starts Google's receive-datapath manager before the trainer (a recovery too)."""
    machine = catalog.get_machine_type(str(record.machine_type))
    return catalog.gpudirect_host(machine.gpudirect) if machine.gpu_nics else None


def agent_script(record: JobRecord, rank: int, nnodes: int, master: str, port: int, as_task: bool = False) -> str:
    """The node's job agent (templates/job_agent.sh.j2) for `record` (a job attempt) at `rank` of `nnodes`:
    it runs the job's container and reports its state. `as_task`: run as a scheduler's task (a Slurm task:
    gcpgpu/slurm/task.py), it ends with the container's exit code and stops the container on SIGTERM."""
    return render("job_agent.sh.j2", job_id=record.run_key, container=container_name(record.id), rank=rank,
                  nnodes=nnodes, master_addr=master, master_port=port, image=record.image,
                  command=record.command, args=record.args, env=record.env, mounts=record.mounts,
                  gcs_buckets=record.gcs_buckets or [], node_dirs=record.node_dirs or [],
                  user_mounts=record.user_mounts or [], timeout=record.timeout or 0, rxdm=_rxdm(record),
                  rxdm_wait=RXDM_WAIT_S, slurm=as_task)
