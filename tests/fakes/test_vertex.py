"""The emulator's Vertex AI JobService through the real aiplatform_v1 client, over gRPC and REST.

Jobs here run images the emulator cannot run, so they are simulated (no processes): fast, and
driven through their states with the emulator's clock.
"""

from __future__ import annotations

import pytest
from google.api_core import exceptions
from google.cloud import aiplatform_v1 as aip

from gcpgpu.fakes.server import Emulator
from gcpgpu.gcp.clients import Clients

PROJECT = "test-proj"
PARENT = f"projects/{PROJECT}/locations/us-central1"


@pytest.fixture(params=["grpc", "rest"])
def jobs(request, gcp: Emulator) -> aip.JobServiceClient:
    return Clients(emulator=gcp.address, project=PROJECT).job_service("us-central1", request.param)


def pool(replicas: int = 1, machine: str = "a2-highgpu-8g", accel: str = "NVIDIA_TESLA_A100", count: int = 8,
         image: str = "us-docker.pkg.dev/p/r/other-trainer:1", **machine_extra) -> aip.WorkerPoolSpec:
    return aip.WorkerPoolSpec(
        replica_count=replicas,
        machine_spec=aip.MachineSpec(machine_type=machine, accelerator_type=accel, accelerator_count=count, **machine_extra),
        container_spec=aip.ContainerSpec(image_uri=image, args=["--steps", "1"]))


def custom_job(name: str = "job", pools: list | None = None, labels: dict | None = None, **spec) -> aip.CustomJob:
    return aip.CustomJob(display_name=name, labels=labels or {},
                         job_spec=aip.CustomJobSpec(worker_pool_specs=pools or [pool()], **spec))


def violations(exc: exceptions.GoogleAPICallError) -> list[str]:
    """Field names of the BadRequest details, whichever transport brought them."""
    out = []
    for detail in exc.details or []:
        if isinstance(detail, dict):
            out += [v["field"] for v in detail.get("fieldViolations", [])]
        else:
            out += [v.field for v in getattr(detail, "field_violations", [])]
    return out


def test_create_get_and_the_state_machine(gcp, jobs):
    gcp.clock.freeze()
    created = jobs.create_custom_job(parent=PARENT, custom_job=custom_job("sim", [pool(), pool(replicas=3)]))
    assert created.name.startswith("projects/") and "/locations/us-central1/customJobs/" in created.name
    assert created.state == aip.JobState.JOB_STATE_QUEUED
    assert created.labels["gcpgpu-emulator"] == "simulated"  # it says it will not really run
    seen = [created.state.name]
    for _ in range(4):
        gcp.clock.advance(2.0)
        seen.append(jobs.get_custom_job(name=created.name).state.name)
    assert seen[0] == "JOB_STATE_QUEUED" and "JOB_STATE_RUNNING" in seen and seen[-1] == "JOB_STATE_SUCCEEDED"
    done = jobs.get_custom_job(name=created.name)
    assert done.start_time and done.end_time and done.end_time >= done.start_time
    assert done.job_spec.worker_pool_specs[1].replica_count == 3
    # The project id in a name works as well as the number the service answers with.
    job_id = created.name.rsplit("/", 1)[1]
    assert jobs.get_custom_job(name=f"{PARENT}/customJobs/{job_id}").name == created.name


def test_validation_as_the_service_does_it(gcp, jobs):
    bad = custom_job("bad", [pool(replicas=2, accel="NVIDIA_TESLA_T4", count=1), pool(image="")])
    with pytest.raises(exceptions.BadRequest) as e:  # InvalidArgument over gRPC, a 400 over REST
        jobs.create_custom_job(parent=PARENT, custom_job=bad)
    fields = violations(e.value)
    assert "custom_job.job_spec.worker_pool_specs[0].replica_count" in fields
    assert "custom_job.job_spec.worker_pool_specs[0].machine_spec.accelerator_type" in fields
    assert "custom_job.job_spec.worker_pool_specs[1].container_spec.image_uri" in fields
    assert "NVIDIA_TESLA_A100" in e.value.message  # says what would be right

    reserved = pool(reservation_affinity=aip.ReservationAffinity(
        reservation_affinity_type="SPECIFIC_RESERVATION", key="compute.googleapis.com/reservation-name",
        values=[f"projects/{PROJECT}/zones/us-central1-a/reservations/r"]))
    with pytest.raises(exceptions.BadRequest, match="cannot be used with the SPOT"):
        jobs.create_custom_job(parent=PARENT, custom_job=custom_job(
            "spot", [reserved], scheduling=aip.Scheduling(strategy="SPOT")))
    with pytest.raises(exceptions.BadRequest, match="does not exist"):  # checked against the Compute emulator
        jobs.create_custom_job(parent=PARENT, custom_job=custom_job("res", [reserved]))
    with pytest.raises(exceptions.BadRequest, match="display_name"):
        jobs.create_custom_job(parent=PARENT, custom_job=custom_job(""))
    with pytest.raises(exceptions.BadRequest, match="not supported by Vertex AI"):
        jobs.create_custom_job(parent=PARENT, custom_job=custom_job(pools=[pool(machine="a3-edgegpu-8g",
                                                                                accel="NVIDIA_H100_80GB")]))
    with pytest.raises(exceptions.BadRequest, match="max_wait_duration"):
        jobs.create_custom_job(parent=PARENT, custom_job=custom_job(
            scheduling=aip.Scheduling(strategy="STANDARD", max_wait_duration={"seconds": 60})))
    assert list(jobs.list_custom_jobs(parent=PARENT)) == []  # nothing half-created


