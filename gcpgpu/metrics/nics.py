"""The network view per node from each NIC's own counters: GPU fabric apart from host NICs, congestion, retransmits.

gcpgpu.node.nics writes, on every node, each NIC's rates (labels node, nic, role) under custom.googleapis.com/
gcpgpu/nic/. The tail asks for them grouped per (node, NIC, role), one call per metric type, and sums a node's
NICs by role here: fabric (the GPU NICs) and host (the gVNICs). On a family with no GPU NICs (A2, G2) the host
NIC is the fabric: the collectives run over it. A column a family cannot measure says why, never 0:
congestion notifications (CNPs) exist only on RoCE (A3 Ultra, A4); retransmits come from the RDMA NICs'
hw_counters there and from the kernel's TCP counters (/proc/net/snmp) elsewhere.
"""

from __future__ import annotations

import statistics
from typing import Any

from .sources import NIC

FABRIC_SOURCE = {
    "rdma": "the {n} RDMA NICs' own counters (/sys/class/infiniband, GPUDirect RDMA)",
    "tcpxo": "the {n} GPU gVNICs' own counters (/sys/class/net, GPUDirect-TCPXO)",
    "tcpx": "the {n} GPU gVNICs' own counters (/sys/class/net, GPUDirect-TCPX)",
    "none": "the host NIC's own counters (/sys/class/net): this machine has no GPU NICs, its collectives use it",
}
RETRANS_SOURCE = {"rdma": "RDMA hw_counters (out_of_sequence, packet_seq_err, local_ack_timeout_err)",
                  "other": "the kernel's TCP RetransSegs (/proc/net/snmp)"}
KEYS = ("fabric_sent_gbps", "fabric_recv_gbps", "host_sent_gbps", "host_recv_gbps", "cnp_per_s", "retrans_per_s")
GBIT = 8 / 1e9


def flavor(machine: Any) -> str:
    """The family's GPU fabric: rdma | tcpxo | tcpx | none (no GPU NICs: the host NIC carries the collectives)."""
    if machine is None or not getattr(machine, "gpu_nics", 0):
        return "none"
    return str(machine.gpudirect)


def unmeasured(machine: Any) -> dict[str, str]:
    """The columns gcpgpu cannot measure on this machine, and why."""
    fl = flavor(machine)
    out: dict[str, str] = {}
    if fl != "rdma":
        out["cnp_per_s"] = ("no RoCE: " + ("TCPXO" if fl == "tcpxo" else "TCPX" if fl == "tcpx" else "TCP")
                            + " has no congestion notifications")
    return out


def sources(machine: Any) -> dict[str, str]:
    """Which source each network column comes from, for this machine's family (the header says it)."""
    fl = flavor(machine)
    n = getattr(machine, "gpu_nics", 0) if machine is not None else 0
    out = {
        "fabric": FABRIC_SOURCE.get(fl, FABRIC_SOURCE["none"]).format(n=n),
        "host": "the host gVNIC(s)' own counters (/sys/class/net)" if fl != "none"
                else "the same NIC as the fabric (one NIC on this machine)",
        "retrans": RETRANS_SOURCE["rdma" if fl == "rdma" else "other"],
        "sent_recv": "Compute Engine's per-VM network metric (what it counts of GPUDirect traffic is unverified)",
    }
    out["cnp"] = "RDMA hw_counters (np_cnp_sent + rp_cnp_handled)" if fl == "rdma" else unmeasured(machine)["cnp_per_s"]
    return out


def index(data: dict, keys: tuple[str, ...] | None = None) -> dict[str, dict[tuple[str, str], dict[str, float]]]:
    """Per node (instance id): (role, nic) -> {metric key: latest value}, from what the tail fetched, in one pass."""
    out: dict[str, dict[tuple[str, str], dict[str, float]]] = {}
    for metric_key in keys or NIC_KEYS:
        for (key, sub), points in data.get(metric_key, {}).items():
            if not points or sub is None:
                continue
            role, _, nic = sub.partition("|")
            out.setdefault(key, {}).setdefault((role, nic), {})[metric_key] = max(points)[1]
    return out


NIC_KEYS = ("nic_sent_gbps", "nic_recv_gbps", "nic_cnp_per_s", "nic_retrans_per_s")


