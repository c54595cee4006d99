"""A cluster job on its nodes: instance metadata in, guest attributes back. The nodes' reads and writes.

The job's node record (record.py) is in each node's metadata (`gcpgpu-job`, with the node's rank and the
rendezvous: deliver.py puts it there); the node's job agent reports the attempt it runs in its guest
attributes (gcpgpu/state, exit-code, started, ended, pull-s, message), which status() reads, one
getGuestAttributes per node. cancel() sets `gcpgpu-job-cancel` on the job's nodes; each agent stops its
container.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gcpgpu.cluster.names import LABEL_CLUSTER
from gcpgpu.cluster.observe import Node, guest_attributes, project_nodes, ranked_nodes
from gcpgpu.errors import CloudError
from gcpgpu.gcp.clients import Clients
from gcpgpu.gcp.operations import batch, call, parallel
from gcpgpu.jobs import ids
from gcpgpu.jobs import logs as job_logs
from gcpgpu.jobs.state import (
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

from .record import JobRecord

LOG_NAME = "gcplogs-docker-driver"  # Docker's gcplogs driver writes the containers' output here
JOB_KEY = "gcpgpu-job"  # the node record
CANCEL_KEY = "gcpgpu-job-cancel"
DUMP_KEY = "gcpgpu-job-dump"  # stall.py's ask for stacks
# Metadata keys a job owns on a node; a new job replaces them all.
JOB_KEYS = (JOB_KEY, "gcpgpu-job-id", "gcpgpu-job-agent", CANCEL_KEY, "gcpgpu-node-rank",
            "gcpgpu-nnodes", "gcpgpu-master-addr", "gcpgpu-master-port", DUMP_KEY)
Fence = Callable[[], None]
Held = list[tuple[Node, JobRecord]]  # the nodes that hold a job, with the job's node record on each
Reports = dict[str, dict[str, str]]  # node name -> its guest attributes


def unfenced() -> None:
    pass


def container_name(job_id: str) -> str:
    return f"gcpgpu-job-{job_id}"


def log_filter(project: str, jid: ids.JobId) -> str:
    return (f'logName="projects/{project}/logs/{LOG_NAME}" AND '
            f'jsonPayload.container.name="/{container_name(jid.job)}"')


def job_of(node: Node) -> JobRecord | None:
    """The node record `node` holds, or None."""
    return JobRecord.parse(node.metadata.get(JOB_KEY))


def set_metadata(clients: Clients, project: str, node: Node, items: dict[str, str], fence: Fence = unfenced) -> Any:
    """Start replacing the node's metadata with `items`, under the fingerprint it was read with."""
    from gcpgpu.gcp.compute import compute_types

    compute = compute_types()
    fence()
    metadata = compute.Metadata(fingerprint=node.metadata_fingerprint,
                                items=[compute.Items(key=k, value=v) for k, v in items.items()])
    return call(clients.compute("InstancesClient").set_metadata, {
        "project": project, "zone": node.zone, "instance": node.name, "metadata_resource": metadata})


def reports(clients: Clients, project: str, nodes: list[Node]) -> Reports:
    """Each node's guest attributes, read once, in parallel (a failed read raises)."""
    got = parallel(lambda n: guest_attributes(clients, project, n), nodes)
    for report in got:
        if isinstance(report, BaseException):
            raise report
    return {n.name: r for n, r in zip(nodes, got, strict=True)}


def held(nodes: list[Node], job_id: str | None = None) -> Held:
    """The nodes among `nodes` that hold a job (`job_id`'s only, when given), with its record on each."""
    return [(n, job) for n in nodes if (job := job_of(n)) is not None and (job_id is None or job.id == job_id)]


def job_nodes(clients: Clients, project: str, jid: ids.JobId, nodes: list[Node] | None = None) -> Held:
    """The nodes that hold the job (from `nodes`, the cluster's as read, or one read now); one line otherwise."""
    nodes = ranked_nodes(clients, project, jid.cluster or "") if nodes is None else nodes
    if not nodes:
        from gcpgpu.cluster.unknown import missing

        from . import store

        if store.read(clients, project, jid.cluster or "").of(jid.job) is not None:  # it ran there: said as such
            raise CloudError(f"no cluster named {jid.cluster} in project {project}: its job {jid.job} went with it")
        raise missing(clients, project, jid.cluster or "")
    mine = held(nodes, jid.job)
    if not mine:
        current = sorted({job.id for _n, job in held(nodes)})
        later = f" (it now runs {', '.join(current)})" if current else ""
        raise CloudError(f"job {jid.job} is not on cluster {jid.cluster}{later}; see 'gcpgpu job list'")
    return mine


def newest(mine: Held) -> JobRecord:
    """The job's record as its nodes hold it (the newest attempt's, when nodes disagree)."""
    return max((job for _n, job in mine), key=lambda j: j.attempt)


