"""Quotas consumed and released, QUOTA_EXCEEDED and stockouts inside the operation, injected
429/503 errors (deterministic under a seed) and added latency."""

from __future__ import annotations

import time

import pytest
from google.api_core import exceptions

from gcpgpu.fakes.core import Faults
from gcpgpu.fakes.server import Emulator

from .builders import CPU_TYPE, FAST_POLL, GPU_TYPE, PROJECT, REGION, ZONE, gpu_vm, insert, quota, vm


def test_quota_is_consumed_and_released(gcp: Emulator, compute, instances) -> None:
    regions = compute("RegionsClient")
    info = gcp.world.machine_types[GPU_TYPE]
    before = regions.get(project=PROJECT, region=REGION)
    assert quota(before, "CPUS")[0] == 0 and quota(before, "NVIDIA_A100_GPUS")[0] == 0
    insert(instances, gpu_vm("q-0"))
    insert(instances, gpu_vm("q-1"))
    insert(instances, vm("q-cpu"))
    during = regions.get(project=PROJECT, region=REGION)
    assert quota(during, "CPUS")[0] == 2 * info.vcpus + gcp.world.machine_types[CPU_TYPE].vcpus
    assert quota(during, "NVIDIA_A100_GPUS")[0] == 2 * info.gpu_count
    assert quota(during, "INSTANCES")[0] == 3
    gpus_all = next(q for q in compute("ProjectsClient").get(project=PROJECT).quotas if q.metric == "GPUS_ALL_REGIONS")
    assert gpus_all.usage == 2 * info.gpu_count
    other = regions.get(project=PROJECT, region="us-east4")
    assert quota(other, "CPUS")[0] == 0  # quota is regional
    for name in ("q-0", "q-1", "q-cpu"):
        instances.delete(project=PROJECT, zone=ZONE, instance=name).result()
    after = regions.get(project=PROJECT, region=REGION)
    assert quota(after, "CPUS")[0] == 0 and quota(after, "NVIDIA_A100_GPUS")[0] == 0
    assert quota(after, "INSTANCES")[0] == 0


def test_quota_exceeded_inside_the_operation(gcp: Emulator, compute, instances) -> None:
    gcp.faults.set_quota(REGION, "NVIDIA_A100_GPUS", 2)
    insert(instances, gpu_vm("g-0"))
    insert(instances, gpu_vm("g-1"))
    op = instances.insert(project=PROJECT, zone=ZONE, instance_resource=gpu_vm("g-2"))  # the call itself succeeds
    with pytest.raises(exceptions.Forbidden) as e:
        op.result(polling=FAST_POLL)
    err = e.value.errors[0]
    assert err.code == "QUOTA_EXCEEDED"
    assert "NVIDIA_A100_GPUS" in err.message and REGION in err.message
    assert err.error_details[0].error_info.reason == "QUOTA_EXCEEDED"
    assert err.error_details[1].quota_info.limit_name == "NVIDIA_A100_GPUS"
    assert op.http_error_status_code == 403
    with pytest.raises(exceptions.NotFound):
        instances.get(project=PROJECT, zone=ZONE, instance="g-2")
    # Another region has its own quota.
    insert(instances, gpu_vm("g-east", zone="us-east4-a"), zone="us-east4-a")


def test_cpu_quota_too(gcp: Emulator, instances) -> None:
    gcp.faults.set_quota(REGION, "CPUS", gcp.world.machine_types[CPU_TYPE].vcpus)
    insert(instances, vm("c-0"))
    with pytest.raises(exceptions.Forbidden) as e:
        insert(instances, vm("c-1"))
    assert e.value.errors[0].code == "QUOTA_EXCEEDED" and "CPUS" in e.value.errors[0].message


def test_global_gpu_quota_spans_regions(gcp: Emulator, instances) -> None:
    gcp.faults.set_quota("global", "GPUS_ALL_REGIONS", 1)
    insert(instances, gpu_vm("first"))
    with pytest.raises(exceptions.Forbidden) as e:
        insert(instances, gpu_vm("second", zone="us-east4-a"), zone="us-east4-a")
    assert "GPUS_ALL_REGIONS" in e.value.errors[0].message


def test_spot_vms_use_the_preemptible_quota(gcp: Emulator, compute, instances) -> None:
    gcp.faults.set_quota(REGION, "NVIDIA_A100_GPUS", 0)
    insert(instances, gpu_vm("spot-0", provisioning_model="SPOT"))
    r = compute("RegionsClient").get(project=PROJECT, region=REGION)
    assert quota(r, "PREEMPTIBLE_NVIDIA_A100_GPUS")[0] == 1 and quota(r, "NVIDIA_A100_GPUS")[0] == 0
    got = instances.get(project=PROJECT, zone=ZONE, instance="spot-0")
    assert got.scheduling.provisioning_model == "SPOT" and got.scheduling.automatic_restart is False


