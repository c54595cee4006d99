"""What a deleted cluster cost, kept after it is gone: the cost records `gcpgpu cost report` reads.

A live cluster's cost is on its nodes (cluster/cost.py reads each VM's run) and its jobs' in the
cluster's job records (cluster/store.py); `cluster down` deletes both. Before it does, the cluster's
cost record is written here, in the project's metadata (key `gcpgpu-costs`), as job records are:
it outlives every machine, any machine with the project's credentials reads the same (the laptop
that ran `down`, another one, a node whose autostop deletes its own cluster), and writes are
compare-and-swap. A file on the laptop would miss what a cluster's own follower deleted, and what
another machine deleted.

One record per deleted cluster, newest last, at most KEEP (and MAX_CHARS of JSON: the oldest go first):

    {"cluster": "c", "machine_type": "a3-highgpu-8g", "nodes": 2, "provisioning": "SPOT",
     "region": "us-central1", "started": RFC 3339, "ended": RFC 3339, "labels": {...},
     "node_hours": 3.2, "cost_usd": 178.69 (None: no catalog price), "price_per_hour": 55.84,
     "why": "cluster down" | "autostop" | "max spend",
     "jobs": [{"id", "name", "state", "nnodes", "created", "ended", "node_hours", "cost_usd", "labels"}]}

The figures are COST SO FAR's (cluster/cost.py, jobs/cluster/spent.py) at the moment the cluster went,
so the report sums what `cluster status` and `job status` showed.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from gcpgpu.gcp import clock
from gcpgpu.gcp.clients import Clients

KEY = "gcpgpu-costs"
KEEP = 200
MAX_CHARS = 200_000  # a metadata value holds 256 KB
USER_LABEL_PREFIX = "gcpgpu"  # gcpgpu's own labels (gcpgpu-cluster, gcpgpu-rank, ...) are not the user's


def user_labels(labels: dict[str, str] | None) -> dict[str, str]:
    """The labels a user gave (cluster up --label, job submit --label), without gcpgpu's own."""
    return {k: v for k, v in (labels or {}).items() if not k.startswith(USER_LABEL_PREFIX)}


def read(clients: Clients, project: str) -> list[dict[str, Any]]:
    """The cost records of the project's deleted clusters, oldest first."""
    from gcpgpu.jobs.cluster import journal

    raw = next((i["value"] for i in journal.items(clients, project)[1] if i["key"] == KEY), None)
    return parse(raw)


def parse(raw: str | None) -> list[dict[str, Any]]:
    try:
        got = json.loads(raw or "{}").get("clusters") or []
    except (ValueError, AttributeError):
        return []
    return [r for r in got if isinstance(r, dict) and r.get("cluster")]


def _kept(records: list[dict[str, Any]]) -> str:
    records = records[-KEEP:]
    while True:
        text = json.dumps({"clusters": records}, sort_keys=True)
        if len(text) <= MAX_CHARS or len(records) <= 1:
            return text
        records = records[1:]