def record_of(clients: Clients, project: str, jid: ids.JobId) -> JobRecord:
    """The job's record as its nodes hold it (the newest attempt's, when nodes disagree)."""
    return newest(job_nodes(clients, project, jid))


def busy(chosen: Held, said: Reports) -> tuple[str, str] | None:
    """(node, job) for a node whose current job has not ended, as its agent reported it, else None."""
    for node, job in chosen:
        report = said.get(node.name, {})
        cancelled = node.metadata.get(CANCEL_KEY) == job.run_key
        if report.get("job-id") == job.run_key and report.get("state") in ACTIVE and not cancelled:
            return node.name, job.id
    return None


def status(clients: Clients, project: str, jid: ids.JobId) -> JobState:
    """The job's state on each node, as the nodes' agents report it, and overall (what the nodes say:
    the job's own state is its record's, store.py, which every view shows through view.py)."""
    mine = job_nodes(clients, project, jid)
    return state_of(jid, mine, reports(clients, project, [n for n, _job in mine]))


def state_of(jid: ids.JobId, mine: Held, said: Reports) -> JobState:
    """The job's state from its nodes (`mine`) and their agents' reports (`said`)."""
    job = newest(mine)
    run = job.run_key
    rows = []
    for inst, _job in mine:
        report = said.get(inst.name, {})
        ours = report.get("job-id") == run
        state = report.get("state") if ours else None
        if state is None:
            cancelled = inst.metadata.get(CANCEL_KEY) == run
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
            "ends_at": inst.ends_at, "maintenance": inst.maintenance,  # known ends ahead (ahead.py)
        })
    rows.sort(key=lambda r: r["rank"])
    overall = aggregate([r["state"] for r in rows])
    failed = first_failed(rows)
    error = None
    if failed:
        # A node's last words may be its launcher's banner (torchrun's "=====" report): never the error.
        said_line = f": {failed['message']}" if failed["message"] and not job_logs.launcher_noise(failed["message"]) \
            else ""
        error = f"node {failed['node']} (rank {failed['rank']}) exited with status {failed['exit_code']}{said_line}"
    started = [r["started"] for r in rows if r["started"]]
    ended = [r["ended"] for r in rows if r["ended"]]
    history = list(job.history or [])
    recoveries = sum(1 for h in history if h.get("kind") != "retry")
    return JobState(
        id=str(jid), target="cluster", name=job.name, state=overall, created=job.created or job.submitted,
        started=min(started) if started else None, ended=max(ended) if ended and is_final(overall) else None,
        error=error, nodes=len(rows), machine_type=job.machine_type, cluster=jid.cluster,
        master=f"{job.master_addr}:{job.master_port}", image=job.image, per_node=rows,
        nnodes=int(job.nnodes or len(rows)), attempt=job.attempt, recover=job.recover, recoveries=recoveries,
        history=history, restarts=len(history) - recoveries, output_dir=job.output_dir,
    )


def ended_before(cluster: str, chosen: Held, nodes: list[Node], said: Reports) -> dict[str, dict]:
    """The ends of the jobs `chosen` held before a new one, from the nodes and reports already read
    (job id -> state, error, ended), for the record of each that nobody closed."""
    out: dict[str, dict] = {}
    for before in {job.id for _n, job in chosen}:
        was = state_of(ids.JobId("cluster", cluster=cluster, job=before), held(nodes, before), said)
        if is_final(was.state):
            out[before] = {"state": was.state, "error": was.error, "ended": was.ended}
    return out


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


def ask(clients: Clients, project: str, mine: Held, key: str, fence: Fence = unfenced) -> None:
    """Set `key` = the job's run on each of `mine` (cancel, or ask for stacks): the agents act on it."""
    def put(pair: tuple[Node, JobRecord]) -> Any:
        node, job = pair
        return set_metadata(clients, project, node, {**node.metadata, key: job.run_key}, fence)

    batch(clients, project, put, mine)


def cancel(clients: Clients, project: str, jid: ids.JobId, only_running: bool = False,
           fence: Fence = unfenced) -> None:
    """Ask every node of the job to stop it (metadata gcpgpu-job-cancel); the agents do the stopping.
    With only_running, the nodes that are RUNNING (a recovery stops the survivors of a lost node)."""
    mine = [(n, j) for n, j in job_nodes(clients, project, jid) if not only_running or n.status == "RUNNING"]
    ask(clients, project, mine, CANCEL_KEY, fence)


def current_jobs(clients: Clients, project: str) -> dict[str, list[str]]:
    """The job ids each gcpgpu cluster's nodes hold now, by cluster (its earlier jobs: store.py)."""
    out: dict[str, list[str]] = {}
    for inst in project_nodes(clients, project):
        job = job_of(inst)
        if job is not None:
            ids_ = out.setdefault(inst.labels.get(LABEL_CLUSTER, "?"), [])
            if job.id not in ids_:
                ids_.append(job.id)
    return out
