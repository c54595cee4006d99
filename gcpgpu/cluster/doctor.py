"""`gcpgpu cluster doctor NAME`: is every node ready to train?

Each node's startup script (templates/node_report.sh.j2) writes guest attributes under
gcpgpu-node/: the NVIDIA driver version, GPUs found/expected, GPU NICs found/expected, NICs whose
link is down, and whether the GPUDirect host pieces (the NCCL plugin the installer puts on the host,
/dev/aperture_devices, /dev/infiniband) are there. A job's agent adds gcpgpu/rxdm (the receive-
datapath manager of TCPX/TCPXO, which runs per job). A node that reported nothing has not finished
booting, or cannot reach the metadata server.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gcpgpu.gcp.clients import Clients

NAMESPACE = "gcpgpu-node"
COLUMNS = [("node", "NODE"), ("status", "STATUS"), ("driver", "DRIVER"), ("gpus", "GPUS"), ("gpu_nics", "GPU NICS"),
           ("links", "LINKS"), ("gpudirect", "GPUDIRECT"), ("rxdm", "RXDM"), ("host_tuning", "HOST TCP"),
           ("ready", "READY")]


@dataclass
class NodeCheck:
    node: str
    status: str
    report: dict[str, str]
    job: dict[str, str]

    @staticmethod
    def _short(value: str) -> bool:
        """'7/8' is short of its expectation."""
        have, _, want = value.partition("/")
        return not (have.isdigit() and want.isdigit()) or int(have) < int(want)

    def problems(self) -> list[str]:
        """What keeps this node from training, in words ([] when it is ready)."""
        if self.status != "RUNNING":
            return [f"node is {self.status}"]
        r = self.report
        if not r:
            return ["no report from the startup script yet (still booting?)"]
        out = []
        if r.get("driver", "none") in ("", "none"):
            out.append("no NVIDIA driver")
        if self._short(r.get("gpus", "0/1")):
            out.append(f"GPUs {r.get('gpus', '?')}")
        if self._short(r.get("gpu-nics", "0/1")) and r.get("gpu-nics") != "0/0":
            out.append(f"GPU NICs {r.get('gpu-nics', '?')}")
        if r.get("links"):
            out.append(f"links {r['links']}")
        if r.get("gpudirect", "none") not in ("ready", "none"):
            out.append(r["gpudirect"])
        if self.job.get("rxdm") == "down":
            out.append("receive-datapath manager down")
        return out

    def row(self) -> dict[str, Any]:
        problems = self.problems()
        r = self.report
        return {"node": self.node, "status": self.status, "driver": r.get("driver", "-"), "gpus": r.get("gpus", "-"),
                "gpu_nics": r.get("gpu-nics", "-"), "links": r.get("links") or ("up" if r else "-"),
                "gpudirect": r.get("gpudirect", "-"), "rxdm": self.job.get("rxdm", "-"),
                "host_tuning": r.get("host-tuning", "-"),
                "ready": "yes" if not problems else "no: " + "; ".join(problems)}


def check(clients: Clients, project: str, cluster: str) -> list[NodeCheck]:
    """One NodeCheck per node of the cluster, in rank order (reads in parallel)."""
    from gcpgpu.gcp.operations import parallel, raise_first

    from .observe import Node, guest_attributes, ranked_nodes

    def one(node: Node) -> NodeCheck:
        running = node.status == "RUNNING"
        report = guest_attributes(clients, project, node, NAMESPACE) if running else {}
        job = guest_attributes(clients, project, node) if running else {}
        return NodeCheck(node.name, node.status, report, job)

    return raise_first(parallel(one, ranked_nodes(clients, project, cluster)))