def snapshot(clients: Clients, project: str, cluster: str, now: float | None = None,
             goodput: bool = True) -> dict[str, Any] | None:
    """The cluster's cost record as of now (None: it has no nodes): its nodes' runs and its jobs' costs,
    read before they are deleted (the jobs' node-hours need their nodes); with `goodput`, each job's lost
    goodput parts in dollars (one log read per job)."""
    from gcpgpu.cluster import cost
    from gcpgpu.cluster.observe import observe_nodes
    from gcpgpu.jobs import ids
    from gcpgpu.jobs.cluster import spent, store, view
    from gcpgpu.jobs.cluster.record import stamp
    from gcpgpu.times import parse_timestamp

    now = clock.now() if now is None else now
    nodes = observe_nodes(clients, project, cluster)
    if not nodes:
        return None
    got = cost.summary(nodes, now)
    starts = [t for n in nodes if (t := parse_timestamp(n.created)) is not None]
    seen = store.read(clients, project, cluster)
    jobs = []
    for record in seen.records:
        jid = ids.JobId("cluster", cluster=cluster, job=record.id)
        try:
            state = view.job_status(clients, project, jid, seen)
            paid = spent.job_spent(clients, project, state, now)
        except Exception:  # a record the views cannot read: left out of the report rather than fail `down`
            continue
        jobs.append({"id": str(jid), "name": record.name, "state": state.state, "nnodes": state.nnodes,
                     "submitter": state.submitter,
                     "created": state.created, "ended": state.ended or stamp(now), "final": state.final,
                     "node_hours": paid["node_hours"], "cost_usd": paid["cost_usd"],
                     "lost_usd": _lost_usd(clients, project, state, now, paid["price_per_hour"]) if goodput else None})
    first = nodes[0]
    return {"cluster": cluster, "machine_type": first.machine_type, "nodes": len(nodes),
            "provisioning": first.provisioning, "region": first.region,
            "started": stamp(min(starts)) if starts else None, "ended": stamp(now),
            "labels": user_labels(first.labels), "node_hours": got["node_hours"], "cost_usd": got["cost_usd"],
            "price_per_hour": cost.node_price(first.machine_type, first.provisioning, first.region), "jobs": jobs,
            "owner": next((n.metadata["gcpgpu-owner"] for n in nodes if n.metadata.get("gcpgpu-owner")), None)}


def snapshot_or_none(clients: Clients, project: str, cluster: str, say: Any) -> dict[str, Any] | None:
    """snapshot(), or None with one line said when it cannot be read: a cost record never holds up a teardown."""
    try:
        return snapshot(clients, project, cluster)
    except Exception as e:
        say(f"note: cluster {cluster}'s cost could not be read before it goes ({type(e).__name__}: {e}); "
            "'gcpgpu cost report' will not show it")
        return None


def keep(clients: Clients, project: str, record: dict[str, Any] | None, why: str,
         fence: Any = lambda: None) -> bool:
    """Add a deleted cluster's cost record (snapshot's, `why` it went); False when there is none."""
    if record is None:
        return False
    from gcpgpu.jobs.cluster import journal

    entry = {**record, "why": why}

    def change(current: str | None) -> str:
        return _kept([*parse(current), entry])

    return journal.swap(clients, project, KEY, change, fence, "the project's cost records")


def keep_if_gone(clients: Clients, project: str, cluster: str, record: dict[str, Any] | None, why: str,
                 deleted: list[Any] | None = None, own: str | None = None) -> bool:
    """After a teardown: keep `record` (snapshot's, taken before it) once the cluster's nodes are gone (all
    but `own`: an autostop's judge, deleted last, right after this); `deleted` (the nodes the teardown
    found, as they were) carries the cluster's own figures on to now, as Compute bills a VM until it is
    deleted. A failure is logged, never raised: the cluster is gone all the same."""
    from gcpgpu.cluster import cost
    from gcpgpu.cluster.observe import observe_nodes
    from gcpgpu.jobs.cluster.record import stamp

    try:
        if record is None or [n for n in observe_nodes(clients, project, cluster) if n.name != own]:
            return False
        if deleted:
            now = clock.now()
            got = cost.summary(deleted, now)
            record = {**record, "node_hours": got["node_hours"], "cost_usd": got["cost_usd"], "ended": stamp(now)}
        return keep(clients, project, record, why)
    except Exception as e:  # the cluster is gone all the same: its cost record is what is missing
        logging.getLogger(__name__).warning("cluster %s: its cost record was not kept (%s: %s)", cluster,
                                            type(e).__name__, e)
        return False


def _lost_usd(clients: Clients, project: str, state: Any, now: float, price: float | None) -> dict[str, float] | None:
    """The job's lost goodput parts in dollars (goodput.lost_usd), None when its log or price does not tell."""
    from gcpgpu.jobs import goodput, ids, route

    if price is None:
        return None
    try:
        got = goodput.of_job(clients, project, state, now, route.log_filter(project, ids.parse(state.id)))
    except Exception:  # a log that cannot be read: the cost stands without its parts
        return None
    return goodput.lost_usd(got, price)
