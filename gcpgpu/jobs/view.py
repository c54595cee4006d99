"""What every view shows of a cluster job (`job status`, `job list`, `job cancel`, `job logs --follow`,
`--wait` and `job follow` watching a leader, the metrics' job span): its record (jobs/record.py) and
what its nodes report now, combined by the one rule there (record.shown)."""

from __future__ import annotations

from gcpgpu.errors import CloudError
from gcpgpu.gcp.clients import Clients

from . import cluster as cluster_jobs
from . import ids, queue
from . import record as record_mod
from .loss import loss_causes
from .state import RECOVERING, JobState


def job_status(clients: Clients, project: str, jid: ids.JobId) -> JobState:
    """The job as every view shows it (jobs/record.py's shown): its record, and what its nodes report."""
    seen = record_mod.read(clients, project, jid.cluster or "")
    found = seen.of(jid.job)
    try:
        observed: JobState | None = cluster_jobs.status(clients, project, jid)
    except CloudError:
        if found is None and (seen.pending or {}).get("id") != jid.job:
            raise
        observed = None  # no node holds the job now (a recovery replaced them all, or a later job came)
    if found is None and (seen.pending or {}).get("id") == jid.job:
        found = {**record_mod.from_nodes(seen.pending), "state": RECOVERING}  # written down by an older gcpgpu
    return record_mod.shown(jid, observed, found, seen,
                            lambda lost: loss_causes(clients, project, jid.cluster or "", lost))


def cancel_job(clients: Clients, project: str, jid: ids.JobId) -> JobState:
    """`job cancel`: ask every node to stop the job; the job as views showed it when asked (the nodes
    whose rank still ran are those the asking stops: read after, an agent may have stopped already)."""
    state = job_status(clients, project, jid)
    if queue.is_queued(record_mod.read(clients, project, jid.cluster or "").of(jid.job)):
        queue.cancel(clients, project, jid)  # Slurm's: the controller's agent scancels it
        return state
    cluster_jobs.cancel(clients, project, jid)
    return state


def list_jobs(clients: Clients, project: str) -> list[dict]:
    """`job list`'s cluster rows, newest first per cluster: each cluster's last record_mod.KEEP jobs
    from their records, and the job its nodes hold now as `job status` shows it."""
    seen_all = record_mod.read_all(clients, project)
    current = cluster_jobs.current_jobs(clients, project)
    rows = []
    for cluster in sorted(set(seen_all) | set(current)):
        seen = seen_all.get(cluster) or record_mod.Seen([], None, None)
        job_ids = [r["id"] for r in seen.records] + [j for j in current.get(cluster, []) if seen.of(j) is None]
        for job_id in reversed(job_ids):
            jid = ids.JobId("cluster", cluster=cluster, job=job_id)
            try:
                state = job_status(clients, project, jid) if job_id in current.get(cluster, []) else \
                    record_mod.from_record(jid, seen.of(job_id) or {})
            except CloudError:  # the job left its nodes between the two reads: the next list shows it
                continue
            recorded = seen.of(job_id) or {}
            rows.append({"id": str(jid), "target": "cluster", "name": state.name, "state": state.state,
                         "nodes": state.nodes or state.nnodes, "machine_type": state.machine_type,
                         "created": state.created, "recoveries": state.recoveries,
                         **(queue.row_extras(recorded) if queue.is_queued(recorded) else {})})
    return rows
