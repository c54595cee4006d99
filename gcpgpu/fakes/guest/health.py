"""What an emulated node's startup script reports about itself (guest attributes under gcpgpu-node/).

On a real node, templates/node_report.sh.j2 (part of the startup script) writes the driver version,
the GPUs nvidia-smi lists, the GPU NICs and their links, and whether the GPUDirect host pieces are
in place. Here the values follow the machine type, for every RUNNING node gcpgpu made (its
metadata carries the bootstrap), so `gcpgpu cluster doctor` sees a healthy node; `lack(name, what)`
makes a node miss something, as a broken real one would. Difference from real GCP: an emulated A3
High/Edge node always has a GPUDirect-TCPX kernel, while the catalog's default image (the Deep
Learning VM) has none; `cluster plan` warns about that, and a real node's report names its kernel.
"""

from __future__ import annotations

import threading

from ..world import read_data

NAMESPACE = "gcpgpu-node"
# Believable driver versions: the Ubuntu accelerator images carry the 580 branch (their family
# name says so); the Deep Learning VM's cu124 images install a 550-branch driver.
DRIVERS = {"baked": "580.95.05", "dlvm-metadata": "550.90.07", "apt": "570.172.08"}
LACKS = ("driver", "gpus", "gpu-nics", "links", "gpudirect")


class NodeHealth:
    """Per-node startup reports for emulated instances, with faults a test can set."""

    def __init__(self) -> None:
        catalog = read_data("gcpgpu", "data/machines.yaml")
        self._machines = catalog["machine_types"]
        self._families = catalog["families"]
        self._nodes = catalog["nodes"]
        self._lacks: dict[str, set[str]] = {}
        self._lock = threading.Lock()

    def reset(self) -> None:
        with self._lock:
            self._lacks.clear()

    def lack(self, instance: str, what: str) -> None:
        """Make node `instance` report that it lacks `what` (one of LACKS)."""
        if what not in LACKS:
            raise ValueError(f"lack {what!r}: one of {', '.join(LACKS)}")
        with self._lock:
            self._lacks.setdefault(instance, set()).add(what)

    def attributes(self, inst: dict) -> dict[str, str]:
        """{"gcpgpu-node/key": value} for a RUNNING node gcpgpu bootstrapped; {} otherwise."""
        items = {i.get("key"): i.get("value") or "" for i in (inst.get("metadata") or {}).get("items", [])}
        if inst.get("status") != "RUNNING" or "gcpgpu node bootstrap" not in items.get("startup-script", ""):
            return {}
        mt = self._machines.get(str(inst.get("machineType", "")).rsplit("/", 1)[-1])
        if mt is None:
            return {}
        family = {**self._families[mt["family"]], **mt}
        flavor = family["gpudirect"] if int(family["gpu_nics"]) else "none"
        want_nics = int(family["gpu_nics"])
        with self._lock:
            lacks = set(self._lacks.get(inst["name"], ()))
        gpus = int(mt["gpu_count"])
        out = {
            "driver": "none" if "driver" in lacks else DRIVERS[self._nodes[mt["family"]]["driver"]],
            "gpus": f"{0 if 'driver' in lacks else gpus - 1 if 'gpus' in lacks else gpus}/{gpus}",
            "gpu-nics": f"{want_nics - 1 if 'gpu-nics' in lacks and want_nics else want_nics}/{want_nics}",
            "links": "down:" + ("mlx5_3" if flavor == "rdma" else "enp134s0") if "links" in lacks else "",
            "gpudirect": {"none": "none", "rdma": "ready", "tcpx": "ready", "tcpxo": "ready"}[flavor],
            # The startup script's sysctl file is in force, or the image's default (Linux's 212992) is.
            "host-tuning": "on" if "90-gcpgpu-tcp.conf" in items.get("startup-script", "") else "off (rmem_max 212992)",
        }
        if "gpudirect" in lacks:
            out["gpudirect"] = {"tcpx": "missing /var/lib/tcpx/lib64 (NCCL plugin installer)",
                                "tcpxo": "missing /dev/aperture_devices", "rdma": "missing /dev/infiniband",
                                "none": "none"}[flavor]
        return {f"{NAMESPACE}/{k}": v for k, v in out.items()}


__all__ = ["LACKS", "NodeHealth"]
