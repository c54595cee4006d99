"""A Slurm cluster's configuration from a gcpgpu cluster: slurm.conf, topology.conf and gres.conf.

Every node renders the same files from what the cluster already says about itself: node names and the
cluster's size (`up` writes them in each node's metadata), the machine type's vCPUs, memory and GPUs
from the catalog (gcpgpu/data/machines.yaml), and Compute's physicalHostTopology for the switches.
Node 0 runs slurmctld (gcpgpu/slurm/__init__.py says why). Pure functions: no API call, no file.
"""

from __future__ import annotations

from dataclasses import dataclass

from gcpgpu import catalog
from gcpgpu.cluster.names import node_name
from gcpgpu.resources import render

CONTROLLER_PORT = 6817  # Slurm's own defaults, used on real nodes (each its own host)
SLURMD_PORT = 6818
# Slurm reserves memory for the OS and daemons; the catalog's figure is what the VM has.
OS_MEMORY_MB = 4096


@dataclass(frozen=True)
class SlurmNode:
    name: str
    cpus: int
    memory_mb: int
    gpus: int
    port: int | None = None  # a slurmd port of its own (the emulator's nodes share one host); None: SlurmdPort
    block: str | None = None
    subblock: str | None = None


@dataclass(frozen=True)
class Layout:
    """What slurm.conf says: the cluster, its controller and nodes, and where the daemons keep their files."""

    cluster: str
    controller: str
    nodes: list[SlurmNode]
    state_dir: str
    spool_dir: str
    run_dir: str
    log_dir: str
    controller_port: int = CONTROLLER_PORT
    munge_socket: str | None = None  # munged's socket when it is not the system's
    node_host: str | None = None  # every node's address (the emulator: 127.0.0.1); None: the node's name
    emulated: bool = False
    gpu_dir: str = "/dev"  # where nvidia0..N-1 are (the emulator: links to /dev/null, one per GPU)
    slurmd_timeout: int = 60  # seconds before a silent node is DOWN (and its jobs requeued)
    # The only group whose users may run jobs in the partitions (AllowGroups; root always may): gcpgpu's queue
    # agent's, root's on a real node. A user on a node, or a job's process, is refused every partition.
    submitters: str = "root"


def slurm_nodes(cluster: str, machine_type: str, count: int, topology: dict[str, tuple[str | None, str | None]]
                | None = None, port_base: int | None = None) -> list[SlurmNode]:
    """The cluster's `count` nodes as Slurm sees them. `topology`: node name -> (block, sub-block) where Compute
    reports it; `port_base`: node r's slurmd listens on port_base + 1 + r (the emulator), else Slurm's port."""
    mt = catalog.get_machine_type(machine_type)
    memory = max(1024, mt.memory_mb - OS_MEMORY_MB)
    out = []
    for rank in range(count):
        name = node_name(cluster, rank)
        block, subblock = (topology or {}).get(name, (None, None))
        out.append(SlurmNode(name, mt.vcpus, memory, mt.gpu_count,
                             port_base + 1 + rank if port_base is not None else None, block, subblock))
    return out


def slurm_conf(layout: Layout) -> str:
    return render("slurm.conf.j2", c=layout)


def gres_conf(layout: Layout) -> str:
    return render("slurm_gres.conf.j2", c=layout)


def switches(nodes: list[SlurmNode]) -> list[dict]:
    """topology.conf's switches: one per sub-block (its nodes), one per block (its sub-blocks), one root over
    the blocks; nodes Compute places nowhere hang under one switch of their own, so every node is reachable."""
    subs: dict[tuple[str, str], list[str]] = {}
    loose: list[str] = []
    for n in nodes:
        if n.block:
            subs.setdefault((n.block, n.subblock or "0"), []).append(n.name)
        else:
            loose.append(n.name)
    out: list[dict] = []
    blocks: dict[str, list[str]] = {}
    for i, ((block, _sub), names) in enumerate(sorted(subs.items())):
        name = f"subblock{i}"
        out.append({"name": name, "nodes": names, "switches": []})
        blocks.setdefault(block, []).append(name)
    tops = []
    for i, (_block, subnames) in enumerate(sorted(blocks.items())):
        out.append({"name": f"block{i}", "nodes": [], "switches": subnames})
        tops.append(f"block{i}")
    if loose:
        out.append({"name": "unplaced", "nodes": loose, "switches": []})
        tops.append("unplaced")
    if len(tops) > 1:
        out.append({"name": "root", "nodes": [], "switches": tops})
    return out


def topology_conf(layout: Layout) -> str:
    return render("slurm_topology.conf.j2", c=layout, switches=switches(layout.nodes))


def write_all(layout: Layout) -> dict[str, str]:
    """File name -> text of every file a node needs beside slurm.conf."""
    return {"slurm.conf": slurm_conf(layout), "topology.conf": topology_conf(layout), "gres.conf": gres_conf(layout)}
