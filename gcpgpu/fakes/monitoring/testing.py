"""Test and benchmark helpers: a labelled GPU cluster that has been running for a while, in one call.

`cluster up` builds networks, placement and all; metrics tests only need the VMs, with the labels
gcpgpu puts on them and some minutes of history (their RUNNING time backdated, and by default a
job running on them all along), so the synthetic series have something to show.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..server import Emulator

IMAGE = "projects/debian-cloud/global/images/family/debian-12"


def emulated_cluster(
    emu: Emulator,
    name: str,
    nodes: int = 4,
    *,
    machine_type: str = "a3-highgpu-8g",
    project: str = "metrics-test",
    zone: str = "us-central1-a",
    running_minutes: float = 20.0,
    busy: bool = True,
) -> list[dict]:
    """`nodes` VMs NAME-0..N-1 labelled gcpgpu-cluster=NAME, gcpgpu-rank=N, RUNNING for `running_minutes`.

    busy: a job has run on every node all that time (recorded as the job agent records one), so GPUs
    and NICs are busy; False leaves the cluster idle, as a fresh one with no job is.
    """
    region = zone.rsplit("-", 1)[0]
    gpu = emu.world.machine_types[machine_type].gpu
    for metric in ("CPUS", "INSTANCES", *([emu.world.gpus[gpu]["quota_metric"]] if gpu else [])):
        emu.faults.set_quota(region, metric, 1e9)
    emu.faults.set_quota("global", "GPUS_ALL_REGIONS", 1e9)
    made: list[dict] = []
    for rank in range(nodes):
        body = {
            "name": f"{name}-{rank}",
            "machineType": f"zones/{zone}/machineTypes/{machine_type}",
            "disks": [{"boot": True, "autoDelete": True, "initializeParams": {"sourceImage": IMAGE}}],
            "networkInterfaces": [{"network": "global/networks/default"}],
            "scheduling": {"onHostMaintenance": "TERMINATE", "automaticRestart": False},
            "labels": {"gcpgpu-cluster": name, "gcpgpu-rank": str(rank), "gcpgpu-managed": "true"},
        }
        emu.compute.insert_instance(project, zone, body)
    began = emu.clock.now() - running_minutes * 60
    for rank in range(nodes):
        made.append(emu.compute.backdate(project, zone, f"{name}-{rank}", began))
    if busy:
        for inst in made:
            emu.activity.begin(inst["id"], f"cluster/{project}/{name}-job/{inst['name']}", at=began)
    return made


NIC_METRIC = "custom.googleapis.com/gcpgpu/nic/"  # what gcpgpu.node.nics writes (fakes/ imports nothing of the tool)


def emulated_nics(emu: Emulator, name: str, nodes: int = 4, *, machine_type: str = "a3-highgpu-8g",
                  project: str = "metrics-test", zone: str = "us-central1-a", minutes: float = 10.0,
                  every_s: float = 30.0, gbps_per_nic: float = 40.0, slow: dict[str, float] | None = None) -> int:
    """Seed what every node's NIC sampler would have written for the last `minutes` (each NIC's rates every
    `every_s`, labels node, nic, role), as a cluster of `nodes` NAME-N nodes in training would: benchmarks and
    big-cluster tests that cannot run 1,024 samplers. `slow`: {node: share} runs that node's first fabric NIC at
    that share of its peers. Returns the number of series written."""
    from ..guest.nics import nic_set

    nics = nic_set(machine_type)
    now = emu.clock.now()
    times = [now - k * every_s for k in range(int(minutes * 60 / every_s), -1, -1)]
    count = 0
    for rank in range(nodes):
        node = f"{name}-{rank}"
        resource = {"project_id": project, "location": zone, "namespace": "gcpgpu-cluster", "job": name,
                    "task_id": node}
        first_fabric = True
        for nic in nics:
            share = 1.0
            if nic.role == "fabric" and first_fabric:
                share, first_fabric = (slow or {}).get(node, 1.0), False
            rate = gbps_per_nic * 1e9 / 8 * share if nic.role == "fabric" or len(nics) == 1 else 2e3
            values = {"sent_bytes_per_s": rate, "recv_bytes_per_s": rate * 0.98, "errors_per_s": 0.0,
                      "link_gbps": nic.gbps}
            if nic.rdma:
                values.update(cnp_per_s=0.0 if share == 1.0 else 50.0, retrans_per_s=0.0 if share == 1.0 else 20.0)
            for key, value in values.items():
                emu.monitoring.write_points(project, NIC_METRIC + key, [(t, t, value) for t in times],
                                            metric_labels={"node": node, "nic": nic.name, "role": nic.role},
                                            resource_type="generic_task", resource_labels=resource)
                count += 1
        emu.monitoring.write_points(project, NIC_METRIC + "retrans_per_s", [(t, t, 0.0) for t in times],
                                    metric_labels={"node": node, "nic": "tcp", "role": "tcp"},
                                    resource_type="generic_task", resource_labels=resource)
        count += 1
    return count
