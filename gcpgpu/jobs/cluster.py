"""Jobs on a gcpgpu cluster's VMs: put on every node through instance metadata, run by the node's
job agent, read back from the guest attributes the agent reports.

submit: find the cluster's nodes (one aggregatedList) -> take the cluster's lease (the one `up`, `down`
        and autostop hold: a cluster being stopped or deleted refuses the job) and read the nodes again
        -> refuse if a job still runs there -> per node, one setMetadata carrying the job (gcpgpu-job,
        gcpgpu-job-id), the node's rank and the rendezvous (gcpgpu-node-rank, gcpgpu-nnodes,
        gcpgpu-master-addr: rank 0's internal IP, gcpgpu-master-port, which the image's entrypoint
        reads) and the rendered agent script.
status: per node, instances.getGuestAttributes (gcpgpu/state, exit-code, started, ended, pull-s, message).
cancel: setMetadata gcpgpu-job-cancel=JOB on the job's nodes; each agent stops its container.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from gcpgpu import catalog, nccl
from gcpgpu.cluster.lease import Lease, LeaseHeld, describe
from gcpgpu.cluster.names import LABEL_CLUSTER
from gcpgpu.cluster.observe import Node, guest_attributes, project_nodes, ranked_nodes
from gcpgpu.errors import CloudError, UsageProblem
from gcpgpu.gcp.clients import Clients
from gcpgpu.gcp.operations import batch, call, parallel
from gcpgpu.image.follower import AGENT_KEY, agent_image
from gcpgpu.resources import render

from . import ids, policy, usercode
from . import logs as job_logs
from .spec import ValidJob, fit_trainer_args, job_env
from .state import (
    ACTIVE,
    CANCELLED,
    FAILED,
    PENDING,
    RUNNING,
    SUCCEEDED,
    UNKNOWN,
    JobState,
    is_final,
)

MASTER_PORT = 29500
RXDM_WAIT_S = 180  # the TCPXO RxDM takes ~30 s to initialise (container-engine-accelerators README); headroom
LOG_NAME = "gcplogs-docker-driver"  # Docker's gcplogs driver writes the containers' output here
# Metadata keys a job owns on a node; a new job replaces them all.
JOB_KEYS = ("gcpgpu-job", "gcpgpu-job-id", "gcpgpu-job-agent", "gcpgpu-job-cancel", "gcpgpu-node-rank",
            "gcpgpu-nnodes", "gcpgpu-master-addr", "gcpgpu-master-port", "gcpgpu-job-dump")
Fence = Callable[[], None]


def unfenced() -> None:
    pass


def container_name(job_id: str) -> str:
    return f"gcpgpu-job-{job_id}"


def log_filter(project: str, jid: ids.JobId) -> str:
    return (f'logName="projects/{project}/logs/{LOG_NAME}" AND '
            f'jsonPayload.container.name="/{container_name(jid.job)}"')


def _job_of(node: Node) -> dict | None:
    raw = node.metadata.get("gcpgpu-job")
    if not raw:
        return None
    try:
        job = json.loads(raw)
    except ValueError:
        return None
    return job if isinstance(job, dict) and "id" in job else None


@dataclass(frozen=True)
class Placement:
    """Where a cluster job goes: its nodes in rank order, their machine type, and the job's trainer
    arguments fitted to nodes x GPUs per node (with the notes that say what was added)."""

    nodes: list[Node]
    machine: catalog.MachineType
    args: list[str]
    notes: list[str]

    def apply(self, job: ValidJob) -> ValidJob:
        """The job with the arguments fitted here (a new value: the validated one is left as it was); the
        same again adds nothing."""
        return replace(job, args=self.args, notes=[*job.notes, *(n for n in self.notes if n not in job.notes)])


def place(clients: Clients, project: str, job: ValidJob, cluster: str) -> Placement:
    """The nodes the job would run on (the cluster's first --nodes, all by default) and their machine type,
    with the job's trainer arguments checked and fitted (fit_trainer_args) to nodes x GPUs per node.

    Reads only (one aggregatedList), so `job submit --dry-run` refuses what submit refuses."""
    nodes = ranked_nodes(clients, project, cluster)
    if not nodes:
        raise CloudError(f"no cluster named {cluster} in project {project} (see 'gcpgpu cluster list')")
    machine = catalog.get_machine_type(nodes[0].machine_type)
    if job.machine is not None and job.machine.name != machine.name:
        raise UsageProblem(f"--machine-type {job.machine.name} does not match cluster {cluster}, whose nodes are "
                           f"{machine.name}; drop --machine-type")
    want = job.nodes or len(nodes)
    if want > len(nodes):
        raise UsageProblem(f"--nodes {want}: cluster {cluster} has {len(nodes)} node(s); use --nodes "
                           f"{len(nodes)} or fewer, or grow it with 'gcpgpu cluster up {cluster} --nodes {want}'")
    # What the real cloud runs: every GPU of every chosen node (the emulator runs one process per node,
    # and a batch that splits over the GPUs splits over the nodes too).
    args, notes = fit_trainer_args(job, world=want * machine.gpu_count, exact=True)
    return Placement(nodes[:want], machine, args, notes)


def image_of(job: ValidJob) -> str:
    """The job's image (without --image, the submit path resolved it first: jobs/submit.py)."""
    if job.image_pending:
        raise RuntimeError("the default image is resolved (jobs/submit.py) before a cluster job is submitted")
    return job.image


def submit(clients: Clients, project: str, job: ValidJob, cluster: str, recover: int | None = None,
           placed: Placement | None = None, detach: bool = False,
           follow: dict | None = None, agent: str | None = None, followed: bool = False) -> tuple[ids.JobId, dict]:
    """Put the job on the cluster's first --nodes nodes (all by default); returns its id and plan.
    `recover` (submit --recover N) is kept in the job's record, so whoever follows it later knows N;
    so are `follow`, the follower's other settings (jobs/follower.py), and `detach`: the nodes run
    the follower themselves (gcpgpu/node/agent.py), from `agent` (gcpgpu's image, resolved by the caller
    as cluster autostop's is) where neither the job's image nor the node's own follower is one.
    `placed`: what place() returned for this job, when the caller already read it. `followed`: the
    caller follows the job from now on (--wait): its record says so until the caller leads."""
    placed = placed or place(clients, project, job, cluster)
    job = placed.apply(job)
    lease = _exclusive(clients, project, cluster)
    try:
        return _submit_held(clients, project, job, cluster, placed, lease.check, recover, detach, follow, agent,
                            followed)
    finally:
        with contextlib.suppress(Exception):  # an unreleased lease expires; never hide the real error
            lease.release()


def _exclusive(clients: Clients, project: str, cluster: str) -> Lease:
    """The cluster's lease, held while a job is checked and put on its nodes: an autostop (or `up`,
    `down`, a recovery) holding it now refuses the job in one line, and one that comes later finds
    the job on the nodes (it judges under the same lease), so it never deletes a job just accepted."""
    lease = Lease(clients, project, cluster, holder=secrets.token_hex(6), op="job submit")
    try:
        lease.acquire(wait_for_it=False)
    except LeaseHeld as e:
        raise CloudError(f"cluster {cluster} is busy ({describe(e.holder)}): the job was not submitted; submit "
                         f"it again once that is done ('gcpgpu cluster status {cluster}' shows the cluster)") from None
    return lease


def _submit_held(clients: Clients, project: str, job: ValidJob, cluster: str, placed: Placement, fence: Fence,
                 recover: int | None, detach: bool, follow: dict | None, agent: str | None,
                 followed: bool = False) -> tuple[ids.JobId, dict]:
    """submit()'s checks and delivery, under the cluster's lease: the nodes are read again now, so a node
    stopped or deleted since `placed` was read is said, not given the job."""
    machine = placed.machine
    now = {n.name: n for n in ranked_nodes(clients, project, cluster)}
    if not now:
        raise CloudError(f"no cluster named {cluster} in project {project} (see 'gcpgpu cluster list')")
    gone = [n.name for n in placed.nodes if n.name not in now]
    if gone:
        raise CloudError(f"node(s) {', '.join(gone)} of cluster {cluster} are gone; see "
                         f"'gcpgpu cluster status {cluster}'")
    chosen = [now[n.name] for n in placed.nodes]
    want = len(chosen)
    not_running = [n.name for n in chosen if n.status != "RUNNING"]
    if not_running:
        raise CloudError(f"node(s) {', '.join(not_running)} of cluster {cluster} are not RUNNING; see "
                         f"'gcpgpu cluster status {cluster}'")
    busy = _busy(clients, project, chosen)
    if busy:
        node, other = busy
        raise CloudError(f"node {node} is still running job {other}: cancel it first ('gcpgpu job cancel "
                         f"cluster:{cluster}:{other}') or wait for it to end")

    record = job_record(job, cluster, placed, want, recover, detach, follow, agent)
    job_id, image = record["id"], record["image"]
    ended = _ended_before(clients, project, cluster, chosen)
    deliver(clients, project, record, chosen, fence)
    _open_record(clients, project, record, ended, followed)
    jid = ids.JobId("cluster", cluster=cluster, job=job_id)
    return jid, {"id": str(jid), "target": "cluster", "name": job.name, "cluster": cluster, "nodes": want,
                 "machine_type": machine.name, "master": f"{record['master_addr']}:{MASTER_PORT}", "image": image,
                 "provisioning": chosen[0].provisioning}


def job_record(job: ValidJob, cluster: str, placed: Placement, want: int, recover: int | None = None,
               detach: bool = False, follow: dict | None = None, agent: str | None = None) -> dict:
    """The job as its nodes' agents (or a Slurm cluster's batch script) run it: image, command, the rendered
    NCCL environment, mounts, workdir and secrets' names, on `want` nodes of `placed`'s machine type."""
    machine = placed.machine
    job_id = f"{job.name}-{secrets.token_hex(3)}"
    env = job_env(job, machine, "vm")
    profile = nccl.profile_for(machine)
    # Host support the plugin needs (devices, sockets, a host-installed plugin); /usr/local is the image's own.
    mounts = [p for p in (*profile.required_paths, *profile.advised_paths) if not p.startswith("/usr/local")]
    host_lib = profile.lib_dir if profile.lib_dir and profile.lib_dir.startswith("/var/lib/") else None
    if host_lib:  # the host installer's whole plugin dir (one version), as Cluster Toolkit's nccl-tests mount it
        mounts = [host_lib, *(p for p in mounts if not p.startswith(host_lib + "/"))]
    image = image_of(job)
    buckets, node_dirs = output_mounts(job.spec.output_dir)
    buckets, user_mounts = usercode.node_mounts(job.spec, job.workdir_uri, buckets)
    command, args = usercode.container_call(job)
    record = {
        "id": job_id, "name": job.name, "cluster": cluster, "image": image, "command": command,
        "args": args, "env": env, "user_mounts": user_mounts, "nnodes": want, "master_port": MASTER_PORT,
        "machine_type": machine.name, "gpus_per_node": machine.gpu_count, "timeout": job.spec.timeout,
        "mounts": mounts, "gcs_buckets": buckets, "node_dirs": node_dirs, "output_dir": job.spec.output_dir,
        "bundled_trainer": job.bundled_trainer, "attempt": 0, "run": job_id, "history": [], "recover": recover,
        "follow": dict(follow or {}), "detached": detach, **({"agent_image": agent} if detach and agent else {}),
        **policy.record_fields(job.spec),  # retries, stall timeout, webhooks: read by whoever follows the job
    }
    return record


def _ended_before(clients: Clients, project: str, cluster: str, chosen: list[Node]) -> dict[str, dict]:
    """The ends of the jobs `chosen` held before this one, as their nodes report them (job id -> fields)."""
    ended: dict[str, dict] = {}
    for before in {str(j["id"]) for n in chosen if (j := _job_of(n)) is not None}:
        try:
            was = status(clients, project, ids.JobId("cluster", cluster=cluster, job=before))
        except CloudError:
            continue
        if is_final(was.state):
            ended[before] = {"state": was.state, "error": was.error, "ended": was.ended}
    return ended


def _open_record(clients: Clients, project: str, record: dict, ended: dict[str, dict], followed: bool) -> None:
    """Open the job's record (PENDING; jobs/record.py), closing the jobs its nodes held before where
    nobody did, with the ends their nodes reported (`ended`)."""
    from . import record as records

    opening = records.from_nodes(record, followed_s=records.FOLLOW_PROMISE_S if followed else 0.0)
    records.update(clients, project, str(record["cluster"]), records.opened(opening, ended))


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


def resumed(record: dict, attempt: int) -> dict:
    """`record` as its attempt `attempt` (> 0) runs: the bundled trainer with --resume (its newest complete
    checkpoint; a fresh start if there is none), and GCPGPU_RESUME=1, GCPGPU_RESTART=N for a user's own command,
    which resumes from its own checkpoint when it sees them (containers/README.md). gcpgpu's recovery and a Slurm
    job that Slurm requeued (gcpgpu/slurm/task.py) resume the same way."""
    args = list(record["args"])
    if record.get("bundled_trainer") and "--resume" not in args and "--no-resume" not in args:
        args.append("--resume")
    env = {**(record.get("env") or {}), "GCPGPU_RESUME": "1", "GCPGPU_RESTART": str(attempt)}
    return {**record, "args": args, "env": env, "attempt": attempt, "run": run_key(str(record["id"]), attempt)}


def deliver(clients: Clients, project: str, record: dict, chosen: list[Node], fence: Fence = unfenced) -> None:
    """Put `record` (a job attempt) on `chosen` in rank order: metadata with the agent, rank and rendezvous.
    `fence()` runs right before each request (a recovery's lease check)."""
    master = chosen[0].internal_ip
    if not master:
        raise CloudError(f"node {chosen[0].name} has no internal IP yet; try again in a moment")
    record["master_addr"] = master
    record["submitted"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    record.setdefault("created", record["submitted"])
    run = str(record.get("run") or record["id"])
    want = int(record["nnodes"])
    rxdm = _rxdm(record)
    record["rxdm"] = rxdm.rxdm_image if rxdm else None

    def put(pair: tuple[int, Node]) -> Any:
        rank, node = pair
        agent = agent_script(record, rank, want, master, MASTER_PORT)
        items = {k: v for k, v in node.metadata.items() if k not in JOB_KEYS}
        items.update({
            "enable-guest-attributes": "TRUE",  # how the agent reports its state
            "gcpgpu-job": json.dumps(record, sort_keys=True),
            "gcpgpu-job-agent": agent,
            "gcpgpu-node-rank": str(rank),
            "gcpgpu-nnodes": str(want),
            "gcpgpu-master-addr": master,
            "gcpgpu-master-port": str(MASTER_PORT),
            # Last: the node's watcher wakes on this key and then reads the others.
            "gcpgpu-job-id": run,
        })
        if record.get("detached"):  # the node runs the follower (gcpgpu/node/agent.py), from gcpgpu's own image
            items[AGENT_KEY] = agent_image(record.get("image"), node.region, project, node.metadata.get(AGENT_KEY),
                                           record.get("agent_image"))
        return _set_metadata(clients, project, node, items, fence)

    batch(clients, project, put, list(enumerate(chosen)))


def _rxdm(record: dict) -> Any:
    """TCPX/TCPXO: the agent starts Google's receive-datapath manager before the trainer (a recovery too)."""
    machine = catalog.get_machine_type(str(record["machine_type"]))
    return catalog.gpudirect_host(machine.gpudirect) if machine.gpu_nics else None


def agent_script(record: dict, rank: int, nnodes: int, master: str, port: int, slurm: bool = False) -> str:
    """The node's job agent (templates/job_agent.sh.j2) for `record` (a job attempt) at `rank` of `nnodes`:
    it runs the job's container and reports its state. `slurm`: run as a Slurm task's (gcpgpu/slurm/task.py),
    it ends with the container's exit code and stops the container on Slurm's SIGTERM."""
    return render("job_agent.sh.j2", job_id=str(record.get("run") or record["id"]),
                  container=container_name(str(record["id"])), rank=rank, nnodes=nnodes, master_addr=master,
                  master_port=port, image=record["image"], command=record["command"], args=record["args"],
                  env=record["env"], mounts=record["mounts"], gcs_buckets=record.get("gcs_buckets") or [],
                  node_dirs=record.get("node_dirs") or [], user_mounts=record.get("user_mounts") or [],
                  timeout=record.get("timeout") or 0, rxdm=_rxdm(record), rxdm_wait=RXDM_WAIT_S, slurm=slurm)


def _set_metadata(clients: Clients, project: str, node: Node, items: dict[str, str], fence: Fence) -> Any:
    """Start replacing the node's metadata with `items`, under the fingerprint it was read with."""
    from gcpgpu.gcp.compute import compute_types

    compute = compute_types()

    fence()
    metadata = compute.Metadata(fingerprint=node.metadata_fingerprint,
                                   items=[compute.Items(key=k, value=v) for k, v in items.items()])
    return call(clients.compute("InstancesClient").set_metadata, {
        "project": project, "zone": node.zone, "instance": node.name, "metadata_resource": metadata})


def _busy(clients: Clients, project: str, nodes: list[Node]) -> tuple[str, str] | None:
    """(node, job) for a node whose current job has not ended, else None."""
    holding = [(inst, job) for inst in nodes if (job := _job_of(inst)) is not None]
    if not holding:
        return None
    reports = parallel(lambda pair: guest_attributes(clients, project, pair[0]), holding)
    for (inst, job), report in zip(holding, reports, strict=True):
        if isinstance(report, BaseException):
            raise report
        run = run_of(job)
        cancelled = inst.metadata.get("gcpgpu-job-cancel") == run
        if report.get("job-id") == run and report.get("state") in ACTIVE and not cancelled:
            return inst.name, str(job["id"])
    return None


def run_of(job: dict) -> str:
    """The run key of a job record (its current attempt), as the agents report it."""
    return str(job.get("run") or job["id"])


def record_of(clients: Clients, project: str, jid: ids.JobId) -> dict:
    """The job's record as its nodes hold it (the newest attempt's, when nodes disagree)."""
    return max((job for _i, job in _job_nodes(clients, project, jid)), key=lambda j: int(j.get("attempt") or 0))


def _job_nodes(clients: Clients, project: str, jid: ids.JobId) -> list[tuple[Node, dict]]:
    nodes = ranked_nodes(clients, project, jid.cluster or "")
    if not nodes:
        raise CloudError(f"no cluster named {jid.cluster} in project {project}: its job {jid.job} went with it")
    mine = [(inst, job) for inst in nodes if (job := _job_of(inst)) is not None and job["id"] == jid.job]
    if not mine:
        current = sorted({str(j["id"]) for inst in nodes if (j := _job_of(inst))})
        later = f" (it now runs {', '.join(current)})" if current else ""
        raise CloudError(f"job {jid.job} is not on cluster {jid.cluster}{later}; see 'gcpgpu job list'")
    return mine


def status(clients: Clients, project: str, jid: ids.JobId) -> JobState:
    """The job's state on each node, as the nodes' agents report it, and overall (what the nodes say:
    the job's own state is its record's, jobs/record.py, which every view shows)."""
    mine = _job_nodes(clients, project, jid)
    reports = parallel(lambda pair: guest_attributes(clients, project, pair[0]), mine)
    rows = []
    newest = max((j for _i, j in mine), key=lambda j: int(j.get("attempt") or 0))
    run = run_of(newest)
    for (inst, _job), report in zip(mine, reports, strict=True):
        if isinstance(report, BaseException):
            raise report
        ours = report.get("job-id") == run
        state = report.get("state") if ours else None
        if state is None:
            cancelled = inst.metadata.get("gcpgpu-job-cancel") == run
            state = CANCELLED if cancelled and inst.status != "RUNNING" else UNKNOWN
        lost = inst.status != "RUNNING" and state in (*ACTIVE, UNKNOWN)
        if lost:  # the node went away under the job (preempted, host error, deleted): its agent went with it
            state = FAILED
        code = report.get("exit-code") if ours else None
        rows.append({
            "node": inst.name, "rank": int(inst.metadata.get("gcpgpu-node-rank", "-1")), "state": state,
            "exit_code": int(code) if code not in (None, "") and code.lstrip("-").isdigit() else None,
            "started": report.get("started") if ours else None, "ended": report.get("ended") if ours else None,
            "pull_s": _seconds(report.get("pull-s")) if ours else None,
            "message": f"node is {inst.status}: lost while the job ran" if lost else
            _said(report.get("message")) if ours else
            ("no report from the node's job agent yet" if inst.status == "RUNNING" else f"node is {inst.status}"),
            "node_status": inst.status, "zone": inst.zone,
            "ends_at": inst.ends_at, "maintenance": inst.maintenance,  # known ends ahead (jobs/ahead.py)
        })
    rows.sort(key=lambda r: r["rank"])
    job = newest
    overall = aggregate([r["state"] for r in rows])
    failed = first_failed(rows)
    error = None
    if failed:
        # A node's last words may be its launcher's banner (torchrun's "=====" report): never the error.
        said = f": {failed['message']}" if failed["message"] and not job_logs.launcher_noise(failed["message"]) else ""
        error = f"node {failed['node']} (rank {failed['rank']}) exited with status {failed['exit_code']}{said}"
    started = [r["started"] for r in rows if r["started"]]
    ended = [r["ended"] for r in rows if r["ended"]]
    history = list(job.get("history") or [])
    recoveries = sum(1 for h in history if h.get("kind") != "retry")
    return JobState(
        id=str(jid), target="cluster", name=job.get("name"), state=overall,
        created=job.get("created") or job.get("submitted"), started=min(started) if started else None,
        ended=max(ended) if ended and is_final(overall) else None, error=error,
        nodes=len(rows), machine_type=job.get("machine_type"), cluster=jid.cluster,
        master=f"{job.get('master_addr')}:{job.get('master_port')}", image=job.get("image"),
        per_node=rows, nnodes=int(job.get("nnodes") or len(rows)), attempt=int(job.get("attempt") or 0),
        recover=job.get("recover"), recoveries=recoveries, history=history, restarts=len(history) - recoveries,
        output_dir=job.get("output_dir"),
    )


def first_failed(rows: list[dict]) -> dict | None:
    """The node that failed first, which says why: a lost one (its agent went with it, no end is reported), else
    one that says why it failed itself over one that says only that a peer died (ends are whole seconds, so a
    survivor's peer error can tie with the node that set it off), then the earliest end, then the lowest rank."""
    return min((r for r in rows if r["state"] == FAILED), default=None,
               key=lambda r: (r["node_status"] == "RUNNING", job_logs.peer_failure(r["message"]),
                              r["ended"] or "~", r["rank"]))


def _seconds(text: str | None) -> float | None:
    """A duration the agent reported (`pull-s`), None when it reported none (an older agent, not yet)."""
    try:
        return round(float(text), 3) if text not in (None, "") else None
    except ValueError:
        return None


def _said(message: str | None) -> str | None:
    """A node agent's message as the views show it: an older agent's last log line may be a launcher's
    banner (torchrun's "=====" report), which says nothing."""
    return None if not message or job_logs.launcher_noise(message) else message


def aggregate(states: list[str]) -> str:
    """A job's state from its nodes': one failure fails it; it succeeds when every node did."""
    if not states:
        return UNKNOWN
    if FAILED in states:
        return FAILED
    if all(s == SUCCEEDED for s in states):
        return SUCCEEDED
    if CANCELLED in states and not any(s in ACTIVE for s in states):
        return CANCELLED
    if RUNNING in states:
        return RUNNING
    return PENDING


def cancel(clients: Clients, project: str, jid: ids.JobId, only_running: bool = False,
           fence: Fence = unfenced) -> None:
    """Ask every node of the job to stop it (metadata gcpgpu-job-cancel); the agents do the stopping.
    With only_running, the nodes that are RUNNING (a recovery stops the survivors of a lost node)."""
    mine = [(i, j) for i, j in _job_nodes(clients, project, jid) if not only_running or i.status == "RUNNING"]

    def put(pair: tuple[Node, dict]) -> Any:
        node, job = pair
        return _set_metadata(clients, project, node, {**node.metadata, "gcpgpu-job-cancel": run_of(job)}, fence)

    batch(clients, project, put, mine)


def current_jobs(clients: Clients, project: str) -> dict[str, list[str]]:
    """The job ids each gcpgpu cluster's nodes hold now, by cluster (its earlier jobs: jobs/record.py)."""
    out: dict[str, list[str]] = {}
    for inst in project_nodes(clients, project):
        job = _job_of(inst)
        if job is not None:
            ids_ = out.setdefault(inst.labels.get(LABEL_CLUSTER, "?"), [])
            if str(job["id"]) not in ids_:
                ids_.append(str(job["id"]))
    return out
