"""Why a cluster job's node was lost, as Compute tells it: the views (view.py) and the follower
(recover.py) name a loss the same way."""

from __future__ import annotations

from gcpgpu.cluster.cost import ended_by_run_limit
from gcpgpu.cluster.observe import observe_nodes
from gcpgpu.gcp.clients import Clients

CAUSES = {"compute.instances.preempted": "preempted", "compute.instances.hostError": "host error"}
RUN_LIMIT = "its --max-run-duration ended"  # the cluster's own cap: a loss the follower does not recover


def loss_causes(clients: Clients, project: str, cluster: str, lost: list[dict]) -> dict[str, str]:
    """Why each lost node (a row of the job's per_node) went: its zone's newest system operation on it
    (as Google's preemption-history sample reads them). A node name is reused by every recovery, so an
    older VM's preemption must not explain a newer VM's host error: the newest operation wins, and the
    VM's own id when known."""
    ops = clients.compute("ZoneOperationsClient")
    found = {n.name: n for n in observe_nodes(clients, project, cluster)}
    vm_ids = {name: n.id for name, n in found.items()}
    out = {}
    for row in lost:
        link = f"https://www.googleapis.com/compute/v1/projects/{project}/zones/{row['zone']}/instances/{row['node']}"
        out[row["node"]] = f"node {row['node_status'].lower()}" if row["node_status"] != "RUNNING" else "lost"
        seen = [op for op in ops.list(request={"project": project, "zone": row["zone"], "filter": f'targetLink="{link}"'})
                if op.operation_type in CAUSES and (row["node"] not in vm_ids or str(op.target_id) == vm_ids[row["node"]])]
        if seen:
            out[row["node"]] = CAUSES[max(seen, key=lambda op: (op.insert_time, int(op.id or 0))).operation_type]
        elif row["node"] in found and ended_by_run_limit(found[row["node"]]):
            out[row["node"]] = RUN_LIMIT
    return out
