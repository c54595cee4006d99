"""A CustomJob checked as the real service checks it, before a job exists.

Pool 0 has exactly one replica, every pool a machine and an image, accelerator type and count that
fit the machine type, reservations only with the standard strategy, gs:// output directories;
anything else is refused with INVALID_ARGUMENT naming every bad field at once.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import yaml

from .errors import invalid_argument

STRATEGIES = ("STRATEGY_UNSPECIFIED", "ON_DEMAND", "LOW_COST", "STANDARD", "SPOT", "FLEX_START")
RESERVATION_KEY = "compute.googleapis.com/reservation-name"
# N1 machines take these GPUs, 1, 2, 4 or 8 of them; A2/A3/A4/G2 come with theirs (from the catalog).
N1_ACCELERATORS = ("NVIDIA_TESLA_K80", "NVIDIA_TESLA_P100", "NVIDIA_TESLA_V100", "NVIDIA_TESLA_P4", "NVIDIA_TESLA_T4")
CPU_MACHINE = re.compile(r"^(n1|n2|n2d|n4|e2|c2|c2d|c3|m1)-(standard|highmem|highcpu|ultramem|megamem)-\d+$")
MAX_POOLS = 4


@dataclass(frozen=True)
class GpuMachine:
    name: str
    vertex_accelerator: str | None  # None: Vertex AI does not offer this machine type
    gpu_count: int


@cache
def gpu_machines() -> dict[str, GpuMachine]:
    """GPU machine types and their Vertex accelerator, read from the catalog data (not the tool's code)."""
    raw = yaml.safe_load(resources.files("gcpgpu").joinpath("data/machines.yaml").read_text())
    out = {}
    for name, entry in raw["machine_types"].items():
        family = raw["families"].get(entry["family"], {})
        offered = entry.get("vertex", family.get("vertex", True))
        accel = raw["gpus"][entry["gpu"]].get("vertex_accelerator") if offered else None
        out[name] = GpuMachine(name, accel, int(entry["gpu_count"]))
    return out



def _seconds(value: Any, field: str, problems: list[tuple[str, str]]) -> float | None:
    """A google.protobuf.Duration in JSON ("3600s", "1.5s") as seconds."""
    if value in (None, ""):
        return None
    match = re.fullmatch(r"(\d+(?:\.\d{1,9})?)s", str(value))
    if not match:
        problems.append((field, f"Invalid duration {value!r}; expected a number of seconds like \"3600s\"."))
        return None
    return float(match.group(1))



def validate(job: dict, location: str, regions: dict[str, list[str]]) -> None:
    """Refuse a CustomJob the real service would refuse (INVALID_ARGUMENT naming every bad field)."""
    problems: list[tuple[str, str]] = []
    name = job.get("displayName") or ""
    if not name:
        problems.append(("custom_job.display_name", "Required field is not set."))
    elif len(name) > 128:
        problems.append(("custom_job.display_name", "Display name must be at most 128 characters."))
    spec = job.get("jobSpec") or {}
    pools = spec.get("workerPoolSpecs") or []
    if not pools:
        problems.append(("custom_job.job_spec.worker_pool_specs", "At least one worker pool spec is required."))
    if len(pools) > MAX_POOLS:
        problems.append(("custom_job.job_spec.worker_pool_specs", f"At most {MAX_POOLS} worker pools are allowed."))
    for i, pool in enumerate(pools):
        _check_pool(i, pool or {}, location, regions, problems)
    sched = spec.get("scheduling") or {}
    strategy = sched.get("strategy") or "STRATEGY_UNSPECIFIED"
    if strategy not in STRATEGIES:
        problems.append(("custom_job.job_spec.scheduling.strategy", f"Unknown strategy {strategy!r}."))
    _seconds(sched.get("timeout"), "custom_job.job_spec.scheduling.timeout", problems)
    wait = _seconds(sched.get("maxWaitDuration"), "custom_job.job_spec.scheduling.max_wait_duration", problems)
    if wait is not None and strategy != "FLEX_START":
        problems.append(("custom_job.job_spec.scheduling.max_wait_duration",
                         "max_wait_duration is only supported with the FLEX_START strategy."))
    if strategy in ("SPOT", "FLEX_START"):
        for i, pool in enumerate(pools):
            aff = ((pool or {}).get("machineSpec") or {}).get("reservationAffinity") or {}
            if aff.get("reservationAffinityType") in ("ANY_RESERVATION", "SPECIFIC_RESERVATION"):
                problems.append((f"custom_job.job_spec.worker_pool_specs[{i}].machine_spec.reservation_affinity",
                                 f"Reservations cannot be used with the {strategy} scheduling strategy; use "
                                 "STANDARD or remove the reservation affinity."))
    out = (spec.get("baseOutputDirectory") or {}).get("outputUriPrefix")
    if out is not None and not re.match(r"^gs://[a-z0-9][a-z0-9._-]{1,220}[a-z0-9](/.*)?$", out):
        problems.append(("custom_job.job_spec.base_output_directory.output_uri_prefix",
                         f"{out!r} is not a Cloud Storage URI (gs://BUCKET/PATH)."))
    for key, value in (job.get("labels") or {}).items():
        if not re.match(r"^[a-z][a-z0-9_-]{0,62}$", key) or not re.match(r"^[a-z0-9_-]{0,63}$", str(value)):
            problems.append((f"custom_job.labels[{key}]", "Label keys and values must be lowercase letters, "
                                                          "digits, '_' or '-', at most 63 characters."))
    if problems:
        raise invalid_argument(problems)


def _check_pool(i: int, pool: dict, location: str, regions: dict[str, list[str]],
                problems: list[tuple[str, str]]) -> None:
    field = f"custom_job.job_spec.worker_pool_specs[{i}]"
    empty = not pool.get("machineSpec") and not pool.get("containerSpec") and not pool.get("pythonPackageSpec")
    replicas = int(pool.get("replicaCount") or 0)
    if empty and i > 0:
        return  # an empty placeholder pool (e.g. no workers, but a reduction server in pool 2)
    if i == 0 and replicas != 1:
        problems.append((f"{field}.replica_count", f"The first worker pool (the chief) must have exactly 1 "
                                                   f"replica, got {replicas}."))
    elif replicas < 1:
        problems.append((f"{field}.replica_count", "replica_count must be at least 1."))
    machine = pool.get("machineSpec") or {}
    mt = machine.get("machineType") or ""
    if not mt:
        problems.append((f"{field}.machine_spec.machine_type", "Required field is not set."))
    accel = machine.get("acceleratorType") or "ACCELERATOR_TYPE_UNSPECIFIED"
    count = int(machine.get("acceleratorCount") or 0)
    if mt:
        _check_accelerator(f"{field}.machine_spec", mt, accel, count, problems)
    aff = machine.get("reservationAffinity") or {}
    kind = aff.get("reservationAffinityType") or "TYPE_UNSPECIFIED"
    if kind == "SPECIFIC_RESERVATION":
        values = list(aff.get("values") or [])
        if aff.get("key") != RESERVATION_KEY:
            problems.append((f"{field}.machine_spec.reservation_affinity.key",
                             f"Must be {RESERVATION_KEY!r} for SPECIFIC_RESERVATION."))
        if len(values) != 1:
            problems.append((f"{field}.machine_spec.reservation_affinity.values",
                             "Exactly one reservation name is required for SPECIFIC_RESERVATION."))
        for value in values:
            match = re.fullmatch(r"projects/[^/]+/zones/([a-z0-9-]+)/reservations/[a-z]([-a-z0-9]*[a-z0-9])?", value)
            if not match:
                problems.append((f"{field}.machine_spec.reservation_affinity.values",
                                 f"{value!r} is not a full reservation name "
                                 "(projects/PROJECT/zones/ZONE/reservations/NAME)."))
            elif match.group(1) not in regions.get(location, []):
                problems.append((f"{field}.machine_spec.reservation_affinity.values",
                                 f"Reservation zone {match.group(1)} is not in the job's region {location}."))
    elif kind in ("ANY_RESERVATION", "NO_RESERVATION") and (aff.get("key") or aff.get("values")):
        problems.append((f"{field}.machine_spec.reservation_affinity",
                         f"key and values are only allowed with SPECIFIC_RESERVATION, not {kind}."))
    container = pool.get("containerSpec")
    package = pool.get("pythonPackageSpec")
    if not container and not package:
        problems.append((f"{field}.container_spec", "One of container_spec or python_package_spec is required."))
    elif container:
        image = container.get("imageUri") or ""
        if not image:
            problems.append((f"{field}.container_spec.image_uri", "Required field is not set."))
        elif re.search(r"\s", image):
            problems.append((f"{field}.container_spec.image_uri", f"{image!r} is not a container image URI."))
        for j, env in enumerate(container.get("env") or []):
            if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", env.get("name") or ""):
                problems.append((f"{field}.container_spec.env[{j}].name",
                                 f"{env.get('name')!r} is not a valid environment variable name."))


def _check_accelerator(field: str, mt: str, accel: str, count: int, problems: list[tuple[str, str]]) -> None:
    gpu = gpu_machines().get(mt)
    unspecified = accel == "ACCELERATOR_TYPE_UNSPECIFIED"
    if gpu is not None:
        if gpu.vertex_accelerator is None:
            problems.append((f"{field}.machine_type", f"Machine type \"{mt}\" is not supported by Vertex AI training."))
        elif unspecified or accel != gpu.vertex_accelerator or count != gpu.gpu_count:
            shown = "none" if unspecified else f"\"{accel}\" with count {count}"
            problems.append((f"{field}.accelerator_type",
                             f"Accelerator {shown} is not supported for machine type \"{mt}\"; it takes "
                             f"\"{gpu.vertex_accelerator}\" with accelerator_count {gpu.gpu_count}."))
        return
    if not CPU_MACHINE.match(mt):
        problems.append((f"{field}.machine_type", f"Machine type \"{mt}\" is not supported."))
        return
    if unspecified:
        if count:
            problems.append((f"{field}.accelerator_type", "accelerator_count is set but accelerator_type is not."))
        return
    if not mt.startswith("n1-") or accel not in N1_ACCELERATORS:
        problems.append((f"{field}.accelerator_type",
                         f"Accelerator \"{accel}\" is not supported for machine type \"{mt}\"."))
    elif count not in (1, 2, 4, 8):
        problems.append((f"{field}.accelerator_count",
                         f"Accelerator count {count} is not supported for \"{accel}\"; use 1, 2, 4 or 8."))

