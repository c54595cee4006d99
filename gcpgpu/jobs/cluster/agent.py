"""The backend of a cluster without a scheduler: gcpgpu's job agent on each node runs one job at a time.

submit: the nodes were read once (placement.py) -> take the cluster's lease (the one `up`, `down`,
        autostop and a recovery hold: a cluster being stopped or deleted refuses the job, and one that
        comes later finds the job on the nodes) -> read the guest attributes of the nodes that hold a job,
        once: refuse if a job still runs on the chosen nodes -> (the workdir and image are staged, under
        the lease) -> put the job on every chosen node (deliver.py; each write is conditional on the
        metadata read at placement, so a node changed since is refused, not overwritten) -> open its
        record (PENDING), closing the jobs those nodes held before where nobody did.
status: its record and its nodes' reports (view.py); cancel: metadata on its nodes (nodes.py); follow:
        lead its followers or watch the leader (follower.py).
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Callable, Iterator
from typing import Any

from gcpgpu.cluster.lease import Lease, LeaseHeld, describe
from gcpgpu.errors import CloudError, UsageProblem
from gcpgpu.gcp.clients import Clients
from gcpgpu.gcp.identity import whoami
from gcpgpu.jobs import ids, policy
from gcpgpu.jobs.spec import ValidJob
from gcpgpu.jobs.state import JobState

from . import deliver, follower, nodes, store, view
from .placement import Asked, Placement, Put
from .record import AGENT, JobRecord
from .store import Seen


def check(job: ValidJob, cluster: str) -> None:
    """Refuse what this backend does not take, before anything is staged."""
    if job.spec.priority:
        raise UsageProblem(f"--priority {job.spec.priority}: cluster {cluster} runs one job at a time, without "
                           f"Slurm; drop --priority, or make a cluster with 'gcpgpu cluster up NAME --scheduler slurm'")


@contextlib.contextmanager
def claim(clients: Clients, project: str, placed: Placement) -> Iterator[Callable[[ValidJob, Asked], Put]]:
    """Hold the cluster for a job while it is staged and put on its nodes: its lease, and its chosen nodes
    checked free (one guest-attributes read of each node holding a job). Yields put(job, asked)."""
    cluster = placed.cluster
    lease = Lease(clients, project, cluster, holder=secrets.token_hex(6), op="job submit")
    try:
        lease.acquire(wait_for_it=False)
    except LeaseHeld as e:
        raise CloudError(f"cluster {cluster} is busy ({describe(e.holder)}): the job was not submitted; submit "
                         f"it again once that is done ('gcpgpu cluster status {cluster}' shows the cluster)") from None
    try:
        not_running = [n.name for n in placed.nodes if n.status != "RUNNING"]
        if not_running:
            raise CloudError(f"node(s) {', '.join(not_running)} of cluster {cluster} are not RUNNING; see "
                             f"'gcpgpu cluster status {cluster}'")
        holding = nodes.held(placed.every)
        said = nodes.reports(clients, project, [n for n, _job in holding])
        chosen = nodes.held(placed.nodes)
        if (busy := nodes.busy(chosen, said)) is not None:
            node, other = busy
            raise CloudError(f"node {node} is still running job {other}: cancel it first ('gcpgpu job cancel "
                             f"cluster:{cluster}:{other}') or wait for it to end")
        ended = nodes.ended_before(cluster, chosen, placed.every, said)

        def put(job: ValidJob, asked: Asked) -> Put:
            return _put(clients, project, job, placed, asked, ended, lease.check)

        yield put
    finally:
        with contextlib.suppress(Exception):  # an unreleased lease expires; never hide the real error
            lease.release()


def _put(clients: Clients, project: str, job: ValidJob, placed: Placement, asked: Asked, ended: dict[str, dict],
         fence: Callable[[], None]) -> Put:
    """Put the job on its nodes and open its record. `asked.recover` (submit --recover N) is kept in the
    record, so whoever follows it later knows N; so is `asked.detach`: the nodes run the follower
    themselves (gcpgpu/node/agent.py), from `asked.agent` where neither the job's image nor the node's
    own follower is one. The submitter follows the job with --wait or --recover, and where retries, stall
    detection or webhooks need a follower (the nodes' own after --detach): the record says so until it leads."""
    follow = (asked.wait or asked.recover is not None or bool(policy.record_fields(job.spec))) and not asked.detach
    record = deliver.new_record(job, placed, scheduler=AGENT, recover=asked.recover, detach=asked.detach,
                                agent=asked.agent).but(submitter=whoami(clients))
    record = deliver.deliver(clients, project, record, placed.nodes, fence)
    opening = store.opening(record, followed_s=store.FOLLOW_PROMISE_S if follow else 0.0)
    store.update(clients, project, placed.cluster, store.opened(opening, ended))
    jid = ids.JobId("cluster", cluster=placed.cluster, job=record.id)
    provisioning = placed.nodes[0].provisioning
    shown = {"id": str(jid), "target": "cluster", "name": job.name, "cluster": placed.cluster,
             "nodes": len(placed.nodes), "machine_type": placed.machine.name,
             "master": f"{record.master_addr}:{deliver.MASTER_PORT}", "image": record.image,
             "provisioning": provisioning}
    notes = []
    if asked.detach:
        notes.append(f"The cluster's nodes follow {jid} now; this machine may go. 'gcpgpu job follow {jid}' "
                     "watches it.")
    elif not follow and provisioning in ("SPOT", "FLEX_START"):
        notes.append(f"note: cluster {placed.cluster} has {provisioning.lower()} nodes and nothing follows this "
                     f"job: 'gcpgpu job follow {jid}' (or --wait here) recovers it when a node is lost")
    line = (f"Submitted {job.name} as {jid} ({len(placed.nodes)} x {placed.machine.name}); follow it with "
            f"'gcpgpu job logs {jid} --follow'")
    return Put(jid, shown, line, notes, follow)


def status(clients: Clients, project: str, jid: ids.JobId, seen: Seen) -> JobState:
    return view.job_status(clients, project, jid, seen)


def cancel(clients: Clients, project: str, jid: ids.JobId, seen: Seen) -> JobState:
    """Ask every node to stop the job; the job as views showed it when asked (the nodes whose rank still
    ran are those the asking stops: read after, an agent may have stopped already)."""
    state = view.job_status(clients, project, jid, seen)
    nodes.cancel(clients, project, jid)
    return state


def follow(clients: Clients, project: str, jid: ids.JobId, **kw: Any) -> JobState:
    return follower.follow(clients, project, jid, **kw)


def row(record: JobRecord) -> dict:
    return {}


def has_work(clients: Clients, project: str, cluster: str, seen: Seen) -> bool:
    """Whether a job runs on the cluster's nodes now, or is being recovered."""
    if seen.pending is not None:
        return True
    found = follower.current_job(clients, project, cluster, seen)
    return found is not None and not view.job_status(clients, project, found[0], seen).final
