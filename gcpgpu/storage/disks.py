"""Standalone zonal disks a cluster owns: find one, make it, attach it to a VM, and detach and delete it.

Two kinds of disk use these verbs: Hyperdisk ML's data volume (hyperdisk.py), read-only on every node, and
a Slurm cluster's controller state disk (gcpgpu/cluster/slurm_state.py), read-write on node 0. Ownership
is GCP's own record, as for every resource of a cluster: the disk carries the cluster's labels, and a
disk's users are the VMs that name it (Compute stores none on the disk).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gcpgpu.errors import one_line
from gcpgpu.gcp.clients import Clients
from gcpgpu.gcp.errors import is_not_found

Say = Callable[[str], None]


def client(clients: Clients) -> Any:
    return clients.compute("DisksClient")


def full_name(project: str, zone: str, name: str) -> str:
    return f"projects/{project}/zones/{zone}/disks/{name}"


def get(clients: Clients, project: str, zone: str, name: str) -> Any | None:
    """The disk, or None when there is none of that name in `zone`."""
    try:
        return client(clients).get(project=project, zone=zone, disk=name)
    except Exception as e:
        if is_not_found(e):
            return None
        raise


def attach(clients: Clients, project: str, zone: str, node: str, source: str, device: str, mode: str) -> Any | None:
    """Attach disk `source` (projects/P/zones/Z/disks/N) to VM `node` as `device`, `mode` READ_WRITE or
    READ_ONLY, unless the VM has it already (autoDelete false: the disk outlives the VM); the operation, or None."""
    from gcpgpu.gcp.compute import compute_types

    compute = compute_types()
    instances = clients.compute("InstancesClient")
    inst = instances.get(project=project, zone=zone, instance=node)
    if any(d.source.endswith("/" + source) for d in inst.disks):
        return None
    return instances.attach_disk(project=project, zone=zone, instance=node,
                                 attached_disk_resource=compute.AttachedDisk(
                                     source=source, device_name=device, mode=mode, auto_delete=False))


def owned(clients: Clients, project: str, labels: dict[str, str],
          keep: Callable[[Any], bool] = lambda _disk: True) -> list[str]:
    """projects/P/zones/Z/disks/N of every disk carrying all of `labels` (and passing `keep`), in every zone."""
    out = []
    for scope, listed in client(clients).aggregated_list(project=project):
        for d in listed.disks:
            if all(d.labels.get(k) == v for k, v in labels.items()) and keep(d):
                out.append(f"projects/{project}/{scope}/disks/{d.name}")
    return out


def vms(clients: Clients, project: str) -> list[tuple[str, Any]]:
    """(zone, instance) of every VM of the project: whose disks `delete` detaches first."""
    instances = clients.compute("InstancesClient")
    return [(scope.rsplit("/", 1)[-1], i) for scope, listed in instances.aggregated_list(project=project)
            for i in listed.instances]


def delete(clients: Clients, project: str, names: list[str], what: str, say: Say,
           fence: Callable[[], None] = lambda: None, users: list[tuple[str, Any]] | None = None,
           skip: Callable[[Any], bool] = lambda _vm: False) -> list[str]:
    """Detach each disk of `names` from every VM of `users` (default: all the project's) that has it, except
    those `skip` says go anyway, then delete it; gone counts as done. One line per failure."""
    instances = clients.compute("InstancesClient")
    users = vms(clients, project) if users is None else users
    lines: list[str] = []
    for name in names:
        _, _, _, zone, _, disk = name.split("/")
        for vz, inst in users:
            for d in inst.disks:
                if d.source.endswith("/" + name) and not skip(inst):
                    fence()
                    quiet(lines, f"{what} disk {name} on {inst.name}", instances.detach_disk, project=project,
                          zone=vz, instance=inst.name, device_name=d.device_name)
        say(f"Deleting {what} disk {disk}")
        fence()
        quiet(lines, f"{what} disk {name}", client(clients).delete, project=project, zone=zone, disk=disk)
    return lines


def quiet(lines: list[str], what: str, method: Callable[..., Any], **request: Any) -> None:
    """method(request) with a requestId, transient failures retried (operations.call), and wait; gone counts
    as done; any other failure is one line in `lines`."""
    from gcpgpu.gcp.operations import call

    try:
        call(method, request).result()
    except Exception as e:
        if not is_not_found(e):
            lines.append(f"{what}: {one_line(e)}")
