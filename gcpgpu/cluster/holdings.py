"""What a cluster holds besides its nodes and networks, as `status`, `list`, `up`'s found line and `down` name it.

Its file systems (Filestore and Managed Lustre instances it made, found by its labels; those attached with
--mount, found in its nodes' `gcpgpu-storage` metadata), its Hyperdisk ML volume, its scheduler (the nodes'
`gcpgpu-scheduler` metadata) and a Slurm cluster's state disk. Each is billed while it exists, nodes running
or not, so each has a line in COST SO FAR: gcpgpu's data (gcpgpu/data/*.yaml, /work/shared/reference) holds no
price for any of them, so their cost is said to be unknown, never shown as $0.

Also who else uses a file system: another cluster whose nodes' metadata names it (`down` and `up
--no-filestore` refuse to delete a share from under it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gcpgpu.gcp.clients import Clients
from gcpgpu.gcp.errors import is_service_off
from gcpgpu.gcp.operations import retrying
from gcpgpu.storage import entries, hyperdisk
from gcpgpu.storage.spec import DEFAULT_PATH

from .names import LABEL_CLUSTER, LABEL_MANAGED, SCHEDULER_KEY
from .names import slurm_state_disk as disk_name

STATE = "slurm-state"
WORDS = {"filestore": "filestore", "lustre": "lustre", hyperdisk.KIND: "hyperdisk-ml volume",
         STATE: "Slurm state disk"}
# USD per GiB-hour of each kind; None: no price in gcpgpu's data (the machines catalog prices VMs only).
PRICE_PER_GIB_HOUR: dict[str, float | None] = {"filestore": None, "lustre": None, hyperdisk.KIND: None, STATE: None}


@dataclass(frozen=True)
class Held:
    """One file system or disk of a cluster."""

    kind: str  # filestore | lustre | hyperdisk-ml | slurm-state
    name: str  # its full resource name
    size_gib: int | None = None
    tier: str = ""  # Filestore's tier, Lustre's MB/s per TiB, or the disk type
    path: str | None = None  # where the nodes mount it
    attached: bool = False  # attached with --mount: not the cluster's, never deleted, not billed to it
    source: str | None = None  # a Hyperdisk ML volume's gs://BUCKET/PREFIX

    @property
    def detail(self) -> str:
        return f"{self.tier} MB/s per TiB" if self.kind == "lustre" and self.tier else self.tier

    @property
    def short(self) -> str:
        return self.name.rsplit("/", 1)[-1]

    @property
    def location(self) -> str:
        return self.name.split("/")[3] if self.name.count("/") >= 3 else ""

    def words(self) -> str:
        """e.g. 'filestore c-fs (1,024 GiB ZONAL, at /shared)'."""
        bits = [f"{self.size_gib:,} GiB" if self.size_gib else "", self.detail, f"at {self.path}" if self.path else "",
                "attached, not deleted with the cluster" if self.attached else ""]
        inner = ", ".join(b for b in (f"{bits[0]} {bits[1]}".strip(), *bits[2:]) if b)
        return f"{WORDS[self.kind]} {self.short}" + (f" ({inner})" if inner else "")

    def row(self) -> dict[str, Any]:
        return {"kind": self.kind, "name": self.name, "location": self.location, "size_gib": self.size_gib,
                "tier": self.tier, "path": self.path, "attached": self.attached,
                "cost_usd": None, "price": "not billed to this cluster" if self.attached else price_note(self.kind)}


def price_note(kind: str) -> str:
    return "unknown (no price in gcpgpu's data)" if PRICE_PER_GIB_HOUR.get(kind) is None else "catalog"


def _instances(clients: Clients, project: str, kind: str) -> list[Any]:
    client = clients.filestore() if kind == "filestore" else clients.lustre()
    try:
        return list(retrying()(client.list_instances)(request={"parent": f"projects/{project}/locations/-"}))
    except Exception as e:
        if is_service_off(e):  # the API is off: nothing of it can exist
            return []
        raise


def _made(clients: Clients, project: str) -> dict[str, list[Held]]:
    """Every cluster's own file systems and disks, by cluster: three list calls whatever the project's size."""
    out: dict[str, list[Held]] = {}

    def mine(labels: Any) -> str | None:
        return labels.get(LABEL_CLUSTER) if labels.get(LABEL_MANAGED) == "true" else None

    for kind in ("filestore", "lustre"):
        for inst in _instances(clients, project, kind):
            cluster = mine(inst.labels)
            if not cluster:
                continue
            if kind == "filestore":
                size = sum(int(s.capacity_gb) for s in inst.file_shares) or None
                tier = getattr(inst.tier, "name", str(inst.tier))
            else:
                size, tier = int(inst.capacity_gib) or None, str(inst.per_unit_storage_throughput)
            out.setdefault(cluster, []).append(Held(kind, inst.name, size, tier, DEFAULT_PATH[kind]))
    from gcpgpu.storage import disks

    for scope, listed in retrying()(disks.client(clients).aggregated_list)(project=project):
        for d in listed.disks:
            cluster = mine(d.labels)
            if not cluster:
                continue
            kind = hyperdisk.KIND if str(d.type_).endswith(f"/diskTypes/{hyperdisk.KIND}") else \
                STATE if d.name == disk_name(cluster) else None
            if kind:
                source = d.description.partition(": ")[2] or None if kind == hyperdisk.KIND else None
                out.setdefault(cluster, []).append(Held(
                    kind, f"projects/{project}/{scope}/disks/{d.name}", int(d.size_gb) or None,
                    str(d.type_).rsplit("/", 1)[-1], DEFAULT_PATH[hyperdisk.KIND] if kind == hyperdisk.KIND else None,
                    source=source))
    return out


def _attached(nodes: list[Any], made: list[Held]) -> list[Held]:
    """The file systems the nodes mount that the cluster did not make (--mount)."""
    own = {h.name for h in made}
    seen: dict[str, Held] = {}
    for n in nodes:
        for e in entries.loads(n.metadata.get(entries.KEY)):
            if e.get("name") not in own and e.get("kind") in ("filestore", "lustre") and e["name"] not in seen:
                seen[e["name"]] = Held(e["kind"], str(e["name"]), path=e["path"], attached=True)
    return list(seen.values())


def of_cluster(clients: Clients, project: str, cluster: str, nodes: list[Any]) -> list[Held]:
    made = _made(clients, project).get(cluster, [])
    return made + _attached(nodes, made)


def of_project(clients: Clients, project: str, nodes: dict[str, list[Any]]) -> dict[str, list[Held]]:
    """Each cluster's holdings (`nodes`: each cluster's nodes, for what they attach); clusters that hold only
    storage (their nodes gone) are keys too."""
    made = _made(clients, project)
    out = {c: made.get(c, []) + _attached(nodes.get(c, []), made.get(c, [])) for c in {*made, *nodes}}
    return {c: held for c, held in out.items() if held}


def scheduler(nodes: list[Any], held: list[Held]) -> str | None:
    """The cluster's scheduler: its nodes' word, else 'slurm' where only its state disk is left."""
    said = {n.metadata.get(SCHEDULER_KEY) for n in nodes} - {None, ""}
    if said:
        return sorted(said)[0]
    return "slurm" if any(h.kind == STATE for h in held) else None


def summary(held: list[Held]) -> str:
    """'filestore c-fs, lustre c-lustre, Slurm state disk c-slurm-state' ('' for none)."""
    return ", ".join(f"{WORDS[h.kind]} {h.short}" + (" (attached)" if h.attached else "") for h in held)


def cost_words(held: list[Held]) -> str:
    """What COST SO FAR adds for them: '' when the cluster holds nothing billed; else says the price is unknown."""
    billed = [h for h in held if not h.attached]
    if not billed:
        return ""
    return f" + {', '.join(f'{WORDS[h.kind]} {h.short}' for h in billed)}: price unknown (no price in gcpgpu's data)"


def users(nodes: list[Any], cluster: str, names: list[str]) -> dict[str, list[str]]:
    """{full name: ["cluster d (at /data)", ...]} for each of `names` another cluster's nodes (of `nodes`, the
    project's: observe.project_nodes) mount."""
    if not names:
        return {}
    out: dict[str, set[str]] = {}
    for n in nodes:
        if n.cluster == cluster:
            continue
        for e in entries.loads(n.metadata.get(entries.KEY)):
            if e.get("name") in names:
                out.setdefault(str(e["name"]), set()).add(f"cluster {n.cluster or n.name} (at {e['path']})")
    return {k: sorted(v) for k, v in out.items()}
