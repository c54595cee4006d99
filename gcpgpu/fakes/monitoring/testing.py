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
