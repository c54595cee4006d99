"""`cluster doctor --active`'s output: the diagnostics table and the one line that names what is bad."""

from __future__ import annotations

from gcpgpu.errors import CloudError
from gcpgpu.output import emit, info
from gcpgpu.settings import Settings


def active_doctor(settings: Settings, name: str) -> None:
    """Run active diagnostics on cluster `name`; exit 1 naming each bad node, GPU or NIC."""
    from gcpgpu.cluster import diagnose
    from gcpgpu.cluster.observe import ranked_nodes

    nodes = ranked_nodes(settings.clients, settings.project, name)
    info(f"Running diagnostics on {len(nodes)} node(s) of {name} (GPU diagnostics, NVLink and NCCL all_reduce)")
    diagnoses, cluster_problems = diagnose.run(settings.clients, settings.project, nodes, note=info)
    emit([d.row() for d in diagnoses], diagnose.COLUMNS, title=f"Cluster {name}: diagnostics")
    for line in cluster_problems:
        info(f"problem: {line}")
    bad = [d for d in diagnoses if d.problems]
    if bad or cluster_problems:
        named = [f"{d.node} (rank {d.rank}): {'; '.join(d.problems)}" for d in bad]
        raise CloudError(f"diagnostics failed on {len(bad)} of {len(diagnoses)} node(s): "
                         + " | ".join(named or cluster_problems))
