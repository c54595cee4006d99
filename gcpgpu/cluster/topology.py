"""Node ranks in fabric order: nodes sharing a sub-block, then a block, get adjacent ranks.

Compute reports each compact-placed A3 (8-GPU) / A3 Ultra / A4 VM's place in
`resourceStatus.physicalHostTopology {cluster, block, subblock, host}`: same sub-block = same rack,
same block = same optical block (Compute v1 discovery schema; Google's guide "View VM topology").
NCCL builds its rings and trees in rank order, so ranks that follow the fabric keep most hops
inside a rack. Ordering is stable: groups are ordered by the lowest rank they already hold, so
rank 0 stays rank 0 and a cluster already in order is left as it is.
"""

from __future__ import annotations

from .names import LABEL_RANK
from .observe import ROW_FIELDS, Node, observe_nodes
from .plan import Plan
from .ranks import set_labels
from .session import Session


def topology_order(nodes: list[Node]) -> list[Node]:
    """`nodes` (in current rank order) regrouped by block, then sub-block; unchanged without topology."""
    if not any(n.block for n in nodes):
        return list(nodes)
    first_in_block: dict[str | None, int] = {}
    first_in_subblock: dict[tuple[str | None, str | None], int] = {}
    for i, n in enumerate(nodes):
        first_in_block.setdefault(n.block, i)
        first_in_subblock.setdefault((n.block, n.subblock), i)
    position = {id(n): i for i, n in enumerate(nodes)}
    return sorted(nodes, key=lambda n: (n.block is None, first_in_block[n.block],
                                        first_in_subblock[(n.block, n.subblock)], position[id(n)]))


def blocks_spanned(nodes: list[Node]) -> list[str]:
    return sorted({n.block for n in nodes if n.block})


def subblocks_spanned(nodes: list[Node]) -> list[tuple[str, str]]:
    return sorted({(n.block, n.subblock) for n in nodes if n.block and n.subblock})


def rank_by_topology(session: Session, plan: Plan, nodes: list[Node]) -> list[Node]:
    """Relabel ranks in fabric order and warn when the cluster spans blocks. `up` calls it only when it
    added nodes (never under a running job's feet). Returns the nodes as labelled now."""
    ordered = topology_order(nodes)
    blocks = blocks_spanned(nodes)
    if blocks:
        session.report.note(f"fabric: {len(nodes)} node(s) in {len(subblocks_spanned(nodes))} sub-block(s) of "
                            f"{len(blocks)} block(s)")
    if len(blocks) > 1:
        session.report.note(f"warning: cluster {plan.name} spans {len(blocks)} blocks; traffic between them "
                            "crosses the optical layer (slower than within a block)")
    moved = [(rank, n) for rank, n in enumerate(ordered) if n.rank != rank]
    if not moved:
        return nodes
    session.report.step("labels", f"Ordering ranks by sub-block and block ({len(moved)} node(s) relabelled)")
    set_labels(session, [(n, {**n.labels, LABEL_RANK: str(rank)}) for rank, n in moved])
    want = set(plan.node_names)
    return [n for n in observe_nodes(session.clients, session.project, plan.name, ROW_FIELDS) if n.name in want]
