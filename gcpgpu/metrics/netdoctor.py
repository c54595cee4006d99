"""`cluster doctor`'s network section: each node's NICs as their own counters say (gcpgpu.node.nics).

Per node, from the samplers' latest points (the last few minutes): how many NICs have their link up and at what
speed, error counters, retransmits and congestion notifications per second, and the node's slowest GPU-fabric
NIC against the median NIC of the cluster. A node is named with the NIC at fault when a NIC is down or erring, or
when, while the fabric carries traffic, one of its fabric NICs moves well below the median NIC with retransmits
or CNPs rising: the slow or flapping NIC that makes its node (and every collective with it) the straggler.
"""

from __future__ import annotations

import statistics
from typing import Any

from . import nics as nicview
from .query import Window, fetch
from .sources import GBIT, NIC, Metric

SHARE = 0.8  # a fabric NIC under 80 % of the median NIC is slow (the tail's straggler share)
BUSY_GBPS = 0.001  # below this per NIC the fabric is idle: nothing to compare
WINDOW_S = 300.0
COLUMNS = [("node", "NODE"), ("nics_up", "NICS UP"), ("speed", "LINK Gb/s"), ("fabric_gbps", "FABRIC Gb/s"),
           ("slowest", "SLOWEST FABRIC NIC"), ("errors_per_s", "ERR/s"), ("retrans_per_s", "RETX/s"),
           ("cnp_per_s", "CNP/s"), ("verdict", "NETWORK")]
_METRICS = (
    Metric("nic_sent_gbps", "NIC sent", NIC + "sent_bytes_per_s", "nics", "ALIGN_MEAN", "REDUCE_SUM", GBIT, per_nic=True),
    Metric("nic_recv_gbps", "NIC received", NIC + "recv_bytes_per_s", "nics", "ALIGN_MEAN", "REDUCE_SUM", GBIT,
           per_nic=True),
    Metric("nic_cnp_per_s", "CNPs", NIC + "cnp_per_s", "nics", "ALIGN_MEAN", "REDUCE_SUM", per_nic=True),
    Metric("nic_retrans_per_s", "retransmits", NIC + "retrans_per_s", "nics", "ALIGN_MEAN", "REDUCE_SUM", per_nic=True),
    Metric("nic_errors_per_s", "errors", NIC + "errors_per_s", "nics", "ALIGN_MEAN", "REDUCE_SUM", per_nic=True),
    Metric("nic_link_gbps", "link speed", NIC + "link_gbps", "nics", "ALIGN_MIN", "REDUCE_MIN", per_nic=True),
)


def check(clients: Any, target: Any, now: float) -> tuple[list[dict[str, Any]], list[str]]:
    """(a row per node, the problems naming node and NIC); no rows when no node wrote its NICs' counters."""
    got = fetch(clients, target, _METRICS, Window(now - WINDOW_S, now, 60.0), latest_only=False)
    by_node = nicview.index(got.data, tuple(m.key for m in _METRICS))
    if not by_node:
        return [], []
    fabric_role = "fabric" if nicview.flavor(target.machine) != "none" else "host"
    rate = {(key, nic): v.get("nic_sent_gbps", 0.0) + v.get("nic_recv_gbps", 0.0)
            for key, nics in by_node.items() for (role, nic), v in nics.items() if role == fabric_role}
    median = statistics.median(rate.values()) if rate else 0.0
    rows, problems = [], []
    for member in sorted(target.members, key=lambda m: (m.rank is None, m.rank or 0, m.name)):
        nics = by_node.get(member.key)
        if not nics:
            rows.append({"node": member.name, "verdict": "no NIC counters (gcpgpu.node.nics not running)"})
            continue
        links = {nic: v.get("nic_link_gbps") for (role, nic), v in nics.items() if role != "tcp"}
        down = sorted(nic for nic, gbps in links.items() if gbps is not None and gbps <= 0)
        own = [(rate[(member.key, nic)], nic) for (role, nic) in nics if role == fabric_role]
        slow_rate, slow_nic = min(own) if own else (None, "")
        errors, retrans, cnp = (sum(v.get(key, 0.0) for v in nics.values())
                                for key in ("nic_errors_per_s", "nic_retrans_per_s", "nic_cnp_per_s"))
        found = [f"{nic} link down" for nic in down]
        erring = sorted(nic for (_r, nic), v in nics.items() if v.get("nic_errors_per_s"))
        found += [f"{nic} errors {nics_value(nics, nic, 'nic_errors_per_s'):.1f}/s" for nic in erring]
        if slow_rate is not None and median > BUSY_GBPS and slow_rate < SHARE * median:
            extra = ", ".join(f"{label} {value:.0f}/s" for label, value in (("retransmits", retrans), ("CNPs", cnp))
                              if value)
            found.append(f"{slow_nic} at {slow_rate:.3f} Gbit/s vs the median NIC's {median:.3f}"
                         + (f" ({extra})" if extra else ""))
        speeds = sorted({gbps for gbps in links.values() if gbps})
        rows.append({
            "node": member.name, "nics_up": f"{len(links) - len(down)}/{len(links)}",
            "speed": "/".join(f"{s:g}" for s in speeds) or "-",
            "fabric_gbps": round(sum(r for r, _n in own), 3) if own else None,
            "slowest": f"{slow_nic} {slow_rate:.3f}" if own else "-", "errors_per_s": round(errors, 2),
            "retrans_per_s": round(retrans, 2),
            "cnp_per_s": round(cnp, 2) if nicview.flavor(target.machine) == "rdma" else "no RoCE",
            "verdict": "ok" if not found else "; ".join(found)})
        problems += [f"{member.name} (rank {member.rank}): NIC {f}" for f in found]
    return rows, problems


def nics_value(nics: dict, nic: str, key: str) -> float:
    return sum(v.get(key, 0.0) for (_r, n), v in nics.items() if n == nic)
