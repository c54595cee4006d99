"""Create, find, attach and delete a cluster's shared file systems through Google's clients.

Ownership is GCP's own record, as for every other resource of a cluster: what `up` creates carries
the cluster's labels (gcpgpu-cluster, gcpgpu-managed, gcpgpu-attempt), so `down` (and a failed
attempt's roll-back) finds and deletes exactly that. An instance attached with --mount is only read:
it never gets gcpgpu's labels, so nothing here can delete it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from gcpgpu.errors import CloudError, one_line
from gcpgpu.gcp.clients import Clients
from gcpgpu.gcp.errors import is_not_found, is_service_off

from . import entries, hyperdisk, tiers
from .spec import Want

READY_TIMEOUT = 3600.0  # Managed Lustre takes tens of minutes to create (unverified: Google gives no figure)
POLL_SECONDS = 1.0
SHARE = "shared"  # the Filestore file share: a letter, then letters, digits and _, at most 16 (BASIC's limit)
FSNAME = "gcpgpu"  # the Lustre file system name `lfs` shows: at most 8 letters and digits
Say = Callable[[str], None]


def instance_id(cluster: str, kind: str) -> str:
    """The instance a cluster creates for `kind` (cluster names leave room: at most 40 characters)."""
    return f"{cluster}-{'fs' if kind == 'filestore' else 'lustre'}"


def _client(clients: Clients, kind: str) -> Any:
    return clients.filestore() if kind == "filestore" else clients.lustre()


def location_of(want: Want, zone: str) -> str:
    """A new instance follows the nodes' zone; a REGIONAL Filestore lives in their region."""
    return zone.rsplit("-", 1)[0] if want.kind == "filestore" and want.tier == "REGIONAL" else zone


def _get(client: Any, name: str) -> Any | None:
    try:
        return client.get_instance(name=name)
    except Exception as e:
        if is_not_found(e):
            return None
        raise


def _body(want: Want, project: str, network: str, labels: dict[str, str]) -> Any:
    if want.kind == "filestore":
        from google.cloud import filestore_v1

        return filestore_v1.Instance(
            tier=want.tier, labels=labels, description="gcpgpu cluster shared file system",
            file_shares=[filestore_v1.FileShareConfig(name=SHARE, capacity_gb=want.size_gib)],
            networks=[filestore_v1.NetworkConfig(network=network, modes=["MODE_IPV4"])])
    from google.cloud import lustre_v1

    return lustre_v1.Instance(
        capacity_gib=want.size_gib, filesystem=FSNAME, labels=labels,
        network=f"projects/{project}/global/networks/{network}",
        per_unit_storage_throughput=int(tiers.LUSTRE[str(want.tier)].api_value or 0),
        description="gcpgpu cluster shared file system")


def resolve(want: Want, project: str, zone: str) -> str:
    """An attached instance's full name: as given, or NAME in `zone` (a zone or a region)."""
    name = str(want.existing)
    return name if name.startswith("projects/") else f"projects/{project}/locations/{zone}/instances/{name}"


def find_attached(clients: Clients, project: str, want: Want, zones: list[str]) -> str:
    """An attached file system's full name (--mount filestore:NAME:/path, NAME or projects/.../NAME): found in
    one of `zones` or its region (a REGIONAL Filestore lives in the region); one line when it is nowhere."""
    client = _client(clients, want.kind)
    if str(want.existing).startswith("projects/"):
        places = [""]
    else:
        places = list(dict.fromkeys(p for z in zones for p in (z, z.rsplit("-", 1)[0])))
    for place in places:
        name = resolve(want, project, place)
        if _get(client, name) is not None:
            return name
    where = want.existing if not places[0] else f"{want.existing} in {' or '.join(places)}"
    raise CloudError(f"--mount {want.kind}:{want.existing}:{want.path}: no {want.kind} instance {where}; create it "
                     f"first or give projects/PROJECT/locations/LOCATION/instances/NAME")