def test_stockout_inside_the_operation(gcp: Emulator, instances) -> None:
    gcp.faults.stockout(ZONE, GPU_TYPE)
    op = instances.insert(project=PROJECT, zone=ZONE, instance_resource=gpu_vm("no-room"))
    with pytest.raises(exceptions.ServiceUnavailable) as e:
        op.result(polling=FAST_POLL)
    assert e.value.errors[0].code == "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS"
    assert ZONE in e.value.errors[0].message
    with pytest.raises(exceptions.NotFound):
        instances.get(project=PROJECT, zone=ZONE, instance="no-room")
    # The stockout is for that machine type in that zone only.
    insert(instances, gpu_vm("elsewhere", zone="us-central1-b"), zone="us-central1-b")
    insert(instances, gpu_vm("bigger", "a2-highgpu-2g"))


def test_limited_capacity_runs_out(gcp: Emulator, instances) -> None:
    gcp.faults.set_capacity(ZONE, GPU_TYPE, 2)
    insert(instances, gpu_vm("cap-0"))
    insert(instances, gpu_vm("cap-1"))
    with pytest.raises(exceptions.ServiceUnavailable):
        insert(instances, gpu_vm("cap-2"))
    assert gcp.faults.capacity[ZONE][GPU_TYPE] == 0


def _insert_outcomes(instances, n: int) -> list[str]:
    out = []
    for i in range(n):
        try:
            instances.insert(project=PROJECT, zone=ZONE, instance_resource=vm(f"flaky-{i}"))
            out.append("ok")
        except exceptions.TooManyRequests:
            out.append("429")
        except exceptions.ServiceUnavailable:
            out.append("503")
    return out


def test_error_rate_is_deterministic_under_a_seed(gcp: Emulator, instances) -> None:
    gcp.faults.update({"error_rate": 0.5, "error_codes": [503, 429], "seed": 7})
    first = _insert_outcomes(instances, 30)
    assert {"ok", "429", "503"} <= set(first)
    # Failed requests never reached the backend: only the successful inserts made VMs.
    assert len(list(instances.list(project=PROJECT, zone=ZONE))) == first.count("ok")
    gcp.reset()
    gcp.faults.update({"error_rate": 0.5, "error_codes": [503, 429], "seed": 7})
    assert _insert_outcomes(instances, 30) == first
    gcp.reset()
    gcp.faults.update({"error_rate": 0.5, "error_codes": [503, 429], "seed": 8})
    assert _insert_outcomes(instances, 30) != first


def test_injected_errors_carry_google_reasons(gcp: Emulator, instances) -> None:
    gcp.faults.update({"error_rate": 1.0, "error_codes": [429]})
    with pytest.raises(exceptions.TooManyRequests) as e:
        instances.insert(project=PROJECT, zone=ZONE, instance_resource=vm("limited"))
    assert e.value.errors[0]["reason"] == "rateLimitExceeded"
    assert gcp.requests.all()[-1].status == 429


def test_reads_are_retried_by_the_client(gcp: Emulator, compute) -> None:
    # compute_v1 retries GETs on 503 by itself; injected failures on reads show that retry working.
    gcp.faults.update({"error_rate": 0.5, "error_codes": [503], "error_methods": ["GET"], "seed": 3})
    zones = compute("ZonesClient")
    for _ in range(5):
        assert zones.get(project=PROJECT, zone=ZONE).name == ZONE
    statuses = [r.status for r in gcp.requests.all()]
    assert 503 in statuses and statuses.count(200) == 5


def test_added_latency(gcp: Emulator, compute) -> None:
    zones = compute("ZonesClient")
    zones.get(project=PROJECT, zone=ZONE)
    gcp.faults.latency_ms = 80
    t0 = time.monotonic()
    zones.get(project=PROJECT, zone=ZONE)
    assert time.monotonic() - t0 >= 0.08
    assert gcp.requests.all()[-1].seconds >= 0.08


def test_faults_round_trip_and_refuse_unknown_settings() -> None:
    f = Faults(error_rate=0.1, latency_ms=5, seed=3)
    f.stockout("us-east4-a", "a3-highgpu-8g")
    assert Faults.from_dict(f.to_dict()).to_dict() == f.to_dict()
    with pytest.raises(ValueError, match="unknown fault setting"):
        Faults.from_dict({"error_rat": 0.1})
