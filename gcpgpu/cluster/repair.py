"""`cluster repair NAME --node RANK`: take a bad host out from under one node, keeping its name and rank.

A reservation-bound node (A3 Ultra, A4 and A4X capacity) is repaired by Compute itself:
`instances.reportHostAsFaulty` with `disruptionSchedule: IMMEDIATE` ("only allows IMMEDIATE") and a
fault reason (`behavior` CHIP_ERROR | PERFORMANCE | SILENT_DATA_CORRUPTION |
UNRECOVERABLE_GPU_ERROR), all from the Compute v1 discovery document; the VM comes back on another
host of its reservation. Whether Compute accepts it for other VMs is unverified, so any other node is
deleted and re-created from the spec its nodes carry (metadata gcpgpu-spec), under its own name, and
every node keeps the rank it had.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from gcpgpu.errors import CloudError, UsageProblem

from .observe import Node, ranked_nodes

REASONS = {"gpu": "UNRECOVERABLE_GPU_ERROR", "chip": "CHIP_ERROR", "performance": "PERFORMANCE",
           "sdc": "SILENT_DATA_CORRUPTION"}


def repair(cluster: Any, name: str, rank: int, reason: str, note: Callable[[str], None]) -> Node:
    """Repair the node of `rank` in cluster `name`; returns it as it is now."""
    from gcpgpu.gcp.operations import call, wait

    nodes = ranked_nodes(cluster.clients, cluster.project, name)
    node = next((n for n in nodes if n.rank == rank), None)
    if node is None:
        have = ", ".join(str(n.rank) for n in nodes) or "none"
        raise UsageProblem(f"--node {rank}: cluster {name} has no node of that rank (ranks: {have})")
    if node.provisioning == "RESERVATION_BOUND":
        note(f"Reporting the host of {node.name} (rank {rank}) as faulty: Compute moves it to a healthy host")
        op = call(cluster.clients.compute("InstancesClient").report_host_as_faulty, {
            "project": cluster.project, "zone": node.zone, "instance": node.name,
            "instances_report_host_as_faulty_request_resource": {
                "disruption_schedule": "IMMEDIATE",
                "fault_reasons": [{"behavior": REASONS[reason], "description": f"gcpgpu cluster repair ({reason})"}]}})
        wait(cluster.clients, cluster.project, op)
    else:
        _recreate(cluster, name, node, nodes, note)
    return next(n for n in ranked_nodes(cluster.clients, cluster.project, name) if n.name == node.name)


def _recreate(cluster: Any, name: str, node: Node, nodes: list[Node], note: Callable[[str], None]) -> None:
    from .check import _keep_ranks
    from .kinds import NODES
    from .plan import plan
    from .spec import ClusterSpec
    from .teardown import delete_batch, one_line

    raw = node.metadata.get("gcpgpu-spec")
    if not raw:
        raise CloudError(f"{node.name} does not carry its cluster's spec (made by an older gcpgpu): delete it and "
                         f"run 'gcpgpu cluster up {name} ...' again")
    known = set(ClusterSpec.__dataclass_fields__)
    spec = ClusterSpec(**{k: v for k, v in json.loads(raw).items() if k in known}).validate()
    spec.zones = [node.zone]
    ranks = {n.name: n.rank for n in nodes}
    note(f"Re-creating {node.name} (rank {node.rank}) on another host: delete, then 'up' under its own name")
    errors = [e for e in delete_batch(cluster.clients, cluster.project, NODES, [(node.zone, node.name)]) if e]
    if errors:
        raise CloudError(f"could not delete {node.name}: {one_line(errors[0])}")
    p = plan(spec, cluster.project)
    _keep_ranks(cluster, p, cluster.up(p), ranks)
