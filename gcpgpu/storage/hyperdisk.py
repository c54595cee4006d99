"""A Hyperdisk ML volume filled from a bucket prefix (cluster up --hyperdisk-ml gs://BUCKET/PREFIX).

Google's way to give many VMs the same data read-only: a hyperdisk-ml disk is made READ_WRITE_SINGLE in
the nodes' zone, sized from the prefix's bytes; a small CPU loader VM (no external IP, the cluster's
network and the nodes' service account) attaches it read-write, makes an ext4 file system, copies the
prefix onto it with `gcloud storage rsync`, says so in guest attribute gcpgpu-loader/done, and is deleted;
then the disk goes READ_ONLY_MANY and is attached read-only to every node, which mounts it by device name
(templates/startup.sh.j2). The disk and the loader carry the cluster's labels (the loader's cluster label
under its own key, so it is never taken for a node); `down` and a failed attempt's roll-back find and
delete both, detaching the disk from any VM still holding it first.

Read in Google's docs, NOT verified against the service: the 4 GiB-64 TiB size range, that the access
mode changes only while the disk is attached to no VM, that the Debian images carry the gcloud CLI, that C3
(the loader's series) takes Hyperdisk ML and is offered in the nodes' zone.
"""

from __future__ import annotations

import json
import math
import shlex
import time
from collections.abc import Callable
from typing import Any

from gcpgpu.errors import CloudError
from gcpgpu.gcp.clients import Clients

from . import disks, entries

KIND = "hyperdisk-ml"
DEVICE = "gcpgpu-hdml"  # the device name every VM attaches it as: /dev/disk/by-id/google-gcpgpu-hdml
SIZE_GIB = (4, 65536)
HEADROOM = 1.2  # the file system's own blocks and room for inodes on top of the data
LOADER_KEY = "gcpgpu-loader"  # metadata naming the copy; guest attribute gcpgpu-loader/done when it ended
LOADER_LABEL = "gcpgpu-loader"  # the loader's cluster label (gcpgpu-cluster would make it a node)
LOADER_MACHINE = "c3-standard-4"  # E2 takes no Hyperdisk; C3 takes Hyperdisk ML and a pd-balanced boot disk
LOADER_IMAGE = "projects/debian-cloud/global/images/family/debian-12"
FILL_TIMEOUT = 6 * 3600.0
POLL_SECONDS = 1.0
Say = Callable[[str], None]


def disk_name(cluster: str) -> str:
    return f"{cluster}-hdml"


def loader_name(cluster: str) -> str:
    return f"{cluster}-hdml-loader"


def size_gib(total_bytes: int, source: str) -> int:
    """The disk's size for `total_bytes` of data: with headroom, at least Google's 4 GiB."""
    gib = max(SIZE_GIB[0], math.ceil(total_bytes * HEADROOM / 2**30))
    if gib > SIZE_GIB[1]:
        raise CloudError(f"--hyperdisk-ml {source}: {total_bytes / 2**40:,.1f} TiB does not fit a Hyperdisk ML "
                         f"volume (at most {SIZE_GIB[1] // 1024} TiB with {HEADROOM:.0%} headroom)")
    return gib


def prefix_bytes(clients: Clients, source: str) -> int:
    """The total size of the objects under gs://BUCKET/PREFIX (the prefix read as a folder)."""
    bucket, _, prefix = source[len("gs://"):].partition("/")
    prefix = prefix.rstrip("/") + "/" if prefix.strip("/") else ""
    return sum(int(b.size or 0) for b in clients.storage().list_blobs(bucket, prefix=prefix))


