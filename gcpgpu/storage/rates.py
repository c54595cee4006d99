"""`cluster doctor --active` on shared file systems: each node's measured rates against the tier's promise.

A node's diagnostics (templates/node_diag.sh.j2) write and read a test file on every mount at once and
report guest attribute `storage` as "PATH=w:MIB_S,r:MIB_S;..." ("-" where not measured: a read-only
mount is not written). The tier promises a rate for the whole instance (tiers.py, per TiB
provisioned); every node measures at the same time, so each node's fair share is that over the nodes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gcpgpu.gcp.clients import Clients

from . import tiers

SLOW_FRACTION = 0.5  # below half its share, a node's rate is named slow


@dataclass(frozen=True)
class Promise:
    read_mib_s: float
    write_mib_s: float
    what: str  # "filestore ZONAL 1,024 GiB"


def parse(value: str | None) -> dict[str, dict[str, float | None]]:
    """'/shared=w:412.3,r:1020.5;/data=r:88' -> {"/shared": {"w": 412.3, "r": 1020.5}, "/data": {"r": 88.0}}."""
    out: dict[str, dict[str, float | None]] = {}
    for part in filter(None, (value or "").split(";")):
        path, _, rates = part.partition("=")
        got: dict[str, float | None] = {}
        for pair in filter(None, rates.split(",")):
            key, _, number = pair.partition(":")
            try:
                got[key.strip()] = float(number)
            except ValueError:
                got[key.strip()] = None
        out[path.strip()] = got
    return out


def promise(clients: Clients, entry: dict[str, Any]) -> Promise | None:
    """What the instance behind a gcpgpu-storage entry promises (None: unknown, e.g. no per-TiB rate)."""
    kind, name = entry.get("kind"), entry.get("name")
    if kind == "filestore":
        inst = clients.filestore().get_instance(name=name)
        tier = tiers.tier("filestore", inst.tier.name)
        gib = sum(int(s.capacity_gb) for s in inst.file_shares)
    elif kind == "lustre":
        inst = clients.lustre().get_instance(name=name)
        tier = tiers.tier("lustre", str(inst.per_unit_storage_throughput))
        gib = int(inst.capacity_gib)
    else:
        return None
    if tier is None or not tier.read_per_tib:
        return None
    return Promise(tier.read_rate(gib), tier.write_rate(gib), f"{kind} {tier.name} {gib:,} GiB")


def judge(measured: dict[str, dict[str, float | None]], promises: dict[str, Promise], nodes: int) -> list[str]:
    """One line per rate of one node below SLOW_FRACTION of its share of the promise."""
    out = []
    for path, p in sorted(promises.items()):
        rates = measured.get(path)
        if rates is None:
            out.append(f"{path}: not measured (not mounted?)")
            continue
        for key, word, whole in (("w", "write", p.write_mib_s), ("r", "read", p.read_mib_s)):
            rate, share = rates.get(key), whole / max(nodes, 1)
            if rate is not None and rate < SLOW_FRACTION * share:
                out.append(f"{path} {word} {rate:g} MiB/s, expected about {share:.0f} ({p.what} over {nodes} node(s))")
    return out


def cell(measured: dict[str, dict[str, float | None]]) -> str:
    """A table cell: '/shared w 412 r 1020'."""
    def num(v: float | None) -> str:
        return "-" if v is None else f"{v:.0f}"

    return "; ".join(f"{p} w {num(r.get('w'))} r {num(r.get('r'))}" for p, r in sorted(measured.items())) or "-"