def ensure(clients: Clients, project: str, cluster: str, wants: list[Want], zone: str, network: str,
           labels: dict[str, str], say: Say, fence: Callable[[], None] = lambda: None,
           vm: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Create each new file system the cluster lacks (in `zone`, on `network`), check each attached one,
    wait until all are READY; their `gcpgpu-storage` entries. `vm`: the nodes' networkInterfaces[0] ("nic")
    and serviceAccounts ("service_accounts"), which a Hyperdisk ML volume's loader VM takes."""
    names: list[tuple[Want, str]] = []
    pending = []
    for w in wants:
        if w.kind == hyperdisk.KIND:
            continue  # filled below, while the instances above are made
        client = _client(clients, w.kind)
        if not w.created:
            names.append((w, find_attached(clients, project, w, [zone])))
            continue
        loc = location_of(w, zone)
        iid = instance_id(cluster, w.kind)
        name = f"projects/{project}/locations/{loc}/instances/{iid}"
        names.append((w, name))
        if _get(client, name) is not None:
            continue
        if w.kind == "lustre":
            from .access import ensure_private_access

            ensure_private_access(clients, project, network, cluster, labels, say, fence)
        say(f"Creating {w.kind} instance {iid} ({w.size_gib:,} GiB, {w.tier}) in {loc} on network {network}")
        fence()
        op = _create(client, {"parent": f"projects/{project}/locations/{loc}", "instance_id": iid,
                              "instance": _body(w, project, network, labels)})
        if op is not None:
            pending.append(op)
    disks = {id(w): hyperdisk.ensure(clients, project, cluster, str(w.source), w.path, zone, (vm or {}).get("nic", {}),
                                     (vm or {}).get("service_accounts", []), labels, say, fence)
             for w in wants if w.kind == hyperdisk.KIND}
    for op in pending:
        op.result(timeout=READY_TIMEOUT)
    made = {id(w): _entry(w, _ready(_client(clients, w.kind), name, w), name) for w, name in names}
    return [disks.get(id(w)) or made[id(w)] for w in wants]


def _create(client: Any, request: dict[str, Any]) -> Any | None:
    """create_instance, transient failures retried; None when a retry found it made by the try before."""
    from google.api_core.exceptions import AlreadyExists

    from gcpgpu.gcp.operations import retrying

    try:
        return client.create_instance(request=request, retry=retrying())
    except AlreadyExists:  # a try answered 503 after the service had taken it: it is being made
        return None


def _ready(client: Any, name: str, want: Want) -> Any:
    deadline = time.monotonic() + READY_TIMEOUT
    while True:
        inst = client.get_instance(name=name)
        state = getattr(inst.state, "name", str(inst.state))
        if state in ("READY", "ACTIVE"):  # Filestore says READY, Managed Lustre ACTIVE
            return inst
        if state not in ("CREATING", "REPAIRING", "RESTORING", "UPDATING", "UPGRADING", "STATE_UNSPECIFIED"):
            raise CloudError(f"{want.kind} instance {name} is {state}, not READY; see the console, or "
                             "'gcpgpu cluster down' to remove what gcpgpu made")
        if time.monotonic() > deadline:
            raise CloudError(f"{want.kind} instance {name} not READY after {READY_TIMEOUT:.0f} s (still {state})")
        time.sleep(POLL_SECONDS)


def _entry(want: Want, inst: Any, name: str) -> dict[str, Any]:
    if want.kind == "filestore":
        ips = [ip for net in inst.networks for ip in net.ip_addresses]
        share = inst.file_shares[0].name if inst.file_shares else SHARE
        if not ips:
            raise CloudError(f"filestore instance {name} is READY but reports no IP address to mount")
        return entries.entry("filestore", name, want.path, export=f"{ips[0]}:/{share}")
    if not inst.mount_point:
        raise CloudError(f"lustre instance {name} is READY but reports no mount point")
    return entries.entry("lustre", name, want.path, export=inst.mount_point)


def owned(clients: Clients, project: str, labels: dict[str, str],
          kinds: tuple[str, ...] = ("filestore", "lustre", hyperdisk.KIND)) -> list[tuple[str, str]]:
    """(kind, full name) of every instance (or Hyperdisk ML disk) carrying all of `labels`, across locations."""
    out = []
    for kind in kinds:
        if kind == hyperdisk.KIND:
            out += hyperdisk.owned(clients, project, labels)
            continue
        try:
            pager = _client(clients, kind).list_instances(request={"parent": f"projects/{project}/locations/-"})
            out += [(kind, i.name) for i in pager if all(i.labels.get(k) == v for k, v in labels.items())]
        except Exception as e:
            if not is_service_off(e):
                raise
    return out



def delete(clients: Clients, project: str, found: list[tuple[str, str]], say: Say,
           fence: Callable[[], None] = lambda: None, labels: dict[str, str] | None = None) -> list[str]:
    """Delete these instances (gone counts as deleted) and wait; one line per one left. Hyperdisk ML disks go
    with the loader VMs carrying `labels` (hyperdisk.delete)."""
    from gcpgpu.gcp.operations import retrying

    ops, lines = [], []
    disks = [name for kind, name in found if kind == hyperdisk.KIND]
    if disks:
        lines += hyperdisk.delete(clients, project, disks, labels or {}, say, fence)
    for kind, name in found:
        if kind == hyperdisk.KIND:
            continue
        say(f"Deleting {kind} instance {name.rsplit('/', 1)[-1]}")
        fence()
        try:  # transient failures retried, as every Compute mutation is (gcp/operations.py)
            ops.append((kind, name, _client(clients, kind).delete_instance(name=name, retry=retrying())))
        except Exception as e:
            if not is_not_found(e):
                lines.append(f"{kind} instance {name}: {one_line(e)}")
    for kind, name, op in ops:
        try:
            op.result(timeout=READY_TIMEOUT)
        except Exception as e:
            if not is_not_found(e):
                lines.append(f"{kind} instance {name}: {one_line(e)}")
    return lines


def nfs_share(clients: Clients, project: str, want: Want, region: str) -> tuple[str, str, str]:
    """(server IP, /SHARE, network name) of an existing READY Filestore instance a Vertex job mounts: NAME is
    looked up in the job's region (any of its zones, or the region itself)."""
    client = clients.filestore()
    name = str(want.existing)
    if name.startswith("projects/"):
        inst = _get(client, name)
    else:
        pager = client.list_instances(request={"parent": f"projects/{project}/locations/-"})
        inst = next((i for i in pager if i.name.rsplit("/", 1)[-1] == name
                     and i.name.split("/")[3].startswith(region)), None)
    if inst is None:
        raise CloudError(f"--mount filestore:{name}:{want.path}: no Filestore instance {name} in {region} of "
                         f"project {project}")
    entry = _entry(want, _ready(client, inst.name, want), inst.name)
    server, _, share = str(entry["export"]).partition(":")
    return server, share, inst.networks[0].network.rsplit("/", 1)[-1]
