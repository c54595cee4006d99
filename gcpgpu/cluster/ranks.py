"""Node rank labels (`gcpgpu-rank`): set while the nodes boot (bootlabels), repaired when a re-run of `up` finds
them missing or claimed twice, and put in fabric order by `topology.rank_by_topology`. All three
write labels the same way: `set_labels`.
"""

from __future__ import annotations

from typing import Any

from .names import LABEL_CLUSTER, LABEL_MANAGED, LABEL_RANK, rank_of
from .observe import Node, observe_nodes, observe_nodes_by_name
from .plan import Plan
from .session import Session


def send_label(session: Session, node: Node, labels: dict[str, str]) -> Any:
    """instances.setLabels (node's new labels) under its label fingerprint; the operation, not waited on."""
    from gcpgpu.gcp.compute import compute_types

    compute = compute_types()

    return session.call(session.client("InstancesClient").set_labels, {
        "project": session.project, "zone": node.zone, "instance": node.name,
        "instances_set_labels_request_resource": compute.InstancesSetLabelsRequest(
            labels=labels, label_fingerprint=node.label_fingerprint)})


def set_labels(session: Session, items: list[tuple[Node, dict[str, str]]]) -> None:
    """send_label on each (node, its new labels) in parallel, every operation waited on."""
    session.batch(lambda item: send_label(session, *item), items)


def repair_ranks(plan: Plan, labelled: dict[str, str | None]) -> dict[str, int]:
    """The rank each existing planned node should carry, given its current `gcpgpu-rank` label: a unique
    in-range rank is kept (a node whose rank is its name's number wins a duplicate), the others get their
    name's number if free, else the lowest free rank."""
    size = len(plan.node_names)
    out: dict[str, int] = {}
    taken: set[int] = set()
    current = {n: int(r) if r is not None and r.isdigit() and int(r) < size else None for n, r in labelled.items()}
    for name, rank in current.items():
        if rank is not None and rank == rank_of(plan.name, name):
            out[name] = rank
            taken.add(rank)
    for name in sorted(current):
        rank = current[name]
        if name not in out and rank is not None and rank not in taken:
            out[name] = rank
            taken.add(rank)
    free = sorted(set(range(size)) - taken)
    for name in sorted(current):
        if name not in out:
            own = rank_of(plan.name, name)
            rank = own if own in free else free[0]
            free.remove(rank)
            out[name] = rank
    return out


def repair(session: Session, plan: Plan) -> bool:
    """Every planned node carries the cluster's labels and a rank of its own (after a kill between
    bulkInsert and the rank labels, a hand edit, or two nodes claiming one rank); ranks that already
    form a valid set are kept whatever their order (fabric order differs from names). True if any
    label changed."""
    found = {n.name: n for n in observe_nodes(session.clients, session.project, plan.name)}
    found.update({n.name: n for n in observe_nodes_by_name(session.clients, session.project, plan.name)
                  if n.name not in found})
    ranks = repair_ranks(plan, {name: found[name].labels.get(LABEL_RANK) for name in plan.node_names
                                if name in found})
    todo = []
    for name, rank in ranks.items():
        node = found[name]
        want = {LABEL_CLUSTER: plan.name, LABEL_MANAGED: "true", LABEL_RANK: str(rank)}
        if any(node.labels.get(k) != v for k, v in want.items()):
            todo.append((node, {**node.labels, **want}))
    if not todo:
        return False
    session.report.step("repair", f"Repairing the labels of {len(todo)} node(s): "
                                  + ", ".join(node.name for node, _labels in todo[:5]))
    set_labels(session, todo)
    return True
