"""`cluster doctor --active` and `cluster up --check`: prove each node healthy before training on it.

One bad GPU, NIC or row-remap caps a whole job's speed, and boot-time reports (cluster/doctor.py)
do not see it. Active diagnostics ask every node, through its metadata (`gcpgpu-diag` = a request
id), to run: GPU diagnostics (`dcgmi diag` where DCGM runs, else nvidia-smi's ECC, row-remap and
Xid records), an all_reduce over the node's own GPUs (NVLink), a bandwidth test per GPU NIC, and a
cross-node NCCL all_reduce; each node writes its findings as guest attributes under gcpgpu-diag/
(on a real node: templates/node_diag.sh.j2; on the emulator: fakes/guest/diag.py). The findings are
compared with what gcpgpu/data/busbw.yaml expects for the machine's family (Cluster Toolkit runs
DCGM/ECC/NVLink checks in its Slurm prologs and Cluster Health Scanner's NCCL all_reduce_perf;
dstack drops instances that fail DCGM health checks) and the bad node, GPU or NIC is named.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from functools import cache
from importlib.resources import files
from typing import Any

from gcpgpu.storage import rates as storage_rates

from .observe import Node

NAMESPACE = "gcpgpu-diag"
POLL_SECONDS = 2.0
COLUMNS = [("node", "NODE"), ("rank", "RANK"), ("gpu", "GPU DIAG"), ("nvlink", "NVLINK GB/S"),
           ("slowest_nic", "SLOWEST NIC"), ("net", "ALL_REDUCE GB/S"), ("latency", "RING RTT µs"),
           ("shared", "SHARED FS MiB/S"),
           ("verdict", "VERDICT")]


# The seed guide's figures: under 50 µs between nodes of a compact placement, 100-200 µs in a zone without one
# (whether it means the round trip or one way is unverified; gcpgpu compares the round trip).
COMPACT_RTT_US = 50.0
SPREAD_RTT_US = 200.0


def compact_placement(diagnoses: list[Any]) -> bool:
    """Whether the nodes were placed compactly (each Diagnosis carries its node's flag, set by run())."""
    return bool(diagnoses) and all(getattr(d, "compact", False) for d in diagnoses)


@cache
def expectations() -> dict[str, Any]:
    import yaml

    return yaml.safe_load((files("gcpgpu") / "data" / "busbw.yaml").read_text(encoding="utf-8"))


@dataclass
class Diagnosis:
    node: str
    rank: int | None
    report: dict[str, str]
    problems: list[str] = field(default_factory=list)
    # Shared file systems slower than their tier's promise: shown, never a reason to replace the node
    # (`up --check` replaces on problems; a slow share is the share's, not the node's).
    storage: list[str] = field(default_factory=list)
    compact: bool = False  # its node is in a compact placement policy (the latency it should have)

    def nics(self) -> dict[str, float]:
        out = {}
        for pair in filter(None, self.report.get("nics", "").split(",")):
            nic, _, rate = pair.partition("=")
            try:
                out[nic] = float(rate)
            except ValueError:
                continue
        return out

    def row(self) -> dict[str, Any]:
        nics = self.nics()
        slowest = min(nics.items(), key=lambda kv: kv[1]) if nics else None
        return {"node": self.node, "rank": self.rank, "gpu": self.report.get("gpu", "-"),
                "nvlink": self.report.get("nvlink-busbw", "-"),
                "slowest_nic": f"{slowest[0]} {slowest[1]:g}" if slowest else "-",
                "net": self.report.get("net-busbw", "-"),
                "latency": self.report.get("latency") or "-",
                "shared": storage_rates.cell(storage_rates.parse(self.report.get("storage"))),
                "verdict": "; ".join(self.problems + self.storage) or "healthy"}


def _float(value: str | None) -> float | None:
    try:
        return float(value) if value not in (None, "") else None
    except ValueError:
        return None


def evaluate(machine: Any, diagnoses: list[Diagnosis]) -> list[str]:
    """Fill each Diagnosis' problems (what names its node, GPU or NIC); returns the cluster's own
    (the cross-node all_reduce) problems."""
    exp = expectations()
    frac = float(exp["slow_fraction"])
    flavor = machine.gpudirect if machine.gpu_nics else "none"
    cross = float(exp["cross_node"][flavor]["busbw"])
    intra = float((exp["intra_node"].get(machine.gpu.name) or {"busbw": 0})["busbw"])
    per_nic = cross / max(machine.gpu_nics, 1)
    for d in diagnoses:
        r = d.report
        if r.get("gpu", "").startswith("fail"):
            d.problems.append(r["gpu"].removeprefix("fail:").strip())
        nv = _float(r.get("nvlink-busbw"))
        if nv is not None and intra and machine.gpu_count >= 2 and nv < frac * intra:
            d.problems.append(f"all_reduce over its {machine.gpu_count} GPUs {nv:g} GB/s, expected about {intra:g}")
        for nic, rate in sorted(d.nics().items()):
            if rate < frac * per_nic:
                d.problems.append(f"GPU NIC {nic} {rate:g} GB/s, expected about {per_nic:.1f}")
    compact = compact_placement(diagnoses)
    limit = COMPACT_RTT_US if compact else SPREAD_RTT_US
    for d in diagnoses:
        peer, _, rtt = d.report.get("latency", "").partition("=")
        if (us := _float(rtt)) is not None and us > limit:
            d.problems.append(f"round trip to {peer} {us:g} µs, expected under {limit:g} "
                              + ("inside a compact placement" if compact else "in a zone without one"))
    cluster: list[str] = []
    nets = [v for d in diagnoses if (v := _float(d.report.get("net-busbw"))) is not None]
    if len(diagnoses) > 1 and nets and min(nets) < frac * cross:
        slow = [d.node for d in diagnoses if any("GPU NIC" in p for p in d.problems)]
        who = f": slowed by {', '.join(slow)}" if slow else ": no single node stands out"
        cluster.append(f"cross-node all_reduce {min(nets):g} GB/s, expected about {cross:g} ({flavor}){who}")
    return cluster


def request(clients: Any, project: str, nodes: list[Node]) -> str:
    """Ask every node to run its diagnostics (metadata gcpgpu-diag = a fresh request id).

    setMetadata replaces the whole document, so it is written over the nodes' metadata as it is now,
    read in one list: the caller's view may be a partial one (`up` reads its nodes without metadata,
    whose startup script is most of a VM's size) or older than a job agent's last write."""
    from gcpgpu.gcp.compute import compute_types

    compute = compute_types()

    from gcpgpu.gcp.operations import batch, call

    from .names import LABEL_CLUSTER
    from .observe import list_nodes

    rid = uuid.uuid4().hex[:12]
    current: dict[tuple[str, str], Any] = {}
    for cluster in sorted({n.cluster for n in nodes}):
        for inst in list_nodes(clients, project, f"labels.{LABEL_CLUSTER} = {cluster}", "name,zone,metadata"):
            current[(inst.zone.rsplit("/", 1)[-1], inst.name)] = inst.metadata

    def put(node: Node) -> Any:
        now = current.get((node.zone, node.name))
        items = {**({i.key: i.value for i in now.items} if now else node.metadata), "gcpgpu-diag": rid}
        md = compute.Metadata(fingerprint=now.fingerprint if now else node.metadata_fingerprint,
                                 items=[compute.Items(key=k, value=v) for k, v in items.items()])
        return call(clients.compute("InstancesClient").set_metadata,
                    {"project": project, "zone": node.zone, "instance": node.name, "metadata_resource": md})

    batch(clients, project, put, nodes)
    return rid


def collect(clients: Any, project: str, nodes: list[Node], rid: str, timeout: float,
            note: Any = None) -> dict[str, dict[str, str]]:
    """Each node's findings for request `rid`; a node that has not answered in `timeout` seconds
    maps to {} (named as silent by the caller)."""
    from .observe import guest_attributes

    deadline = time.monotonic() + timeout
    got: dict[str, dict[str, str]] = {}
    while True:
        for n in nodes:
            if n.name not in got:
                r = guest_attributes(clients, project, n, NAMESPACE)
                if r.get("request") == rid and r.get("state") == "done":
                    got[n.name] = r
        if len(got) == len(nodes) or time.monotonic() > deadline:
            return {n.name: got.get(n.name, {}) for n in nodes}
        if note:
            note(f"diagnostics: {len(got)}/{len(nodes)} node(s) done")
        time.sleep(POLL_SECONDS)


def run(clients: Any, project: str, nodes: list[Node], timeout: float = 1200.0,
        note: Any = None) -> tuple[list[Diagnosis], list[str]]:
    """Active diagnostics over `nodes` (RUNNING ones); (per-node diagnoses, cluster problems)."""
    from gcpgpu import catalog

    running = [n for n in nodes if n.status == "RUNNING"]
    rid = request(clients, project, running)
    reports = collect(clients, project, running, rid, timeout, note)
    out = []
    for n in nodes:
        d = Diagnosis(n.name, n.rank, reports.get(n.name, {}), compact=n.compact)
        if n.status != "RUNNING":
            d.problems.append(f"node is {n.status}")
        elif not d.report:
            d.problems.append(f"no diagnostics within {timeout:.0f} s (is the node's diagnostics watcher running?)")
        out.append(d)
    machine = catalog.get_machine_type(nodes[0].machine_type) if nodes else None
    judge_storage(clients, nodes, [d for d in out if d.report])
    return out, evaluate(machine, [d for d in out if d.report]) if machine else []


def judge_storage(clients: Any, nodes: list[Node], diagnoses: list[Diagnosis]) -> None:
    """Each node's rates on the shared file systems (gcpgpu-storage) against their tiers' promises."""
    from gcpgpu.storage.entries import KEY, loads

    found = loads(next((n.metadata.get(KEY) for n in nodes if n.metadata.get(KEY)), None))
    promises = {e["path"]: p for e in found if (p := storage_rates.promise(clients, e)) is not None}
    for d in diagnoses:
        d.storage = storage_rates.judge(storage_rates.parse(d.report.get("storage")), promises, len(diagnoses))
