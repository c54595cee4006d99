"""What an emulated node's active diagnostics report (guest attributes under gcpgpu-diag/).

`gcpgpu cluster doctor --active` asks each node for diagnostics by setting metadata `gcpgpu-diag`
to a request id; on a real node the diagnostics script (templates/node_diag.sh.j2) runs them and
writes its findings. Here they follow the machine type and the expectations in
gcpgpu/data/busbw.yaml, for a RUNNING node whose metadata asks, and the world's faults break them:
`gpu_fault=NODE` fails GPU 3's diagnostics on that node (dcgmi diag, as an uncorrectable ECC error
would), `slow_nic=NODE` runs one of its GPU NICs at a tenth of its share and so drags the
cluster's cross-node all_reduce down with it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from ..world import read_data

NAMESPACE = "gcpgpu-diag"
SLOW_NIC_INDEX = 2  # which NIC a slow_nic fault slows
BAD_GPU = 3  # which GPU a gpu_fault fault breaks


def nic_names(flavor: str, count: int) -> list[str]:
    """GPU NIC names as the guest sees them: mlx5_N (RDMA), eth1..ethN (gVNIC GPU NICs)."""
    return [f"mlx5_{i}" for i in range(count)] if flavor == "rdma" else [f"eth{i + 1}" for i in range(count)]


class NodeDiagnostics:
    def __init__(self) -> None:
        catalog = read_data("gcpgpu", "data/machines.yaml")
        self._machines = catalog["machine_types"]
        self._families = catalog["families"]
        self._busbw = read_data("gcpgpu", "data/busbw.yaml")

    def attributes(self, inst: dict, bad_gpus: Iterable[str], slow_nics: Iterable[str],
                   peers: Callable[[], Iterable[str]]) -> dict[str, str]:
        """{"gcpgpu-diag/key": value} for a RUNNING node asked for diagnostics; {} otherwise. `bad_gpus`
        and `slow_nics` name the nodes the faults break; `peers()` names the nodes of the same
        cluster (the cross-node all_reduce runs over all of them)."""
        items = {i.get("key"): i.get("value") or "" for i in (inst.get("metadata") or {}).get("items", [])}
        request = items.get("gcpgpu-diag")
        mt = self._machines.get(str(inst.get("machineType", "")).rsplit("/", 1)[-1])
        if not request or inst.get("status") != "RUNNING" or mt is None:
            return {}
        family = {**self._families[mt["family"]], **mt}
        gpus, nics = int(mt["gpu_count"]), int(family["gpu_nics"])
        flavor = family["gpudirect"] if nics else "none"
        name = inst["name"]
        bad_gpu = name in set(bad_gpus)
        slow = set(slow_nics)
        cross = float(self._busbw["cross_node"][flavor]["busbw"])
        intra = float(self._busbw["intra_node"].get(family.get("gpu", ""), {}).get("busbw", 100))
        per_nic = cross / max(nics, 1)
        rates = []
        for i, nic in enumerate(nic_names(flavor, nics)):
            rate = per_nic * (0.1 if name in slow and i == SLOW_NIC_INDEX else 1.0)
            rates.append(f"{nic}={rate:.1f}")
        # NCCL spreads its channels over the NICs and a ring moves at its slowest link's pace: one NIC
        # at a tenth anywhere brings the whole all_reduce down to about a tenth.
        peer_names = sorted(peers(), key=_rank_key)
        slowed = any(p in slow for p in peer_names)
        out = {
            "request": request,
            "state": "done",
            "tool": "dcgmi",
            "gpus": str(gpus),
            "gpu": f"fail: GPU {BAD_GPU}: dcgmi diag -r 2: memory test failed (uncorrectable ECC errors: 2)"
                   if bad_gpu else "pass",
            # One GPU has no NVLink peer: nothing to measure, as the node's script says (node_diag.sh.j2).
            "nvlink-busbw": f"{intra * (0.5 if bad_gpu else 1.0):.1f}" if gpus >= 2 else "none",
            "nics": ",".join(rates),
            "net-busbw": f"{cross * (0.1 if slowed else 1.0):.1f}",
            # The ring's next node and the round trip to it (µs): about 25 inside a compact placement, 150
            # without one; a slowed NIC's node answers four times slower.
            "latency": self._latency(inst, peer_names, slow),
        }
        return {f"{NAMESPACE}/{k}": v for k, v in out.items()}

    @staticmethod
    def _latency(inst: dict, peers: list[str], slow: set[str]) -> str:
        if len(peers) < 2 or inst["name"] not in peers:
            return ""
        nxt = peers[(peers.index(inst["name"]) + 1) % len(peers)]
        base = 25.0 if inst.get("resourcePolicies") else 150.0
        factor = 4.0 if inst["name"] in slow or nxt in slow else 1.0
        return f"{nxt}={base * factor + int(inst['id']) % 7:.0f}"


def _rank_key(name: str) -> tuple[int, str]:
    tail = name.rsplit("-", 1)[-1]
    return (int(tail) if tail.isdigit() else 0, name)


__all__ = ["NAMESPACE", "NodeDiagnostics", "nic_names"]
