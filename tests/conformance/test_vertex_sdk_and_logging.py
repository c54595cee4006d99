"""The Vertex AI SDK (google-cloud-aiplatform) and Cloud Logging's REST API (googleapiclient), unchanged.

The SDK is pointed at the emulator as at any endpoint: aiplatform.init(api_endpoint=...,
api_transport="rest", credentials=AnonymousCredentials()). The job's image is not the bundled
trainer, so the emulator simulates it (RUNNING, then SUCCEEDED) and logs that it did, as an ml_job
log entry that Logging's entries.list returns.
"""

from __future__ import annotations

import pytest
from google.auth.credentials import AnonymousCredentials
from googleapiclient.discovery import build

PROJECT = "sdk-project"


@pytest.fixture
def aiplatform(gcp):
    from google.cloud import aiplatform

    aiplatform.init(project=PROJECT, location="us-central1", credentials=AnonymousCredentials(),
                    api_endpoint=f"http://{gcp.address}", api_transport="rest", staging_bucket="gs://sdk-bucket")
    gcp.vertex.timings.update(simulated_run_s=0.5)  # the emulator simulates a job that is not its trainer
    yield aiplatform
    from google.cloud.aiplatform import initializer

    initializer.global_config.__init__()  # the SDK's settings are process-wide: forget ours


def test_custom_job_submit_list_wait_and_its_log_entries(aiplatform, gcp):
    job = aiplatform.CustomJob(display_name="sdk-job", worker_pool_specs=[{
        "machine_spec": {"machine_type": "a2-highgpu-1g", "accelerator_type": "NVIDIA_TESLA_A100",
                         "accelerator_count": 1},
        "replica_count": 1,
        "container_spec": {"image_uri": "us-docker.pkg.dev/p/r/other:1", "command": ["sleep", "1"]}}])
    job.submit()
    assert job.resource_name.startswith("projects/") and "/customJobs/" in job.resource_name
    assert [j.display_name for j in aiplatform.CustomJob.list()] == ["sdk-job"]
    job.wait_for_completion()
    assert job.state.name == "JOB_STATE_SUCCEEDED"
    assert aiplatform.CustomJob.get(job.resource_name).display_name == "sdk-job"

    logging = build("logging", "v2", credentials=AnonymousCredentials(), static_discovery=True,
                    client_options={"api_endpoint": f"http://{gcp.address}/"})
    job_id = job.resource_name.rsplit("/", 1)[1]
    got = logging.entries().list(body={
        "resourceNames": [f"projects/{PROJECT}"],
        "filter": f'resource.type = "ml_job" AND resource.labels.job_id = "{job_id}"'}).execute()
    assert got["entries"] and all(e["resource"]["labels"]["job_id"] == job_id for e in got["entries"])
