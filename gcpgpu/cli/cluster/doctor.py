"""A cluster's node health: `cluster doctor` (what each node reported; with --active, diagnostics run on
the nodes, and the one line that names what is bad) and `cluster repair` (one node moved off a bad host)."""

from __future__ import annotations

import sys

import click

from gcpgpu.errors import CloudError, UsageProblem
from gcpgpu.output import emit, info
from gcpgpu.settings import Settings


@click.command()
@click.argument("name")
@click.option("--active", is_flag=True,
              help="Also run diagnostics on the nodes: GPU diagnostics (dcgmi diag, else nvidia-smi ECC, "
                   "row remaps, Xid), an all_reduce over each node's GPUs and a cross-node NCCL all_reduce, "
                   "compared with what the catalog expects (gcpgpu/data/busbw.yaml).")
@click.pass_obj
def doctor(settings: Settings, name: str, active: bool) -> None:
    """Check every node is ready to train: driver, GPUs, GPU NICs and links, GPUDirect pieces, the network.

    Reads what each node's startup script reported (guest attributes), and each NIC's own counters
    (link, speed, errors, retransmits, CNPs; a fabric NIC well below the median NIC is named); exit 1
    if a node is not ready or a NIC is at fault.
    With --active, names the node, GPU or NIC that diagnostics find bad.
    """
    from gcpgpu.cluster import doctor as doc
    from gcpgpu.cluster.names import check_cluster_name

    check_cluster_name(name)
    checks = doc.check(settings.clients, settings.project, name)
    if not checks:
        from gcpgpu.cluster.unknown import missing

        raise missing(settings.clients, settings.project, name)
    rows = [c.row() for c in checks]
    emit(rows, doc.COLUMNS, title=f"Cluster {name}: node health")
    network = network_doctor(settings, name)
    if active:
        active_doctor(settings, name)
    bad = [c for c in checks if c.problems()]
    if bad or network:
        raise CloudError("; ".join(
            ([f"{len(bad)} of {len(checks)} node(s) not ready: "
              + "; ".join(f"{c.node}: {', '.join(c.problems())}" for c in bad)] if bad else [])
            + ([f"network: {' | '.join(network)}"] if network else [])))


def network_doctor(settings: Settings, name: str) -> list[str]:
    """Each node's NICs from their own counters (gcpgpu.node.nics): link, speed, errors, retransmits, CNPs,
    the slowest fabric NIC; returns the problems, each naming its node and NIC."""
    from gcpgpu.gcp import clock
    from gcpgpu.metrics import netdoctor
    from gcpgpu.metrics.target import resolve

    rows, problems = netdoctor.check(settings.clients, resolve(settings.clients, settings.project, "cluster", name),
                                     clock.now())
    if not rows:
        info(f"network: no node of {name} wrote its NICs' counters in the last 5 minutes (gcpgpu.node.nics runs "
             "beside a job)")
        return []
    emit(rows, netdoctor.COLUMNS, title=f"Cluster {name}: network (each NIC's own counters, last 5 minutes)")
    for line in problems:
        info(f"problem: {line}")
    return problems


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


@click.command()
@click.argument("name")
@click.option("--node", "rank", type=int, required=True, help="The rank of the node to repair.")
@click.option("--reason", type=click.Choice(["gpu", "chip", "performance", "sdc"]), default="gpu", show_default=True,
              help="What is wrong (reported to Compute for reservation-bound nodes).")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@click.pass_obj
def repair(settings: Settings, name: str, rank: int, reason: str, yes: bool) -> None:
    """Move one node off a bad host, keeping its name and rank.

    Reservation-bound nodes: instances.reportHostAsFaulty (Compute moves the VM). Others: the node
    is deleted and re-created from the cluster's spec. A job running on it is interrupted.
    """
    from gcpgpu.cli.progress import ConsoleReporter
    from gcpgpu.cluster.apply import Cluster
    from gcpgpu.cluster.names import check_cluster_name
    from gcpgpu.cluster.repair import repair as do_repair

    check_cluster_name(name)
    if rank < 0:
        raise UsageProblem(f"--node {rank} must be a rank of 0 or more")
    question = f"Repair node of rank {rank} of cluster {name} (a job running on it is interrupted)?"
    if not yes and not sys.stdin.isatty():
        raise UsageProblem(f"{question.rstrip('?')}: pass --yes to confirm when not running interactively")
    if not yes and not click.confirm(question, default=False, err=True):
        raise click.Abort()
    node = do_repair(Cluster(settings.clients, settings.project, ConsoleReporter()), name, rank, reason, info)
    info(f"{node.name}: rank {node.rank}, {node.status}, host {node.host or '-'}")
