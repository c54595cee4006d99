"""A Slurm cluster's own pieces in `up`, `down` and a roll-back: what its nodes carry, and its state disk.

slurmctld (on node 0: gcpgpu/slurm/__init__.py says why) keeps the queue in its StateSaveLocation: every
job with its priority, requeue count and Slurm id, the nodes' states, the next job id. On node 0's boot
disk that would go with node 0. So `up` makes a small persistent disk CLUSTER-slurm-state (10 GB, the
boot disk's type, which the machine family is sure to take), labelled as everything the cluster owns, in
the nodes' zone, and attaches it to node 0 (read-write, autoDelete false, device gcpgpu-slurm-state)
whenever node 0 lacks it: on a new cluster, and whenever node 0 comes back under its name, since every
path that re-creates a node (a re-run `up`, `cluster repair`, a job's recovery, node 0's keeper for the
others) goes through apply.up. Node 0's startup script waits for the device, formats it only when it is
blank and mounts it at the controller's state folder before the Slurm daemons start
(templates/startup.sh.j2); on the emulator node 0's slurmctld keeps its state in the disk's folder.
`down` deletes the disk after the nodes; a failed `up` takes it back with the rest of what it made.

Attached after the nodes are made, not in their body: bulkInsert gives every node the same disks, and a
read-write disk takes one VM. The disk follows the nodes' zone; a cluster whose nodes were all lost comes
back in the disk's zone (pin_zones), as it does for its file systems.
"""

from __future__ import annotations

from typing import Any

from gcpgpu.errors import CloudError
from gcpgpu.storage import disks

from . import munge
from .names import (
    LABEL_ATTEMPT,
    LABEL_CLUSTER,
    LABEL_MANAGED,
    SCHEDULER_KEY,
    marker,
    node_name,
    slurm_state_disk,
)
from .session import Session
from .spec import ClusterSpec

MUNGE_KEY = "gcpgpu-slurm-munge"  # metadata: the Secret Manager secret of the munge key (its name only)
STATE_KEY = "gcpgpu-slurm-state"  # metadata: the state disk's name (node 0 waits for it before slurmctld)
IMAGE_KEY = "gcpgpu-slurm-image"  # metadata: the image the nodes run gcpgpu.slurm.node from
DEVICE = "gcpgpu-slurm-state"  # node 0 sees it at /dev/disk/by-id/google-gcpgpu-slurm-state
SIZE_GB = 10  # StateSaveLocation holds kilobytes per job; 10 GB is the smallest Persistent Disk
WHAT = "Slurm state"


disk_name = slurm_state_disk


def metadata_items(spec: ClusterSpec, project: str) -> list[dict[str, str]]:
    """What every node of a Slurm cluster carries ([] for any other): the scheduler, the munge key's secret
    (never the key), the state disk's name and the image its Slurm daemons run from."""
    if not spec.scheduler:
        return []
    return [{"key": SCHEDULER_KEY, "value": spec.scheduler},
            {"key": MUNGE_KEY, "value": munge.secret_name(project, spec.name)},
            {"key": STATE_KEY, "value": disk_name(spec.name)},
            *([{"key": IMAGE_KEY, "value": spec.agent_image}] if spec.agent_image else [])]


def disk_body(spec: ClusterSpec, project: str, zone: str) -> dict[str, Any]:
    """disks.insert for the state disk in `zone` (labels and attempt added by `up`)."""
    return {"name": disk_name(spec.name), "sizeGb": str(SIZE_GB),
            "type": f"projects/{project}/zones/{zone}/diskTypes/{spec.boot_disk_type}",
            "description": f"{marker(spec.name)} Slurm controller state (StateSaveLocation) of node 0"}


def plan_rows(spec: ClusterSpec) -> list[dict[str, Any]]:
    """The state disk as `cluster plan` and `up --dry-run` show it."""
    if not spec.scheduler:
        return []
    return [{"kind": "disk", "name": disk_name(spec.name), "where": "the nodes' zone",
             "details": f"{SIZE_GB} GB {spec.boot_disk_type}, Slurm's queue (slurmctld StateSaveLocation): attached "
                        f"read-write to {node_name(spec.name, 0)} and to any node 0 re-created, kept until 'down'"}]


def pin_zones(s: Session, spec: ClusterSpec, zones: list[str]) -> list[str]:
    """Where new nodes may go when the cluster already has its state disk: its zone, so node 0 meets the queue."""
    if not spec.scheduler:
        return zones
    held = sorted({name.split("/")[3] for name in _owned(s, spec.name)})
    if not held:
        return zones
    if held[0] not in zones:
        raise CloudError(f"cluster {spec.name}'s Slurm state disk is in {held[0]}, outside the zones asked for "
                         f"({', '.join(zones)}); pass --zone {held[0]} or take it down first")
    return [held[0]]


def ensure(s: Session, spec: ClusterSpec, zone: str) -> None:
    """Make the state disk in `zone` unless the cluster has it, and attach it to node 0 unless node 0 has it."""
    if not spec.scheduler:
        return
    name, node = disk_name(spec.name), node_name(spec.name, 0)
    if disks.get(s.clients, s.project, zone, name) is None:
        s.report.step("slurm-state", f"Creating disk {name} ({SIZE_GB} GB {spec.boot_disk_type}) in {zone} "
                                     "for Slurm's queue")
        body = {**disk_body(spec, s.project, zone), "labels": _labels(spec.name, s.attempt)}
        s.wait(s.call(disks.client(s.clients).insert,
                      {"project": s.project, "zone": zone, "disk_resource": s.owned("Disk", body)}))
    source = disks.full_name(s.project, zone, name)
    s.check_lease()
    op = disks.attach(s.clients, s.project, zone, node, source, DEVICE, "READ_WRITE")
    if op is not None:
        s.report.step("slurm-state", f"Attaching disk {name} to {node} (Slurm's controller)")
        s.wait(op)


def delete(s: Session, cluster: str, attempt: str | None = None) -> list[str]:
    """Delete the cluster's state disk (only `attempt`'s, when given), detaching it first from any VM
    still holding it; one line per failure."""
    found = _owned(s, cluster, attempt)
    return disks.delete(s.clients, s.project, found, WHAT, lambda text: s.report.step("slurm-state", text),
                        s.check_lease) if found else []


def _labels(cluster: str, attempt: str | None = None) -> dict[str, str]:
    return {LABEL_CLUSTER: cluster, LABEL_MANAGED: "true", **({LABEL_ATTEMPT: attempt} if attempt else {})}


def _owned(s: Session, cluster: str, attempt: str | None = None) -> list[str]:
    return disks.owned(s.clients, s.project, _labels(cluster, attempt), lambda d: d.name == disk_name(cluster))
