"""`cluster up --check`: run active diagnostics (cluster/diagnose.py) before the cluster is declared
ready, and replace the nodes that fail them: delete the node, let `up` re-create it under its own
name (on another host: a reported-bad host is not handed out again, as Compute's repair flow does;
unverified for a plain delete-and-recreate), then give every node back the rank it had, so ranks
stay put across the replacement."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gcpgpu.errors import CloudError

from . import diagnose
from .kinds import NODES
from .names import LABEL_RANK
from .observe import Node
from .ranks import set_labels
from .teardown import delete_batch, one_line

ROUNDS = 2  # replacements tried before giving up


def check_and_replace(cluster: Any, plan: Any, nodes: list[Node], note: Callable[[str], None],
                      rounds: int | None = None) -> list[Node]:
    """Diagnose `nodes`; replace the failing ones (at most `rounds` times, default ROUNDS); the healthy
    nodes, ranks kept."""
    rounds = ROUNDS if rounds is None else rounds
    ranks = {n.name: n.rank for n in nodes}
    for attempt in range(rounds + 1):
        diagnoses, cluster_problems = diagnose.run(cluster.clients, cluster.project, nodes, note=note)
        bad = [d for d in diagnoses if d.problems]
        if not bad:
            if cluster_problems:  # slow but no node to blame: replacing one at random would not help
                raise CloudError(f"cluster {plan.name}: {'; '.join(cluster_problems)}")
            note(f"diagnostics: all {len(nodes)} node(s) healthy")
            return nodes
        named = "; ".join(f"{d.node} (rank {d.rank}): {', '.join(d.problems)}" for d in bad)
        if attempt == rounds:
            raise CloudError(f"cluster {plan.name}: still failing diagnostics after {rounds} replacement(s): {named}")
        note(f"replacing {len(bad)} node(s) that failed diagnostics: {named}")
        victims = [n for n in nodes if n.name in {d.node for d in bad}]
        errors = [e for e in delete_batch(cluster.clients, cluster.project, NODES, NODES.items(victims)) if e]
        if errors:
            raise CloudError(f"cluster {plan.name}: could not delete a failing node: {one_line(errors[0])}")
        nodes = _keep_ranks(cluster, plan, cluster.up(plan), ranks)
    return nodes


def _keep_ranks(cluster: Any, plan: Any, nodes: list[Node], ranks: dict[str, int | None]) -> list[Node]:
    """`up` re-ranks by fabric when it adds nodes; put back the ranks the nodes had before."""
    moved = [(n, {**n.labels, LABEL_RANK: str(ranks[n.name])}) for n in nodes
             if ranks.get(n.name) is not None and n.rank != ranks[n.name]]
    if moved:
        set_labels(cluster.session(), moved)
    from .observe import ranked_nodes

    return ranked_nodes(cluster.clients, cluster.project, plan.name)
