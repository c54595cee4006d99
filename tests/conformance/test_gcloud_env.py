"""gcloud, unchanged, pointed at the emulator by `eval "$(gcpgpu emulator gcloud-env)"`.

Every API the emulator serves over REST gets its api_endpoint_overrides line (compute, aiplatform,
logging, monitoring, storage), so each gcloud group below talks to the emulator and nothing reaches
Google (gcloud storage: tests/conformance/test_storage_clients.py).
Skipped where gcloud is not installed.
"""

from __future__ import annotations

import json
import shutil
import time

import pytest
from click.testing import CliRunner

from gcpgpu.cli import main

pytestmark = pytest.mark.skipif(shutil.which("gcloud") is None, reason="gcloud is not installed")

DASHBOARD = {"displayName": "GPU nodes", "gridLayout": {"widgets": [{"title": "CPU", "xyChart": {"dataSets": [{
    "timeSeriesQuery": {"timeSeriesFilter": {
        "filter": 'metric.type="compute.googleapis.com/instance/cpu/utilization"',
        "aggregation": {"alignmentPeriod": "60s", "perSeriesAligner": "ALIGN_MEAN"}}}}]}}]}}


def test_gcloud_env_names_every_api_the_emulator_serves_that_gcloud_knows(gcp, tmp_path):
    import configparser

    from gcpgpu.cli.emulator import _gcloud_known

    out = CliRunner().invoke(main, ["emulator", "gcloud-env", "--config-dir", str(tmp_path)]).stdout
    assert out == f"export CLOUDSDK_CONFIG={tmp_path}\n"
    written = configparser.ConfigParser(interpolation=None)
    written.read(tmp_path / "configurations" / "config_default")
    known = _gcloud_known("api_endpoint_overrides")
    for api, url in gcp.info()["gcloud_overrides"].items():
        assert written.get("api_endpoint_overrides", api, fallback=None) == (url if known is None or api in known
                                                                            else None), api
    assert {"compute", "aiplatform", "logging", "monitoring", "storage"} <= set(gcp.info()["gcloud_overrides"])
    assert written["api_endpoint_overrides"]["storage"] == f"{gcp.url}/storage/v1/"  # the JSON API's base
    assert written["core"]["project"] and written["auth"]["disable_credentials"] == "true"


def test_gcloud_monitoring_dashboards_create_list_delete(gcloud, gcp, tmp_path):
    config = tmp_path / "dashboard.json"
    config.write_text(json.dumps(DASHBOARD))
    rc, _out, err = gcloud(f"gcloud monitoring dashboards create --config-from-file={config}")
    assert rc == 0, err
    rc, out, err = gcloud("gcloud monitoring dashboards list --format=json")
    assert rc == 0, err
    (listed,) = json.loads(out)
    assert listed["displayName"] == "GPU nodes"
    rc, _out, err = gcloud(f"gcloud monitoring dashboards delete {listed['name']} --quiet")
    assert rc == 0, err
    assert gcp.requests.all(api="monitoring") and not gcp.monitoring.dashboards.get("emulator-project")


def test_gcloud_ai_logging_and_compute_reach_the_emulator(gcloud, gcp):
    for command in ("gcloud ai custom-jobs list --region=us-central1 --format=json",
                    "gcloud logging read 'resource.type=\"gce_instance\"' --limit=5 --format=json",
                    "gcloud compute instances list --format=json"):
        gcp.requests.clear()
        rc, out, err = gcloud(command)
        assert rc == 0, f"{command}: {err}"
        assert json.loads(out) == []
        assert gcp.requests.all(), f"{command} did not reach the emulator"


def test_gcloud_ai_custom_job_create_describe_and_stream_its_logs(gcloud, gcp):
    gcp.vertex.timings.update(simulated_run_s=0.5)  # the emulator simulates a job that is not its trainer
    rc, _out, err = gcloud("gcloud ai custom-jobs create --region=us-central1 --display-name=gjob "
                           "--worker-pool-spec=machine-type=a2-highgpu-1g,accelerator-type=NVIDIA_TESLA_A100,"
                           "accelerator-count=1,replica-count=1,container-image-uri=us-docker.pkg.dev/p/r/other:1")
    assert rc == 0, err
    rc, out, err = gcloud("gcloud ai custom-jobs list --region=us-central1 --format='value(name)'")
    assert rc == 0, err
    (name,) = out.split()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        rc, out, err = gcloud(f"gcloud ai custom-jobs describe {name} --region=us-central1 --format='value(state)'")
        if out.strip() == "JOB_STATE_SUCCEEDED":
            break
    assert rc == 0 and out.strip() == "JOB_STATE_SUCCEEDED", err
    # stream-logs reads Cloud Logging (the logging override). gcloud reads the job once before it starts:
    # for a job that was still running it streams until interrupted, with the real service as here.
    rc, out, err = gcloud(f"gcloud ai custom-jobs stream-logs {name} --region=us-central1 --polling-interval=1")
    assert rc == 0, err
    assert "this job is simulated" in out + err