def loader_script(source: str) -> str:
    """The loader VM's startup script: format the disk, copy the prefix onto it, report how it ended.

    The prefix is the user's: it is set once, shell-quoted, as SRC, and only ever used as "$SRC" (never
    written into a comment or a double-quoted string, where a quote or $(...) in it would be read as code)."""
    src = shlex.quote(source.rstrip("/") + "/")
    return f"""#!/bin/bash
# gcpgpu hyperdisk-ml loader: fills the disk from the bucket prefix SRC once, then waits to be deleted.
set -uo pipefail
SRC={src}
GA=http://metadata.google.internal/computeMetadata/v1/instance/guest-attributes/{LOADER_KEY}/done
report() {{ curl -fsS -X PUT -H "Metadata-Flavor: Google" --data "$1" "$GA"; }}
dev=/dev/disk/by-id/google-{DEVICE}
for _ in $(seq 1 120); do [ -e "$dev" ] && break; sleep 1; done
mkfs.ext4 -F -q -m 0 "$dev" || {{ report "error: mkfs.ext4 $dev failed"; exit 1; }}
mkdir -p /mnt/hdml && mount "$dev" /mnt/hdml || {{ report "error: mounting $dev failed"; exit 1; }}
if gcloud storage rsync --recursive "$SRC" /mnt/hdml; then
  sync && umount /mnt/hdml && report ok
else
  report "error: gcloud storage rsync from $SRC failed (see the loader's serial console)"
fi
"""


def _disks(clients: Clients) -> Any:
    return disks.client(clients)


def ensure(clients: Clients, project: str, cluster: str, source: str, path: str, zone: str,
           nic: dict, service_accounts: list, labels: dict[str, str], say: Say,
           fence: Callable[[], None] = lambda: None) -> dict[str, Any]:
    """Make (or find) the cluster's filled READ_ONLY_MANY disk in `zone`; its gcpgpu-storage entry."""
    from gcpgpu.gcp.compute import compute_types

    compute = compute_types()

    name = disk_name(cluster)
    full = f"projects/{project}/zones/{zone}/disks/{name}"
    disk = disks.get(clients, project, zone, name)
    if disk is not None and disk.access_mode == "READ_ONLY_MANY":
        return entries.entry(KIND, full, path, device=DEVICE, ro=True)
    if disk is None:
        total = prefix_bytes(clients, source)
        if not total:
            raise CloudError(f"--hyperdisk-ml {source}: no objects under that prefix; nothing to copy")
        gib = size_gib(total, source)
        say(f"Creating {KIND} disk {name} ({gib:,} GiB for {total / 2**30:,.2f} GiB of {source}) in {zone}")
        fence()
        _disks(clients).insert(project=project, zone=zone, disk_resource=compute.Disk(
            name=name, size_gb=gib, type_=f"projects/{project}/zones/{zone}/diskTypes/{KIND}", access_mode="READ_WRITE_SINGLE",
            labels=labels, description=f"gcpgpu cluster {cluster}: {source}")).result()
    _fill(clients, project, cluster, source, zone, nic, service_accounts, labels, say, fence)
    say(f"Switching disk {name} to READ_ONLY_MANY")
    fence()
    _disks(clients).update(request={"project": project, "zone": zone, "disk": name, "update_mask": "accessMode",
                                    "disk_resource": compute.Disk(name=name, access_mode="READ_ONLY_MANY")}).result()
    return entries.entry(KIND, full, path, device=DEVICE, ro=True)


def _loader_labels(labels: dict[str, str]) -> dict[str, str]:
    return {(LOADER_LABEL if k == "gcpgpu-cluster" else k): v for k, v in labels.items()}


