"""Builders shared by the emulator's tests: request bodies as compute_v1 users write them."""

from __future__ import annotations

from typing import Any

from google.api_core import retry as retries
from google.api_core.future import polling
from google.cloud import compute_v1

from gcpgpu.fakes.server import Emulator

PROJECT = "emu-test-project"
ZONE = "us-central1-a"
REGION = "us-central1"
CPU_TYPE = "e2-standard-4"
GPU_TYPE = "a2-highgpu-1g"  # one A100 40GB, quota metric NVIDIA_A100_GPUS
IMAGE = "projects/debian-cloud/global/images/family/debian-12"

# ExtendedOperation.result() polls every 1 s and up by default; tests with slow operations poll fast.
FAST_POLL = retries.Retry(predicate=polling.POLLING_PREDICATE, initial=0.02, maximum=0.1, multiplier=1.5, timeout=30)


def vm(
    name: str,
    machine_type: str = CPU_TYPE,
    zone: str = ZONE,
    *,
    labels: dict[str, str] | None = None,
    on_host_maintenance: str | None = None,
    provisioning_model: str | None = None,
    resource_policies: list[str] | None = None,
    reservation: str | None = None,
    network: str = "global/networks/default",
    subnetwork: str | None = None,
    guest_accelerators: list[tuple[str, int]] | None = None,
) -> compute_v1.Instance:
    """An Instance body as a user of compute_v1 writes it."""
    scheduling = compute_v1.Scheduling()
    if on_host_maintenance:
        scheduling.on_host_maintenance = on_host_maintenance
    if provisioning_model:
        scheduling.provisioning_model = provisioning_model
    nic = compute_v1.NetworkInterface(network=network)
    if subnetwork:
        nic.subnetwork = subnetwork
    inst = compute_v1.Instance(
        name=name,
        machine_type=f"zones/{zone}/machineTypes/{machine_type}",
        disks=[compute_v1.AttachedDisk(
            boot=True, auto_delete=True,
            initialize_params=compute_v1.AttachedDiskInitializeParams(source_image=IMAGE, disk_size_gb=50),
        )],
        network_interfaces=[nic],
        scheduling=scheduling,
        labels=labels or {},
        resource_policies=resource_policies or [],
    )
    if guest_accelerators:
        inst.guest_accelerators = [
            compute_v1.AcceleratorConfig(accelerator_type=f"zones/{zone}/acceleratorTypes/{t}", accelerator_count=n)
            for t, n in guest_accelerators
        ]
    if reservation:
        inst.reservation_affinity = compute_v1.ReservationAffinity(
            consume_reservation_type="SPECIFIC_RESERVATION",
            key="compute.googleapis.com/reservation-name",
            values=[reservation],
        )
    return inst


def gpu_vm(name: str, machine_type: str = GPU_TYPE, zone: str = ZONE, **kw: Any) -> compute_v1.Instance:
    """A GPU VM as it must be written: no live migration."""
    return vm(name, machine_type, zone, on_host_maintenance="TERMINATE", **kw)


def insert(instances: compute_v1.InstancesClient, body: compute_v1.Instance, zone: str = ZONE, **kw: Any):
    """instances.insert and wait for its operation (raises the operation's error, as real code sees it)."""
    op = instances.insert(project=PROJECT, zone=zone, instance_resource=body, **kw)
    op.result(polling=FAST_POLL)
    return op


def quota(region: compute_v1.Region, metric: str) -> tuple[float, float]:
    """(usage, limit) of one metric in a regions.get answer."""
    q = next(q for q in region.quotas if q.metric == metric)
    return q.usage, q.limit


def zone_without(gcp: Emulator, machine_type: str) -> str:
    """A zone of the emulator's world that does not offer `machine_type`."""
    return next(z for z, offered in gcp.world.zone_machine_types.items() if machine_type not in offered)