def test_list_pages_and_filters(gcp, jobs):
    gcp.clock.freeze()
    names = []
    for i in range(5):
        names.append(jobs.create_custom_job(parent=PARENT, custom_job=custom_job(f"exp-{i}", labels={"team": "a" if i % 2 else "b"})).name)
        gcp.clock.advance(0.01)
    gcp.clock.advance(10)  # all SUCCEEDED
    fresh = jobs.create_custom_job(parent=PARENT, custom_job=custom_job("late")).name

    pager = jobs.list_custom_jobs(request={"parent": PARENT, "page_size": 2})
    pages = list(pager.pages)
    assert [len(p.custom_jobs) for p in pages] == [2, 2, 2]
    listed = [j.name for p in pages for j in p.custom_jobs]
    assert listed == [fresh, *reversed(names)]  # newest first

    def names_for(flt: str) -> list[str]:
        return [j.display_name for j in jobs.list_custom_jobs(request={"parent": PARENT, "filter": flt})]

    assert names_for('state="JOB_STATE_QUEUED"') == ["late"]
    assert names_for("state!=JOB_STATE_SUCCEEDED") == ["late"]
    assert names_for('display_name="exp-3"') == ["exp-3"]
    assert names_for('display_name:"exp-*" AND labels.team="a"') == ["exp-3", "exp-1"]
    assert names_for('NOT display_name:"exp" OR labels.team=b') == ["late", "exp-4", "exp-2", "exp-0"]
    assert names_for('labels.team:*') == ["exp-4", "exp-3", "exp-2", "exp-1", "exp-0"]
    assert names_for('create_time>"2000-01-01T00:00:00Z"')[0] == "late"
    with pytest.raises(exceptions.BadRequest, match="unsupported field"):
        names_for('machine_type="a2"')
    with pytest.raises(exceptions.BadRequest):
        names_for('state="RUNNING"')  # not a JobState name


def test_cancel_and_delete_with_its_operation(gcp, jobs):
    gcp.vertex.timings.update(cancel_s=0.0, delete_s=0.0)
    job = jobs.create_custom_job(parent=PARENT, custom_job=custom_job("to-cancel"))
    with pytest.raises(exceptions.BadRequest, match="cancel it first"):  # FAILED_PRECONDITION (400 over REST)
        jobs.delete_custom_job(name=job.name)
    jobs.cancel_custom_job(name=job.name)
    cancelled = jobs.get_custom_job(name=job.name)
    assert cancelled.state == aip.JobState.JOB_STATE_CANCELLED and cancelled.error.code == 1
    with pytest.raises(exceptions.BadRequest):  # FAILED_PRECONDITION: already ended
        jobs.cancel_custom_job(name=job.name)
    operation = jobs.delete_custom_job(name=job.name)
    operation.result(timeout=10)  # polls google.longrunning.Operations.GetOperation
    assert "/operations/" in operation.operation.name
    with pytest.raises(exceptions.NotFound):
        jobs.get_custom_job(name=job.name)
    assert list(jobs.list_custom_jobs(parent=PARENT)) == []


def test_unknown_job_and_location(gcp, jobs):
    with pytest.raises(exceptions.NotFound):
        jobs.get_custom_job(name=f"{PARENT}/customJobs/42")
    with pytest.raises(exceptions.BadRequest, match="Location"):
        jobs.create_custom_job(parent=f"projects/{PROJECT}/locations/mars-north1", custom_job=custom_job())


def test_requests_are_logged_and_faults_apply(gcp, jobs):
    jobs.list_custom_jobs(parent=PARENT)
    assert gcp.requests.all(api="aiplatform") or gcp.requests.all(contains="/customJobs")
    gcp.faults.update({"error_rate": 1.0, "error_codes": [503]})
    with pytest.raises(exceptions.ServiceUnavailable):
        jobs.create_custom_job(parent=PARENT, custom_job=custom_job(), retry=None)