def _fill(clients: Clients, project: str, cluster: str, source: str, zone: str, nic: dict,
          service_accounts: list, labels: dict[str, str], say: Say, fence: Callable[[], None]) -> None:
    from gcpgpu.gcp.compute import compute_types

    compute = compute_types()

    vm = loader_name(cluster)
    instances = clients.compute("InstancesClient")
    body = {
        "name": vm, "machineType": f"projects/{project}/zones/{zone}/machineTypes/{LOADER_MACHINE}",
        "labels": _loader_labels(labels),
        "disks": [{"boot": True, "autoDelete": True, "type": "PERSISTENT",
                   "initializeParams": {"sourceImage": LOADER_IMAGE, "diskSizeGb": "20"}},
                  {"source": f"projects/{project}/zones/{zone}/disks/{disk_name(cluster)}", "mode": "READ_WRITE",
                   "deviceName": DEVICE, "autoDelete": False}],
        # The cluster's network, no access config: no external IP (the cluster's NAT or Private Google Access).
        "networkInterfaces": [{k: v for k, v in nic.items() if k in ("network", "subnetwork")}],
        "serviceAccounts": service_accounts,
        "metadata": {"items": [
            {"key": "startup-script", "value": loader_script(source)},
            {"key": LOADER_KEY, "value": json.dumps({"source": source, "device": DEVICE})},
            {"key": "enable-guest-attributes", "value": "TRUE"}]},
    }
    say(f"Copying {source} onto the disk with loader VM {vm} ({LOADER_MACHINE})")
    fence()
    try:
        instances.insert(project=project, zone=zone,
                         instance_resource=compute.Instance.from_json(json.dumps(body))).result()
    except Exception as e:
        if "already exists" not in str(e):
            raise
    done = _wait_done(instances, project, zone, vm)
    say(f"Deleting loader VM {vm}")
    fence()
    instances.delete(project=project, zone=zone, instance=vm).result()
    if done != "ok":
        raise CloudError(f"--hyperdisk-ml {source}: the loader VM reported {done}")


def _wait_done(instances: Any, project: str, zone: str, vm: str) -> str:
    from google.api_core import exceptions

    deadline = time.monotonic() + FILL_TIMEOUT
    while time.monotonic() < deadline:
        try:
            got = instances.get_guest_attributes(request={"project": project, "zone": zone, "instance": vm,
                                                          "variable_key": f"{LOADER_KEY}/done"})
            return str(got.variable_value)
        except (exceptions.NotFound, exceptions.BadRequest):
            time.sleep(POLL_SECONDS)
    raise CloudError(f"loader VM {vm} did not finish copying within {FILL_TIMEOUT / 3600:.0f} h; "
                     "'gcpgpu cluster down' removes it and the disk")


def attach(clients: Clients, entry: dict[str, Any], project: str, zone: str, node: str) -> Any | None:
    """Attach the entry's disk read-only to `node` unless it has it; the operation, or None."""
    return disks.attach(clients, project, zone, node, entry["name"], DEVICE, "READ_ONLY")


def owned(clients: Clients, project: str, labels: dict[str, str]) -> list[tuple[str, str]]:
    """(KIND, projects/P/zones/Z/disks/N) of every Hyperdisk ML disk carrying all of `labels` (a cluster's other
    disks, such as a Slurm cluster's state disk, are not file systems)."""
    return [(KIND, name) for name in disks.owned(clients, project, labels,
                                                  lambda d: str(d.type_).endswith(f"/diskTypes/{KIND}"))]


def delete(clients: Clients, project: str, found: list[str], labels: dict[str, str], say: Say,
           fence: Callable[[], None] = lambda: None) -> list[str]:
    """Delete the loader VMs left (by `labels`), detach each disk in `found` from any VM, delete it."""
    instances = clients.compute("InstancesClient")
    loaders = _loader_labels(labels)
    lines: list[str] = []
    vms = disks.vms(clients, project)

    def is_loader(inst: Any) -> bool:
        return all(inst.labels.get(k) == v for k, v in loaders.items())

    for zone, inst in vms:
        if is_loader(inst):
            say(f"Deleting loader VM {inst.name}")
            fence()
            disks.quiet(lines, f"loader VM {inst.name}", instances.delete, project=project, zone=zone,
                        instance=inst.name)
    return lines + disks.delete(clients, project, found, KIND, say, fence, users=vms, skip=is_loader)