def node_values(nics: dict[tuple[str, str], dict[str, float]], machine: Any) -> dict[str, Any]:
    """A node's network fields from its NICs' latest values: sums per role, its slowest fabric NIC."""
    if not nics:
        return {}
    fl = flavor(machine)

    def total(role: str, key: str) -> float | None:
        vals = [v[key] for (r, _n), v in nics.items() if r == role and key in v]
        return sum(vals) if vals else None

    out: dict[str, Any] = {
        "host_sent_gbps": total("host", "nic_sent_gbps"), "host_recv_gbps": total("host", "nic_recv_gbps")}
    fabric_role = "fabric" if fl != "none" else "host"  # on A2 the host NIC is the fabric
    out["fabric_sent_gbps"] = total(fabric_role, "nic_sent_gbps")
    out["fabric_recv_gbps"] = total(fabric_role, "nic_recv_gbps")
    if fl == "rdma":
        out["cnp_per_s"] = total("fabric", "nic_cnp_per_s") or 0.0
        out["retrans_per_s"] = total("fabric", "nic_retrans_per_s") or 0.0
    else:
        out["cnp_per_s"] = None
        out["retrans_per_s"] = total("tcp", "nic_retrans_per_s")
    # Each fabric NIC by what it sent (asked per NIC; received comes per role unless --nics: nic "").
    fabric = sorted(((v.get("nic_sent_gbps", 0.0), n) for (r, n), v in nics.items()
                     if r == fabric_role and n and "nic_sent_gbps" in v), key=lambda x: (x[0], x[1]))
    if fabric:
        out["slowest_nic"], out["slowest_nic_gbps"] = fabric[0][1], fabric[0][0]
        out["fabric_nics"] = len(fabric)
    return out


def report_roles(machine: Any, metric_key: str) -> list[tuple[str, str, tuple[str, ...]]]:
    """The report's panels of one NIC metric: (role key, label, the roles summed into it). Traffic splits into
    the GPU fabric and the host NICs (on a family with no GPU NICs the host NIC is the fabric: one panel);
    congestion and retransmits are the fabric's (RDMA) or the node's TCP."""
    fl = flavor(machine)
    if metric_key in ("nic_sent_gbps", "nic_recv_gbps"):
        if fl == "none":
            return [("fabric", "the host NIC (the fabric here)", ("host",))]
        return [("fabric", "GPU fabric", ("fabric",)), ("host", "host NICs", ("host",))]
    if metric_key == "nic_cnp_per_s":
        return [("fabric", "GPU fabric (RDMA)", ("fabric",))] if fl == "rdma" else []
    return [("fabric", "GPU fabric (RDMA hw_counters)", ("fabric",))] if fl == "rdma" else \
        [("tcp", "the node's TCP", ("tcp",))]


def nic_rows(nics: dict[tuple[str, str], dict[str, float]]) -> list[tuple[str, str, dict[str, float | None]]]:
    """(nic, role, values) per NIC of one node, for --nics: fabric first, then host, then the node's TCP."""
    order = {"fabric": 0, "host": 1, "tcp": 2}
    out = []
    for (role, nic), v in sorted(nics.items(), key=lambda kv: (order.get(kv[0][0], 3), kv[0][1])):
        if not nic:
            continue  # a role's sum (asked per role): not a NIC
        out.append((nic, role, {"fabric_sent_gbps" if role == "fabric" else "host_sent_gbps": v.get("nic_sent_gbps"),
                                "fabric_recv_gbps" if role == "fabric" else "host_recv_gbps": v.get("nic_recv_gbps"),
                                "cnp_per_s": v.get("nic_cnp_per_s"), "retrans_per_s": v.get("nic_retrans_per_s")}))
    return out


def judge(rows: list[Any], share: float, floor_gbps: float) -> bool:
    """Mark stragglers on the GPU fabric: a node moving well below its peers' median, or one of whose fabric NICs
    moves well below the median NIC (a slow or flapping NIC). False when no node reported its fabric (the
    caller judges Compute's per-VM network instead)."""
    fabric = {id(r): (r.values.get("fabric_sent_gbps") or 0.0) + (r.values.get("fabric_recv_gbps") or 0.0)
              for r in rows if r.values.get("fabric_sent_gbps") is not None}
    if not fabric:
        return False
    if len(fabric) < 2:
        return True
    median = statistics.median(fabric.values())
    per_nic = [r.values["fabric_sent_gbps"] / r.values["fabric_nics"] for r in rows
               if id(r) in fabric and r.values.get("fabric_nics")]
    nic_median = statistics.median(per_nic) if per_nic else 0.0
    if median <= floor_gbps:
        return True
    for r in rows:
        v = fabric.get(id(r))
        if v is None:
            continue
        why = []
        if v < share * median:
            why.append(f"GPU fabric {v:.2f} Gbit/s vs median {median:.2f}")
        slow = r.values.get("slowest_nic_gbps")
        if slow is not None and nic_median > 0 and slow < share * nic_median:
            why.append(f"NIC {r.values['slowest_nic']} sent {slow:.3f} Gbit/s vs median NIC {nic_median:.3f}")
        if why:
            extra = [f"{label} {r.values[k]:.0f}/s" for k, label in (("retrans_per_s", "retransmits"),
                                                                   ("cnp_per_s", "CNPs")) if r.values.get(k)]
            r.straggler.append("; ".join(why + extra))
    return True


__all__ = ["KEYS", "NIC", "NIC_KEYS", "flavor", "judge", "node_values", "nic_rows", "index", "report_roles", "sources", "unmeasured"]
