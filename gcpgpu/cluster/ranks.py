"""Node rank labels (`gcpgpu-rank`): set right after bulkInsert, repaired when a re-run of `up` finds
them missing or claimed twice, and put in fabric order by `topology.rank_by_topology`. All three
write labels the same way: `set_labels`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gcpgpu.gcp.operations import call, parallel, wait_all

from .observe import list_nodes, observe_nodes, observe_nodes_by_name
from .plan import LABEL_CLUSTER, LABEL_MANAGED, LABEL_RANK, Plan, rank_of

if TYPE_CHECKING:
    from .apply import Cluster


def set_labels(cluster: Cluster, items: list[tuple[str, str, dict[str, str], str]]) -> None:
    """instances.setLabels on each (zone, instance, labels, label fingerprint) in parallel; wait for all,
    raise the first error."""
    from google.cloud import compute_v1

    def one(item: tuple[str, str, dict[str, str], str]) -> Any:
        zone, name, labels, fingerprint = item
        return call(cluster.c("InstancesClient").set_labels, {
            "project": cluster.project, "zone": zone, "instance": name,
            "instances_set_labels_request_resource": compute_v1.InstancesSetLabelsRequest(
                labels=labels, label_fingerprint=fingerprint)})

    ops = parallel(one, items)
    for r in ops:
        if isinstance(r, BaseException):
            raise r
    errors = [e for e in wait_all(cluster.clients, cluster.project, ops) if e is not None]
    if errors:
        raise errors[0]


def label_new(cluster: Cluster, plan: Plan, zone: str, names: list[str]) -> None:
    """bulkInsert gives every VM the same labels; each new node's rank (its name's number) is set right after."""
    nodes = {i.name: i for i in list_nodes(cluster.clients, cluster.project, f"labels.{LABEL_CLUSTER} = {plan.name}")}
    todo = [nodes[n] for n in names if n in nodes]
    cluster.report.step("labels", f"Labelling {len(todo)} node(s) with their rank")
    set_labels(cluster, [(zone, i.name, {**dict(i.labels), LABEL_RANK: str(rank_of(plan.name, i.name))},
                          i.label_fingerprint) for i in todo])


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


def repair(cluster: Cluster, plan: Plan) -> bool:
    """Every planned node carries the cluster's labels and a rank of its own (after a kill between
    bulkInsert and the rank labels, a hand edit, or two nodes claiming one rank); ranks that already
    form a valid set are kept whatever their order (fabric order differs from names). True if any
    label changed."""
    found = {n.name: n for n in observe_nodes(cluster.clients, cluster.project, plan.name)}
    found.update({n.name: n for n in observe_nodes_by_name(cluster.clients, cluster.project, plan.name)
                  if n.name not in found})
    ranks = repair_ranks(plan, {name: found[name].labels.get(LABEL_RANK) for name in plan.node_names
                                if name in found})
    todo = []
    for name, rank in ranks.items():
        node = found[name]
        want = {LABEL_CLUSTER: plan.name, LABEL_MANAGED: "true", LABEL_RANK: str(rank)}
        if any(node.labels.get(k) != v for k, v in want.items()):
            todo.append((node.zone, node.name, {**node.labels, **want}, node.label_fingerprint))
    if not todo:
        return False
    cluster.report.step("repair", f"Repairing the labels of {len(todo)} node(s): "
                                  + ", ".join(name for _z, name, _l, _f in todo[:5]))
    set_labels(cluster, todo)
    return True
