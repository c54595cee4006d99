"""Cloud Monitoring over REST, through googleapiclient's own discovery documents (monitoring v3 and v1).

The emulator answers at http://127.0.0.1:PORT/monitoring/ (the root URL a client is pointed at);
what one transport writes the other reads, as with the real service.
"""

from __future__ import annotations

import time

import pytest
from google.auth.credentials import AnonymousCredentials
from googleapiclient.discovery import build
from googleapiclient.errors import HttpError

from gcpgpu.fakes.core import proto_timestamp
from gcpgpu.fakes.monitoring.catalog import BUILTIN, COMPUTE
from gcpgpu.fakes.monitoring.testing import emulated_cluster

PROJECT = "rest-project"
NAME = f"projects/{PROJECT}"
CPU = "compute.googleapis.com/instance/cpu/utilization"


def service(gcp, version: str):
    return build("monitoring", version, credentials=AnonymousCredentials(), static_discovery=True,
                 client_options={"api_endpoint": f"http://{gcp.address}/monitoring/"})


@pytest.fixture
def v3(gcp):
    return service(gcp, "v3")


def test_metric_descriptors_list_and_get(v3):
    listed, request = [], v3.projects().metricDescriptors().list(name=NAME, pageSize=20)
    while request is not None:  # googleapiclient's own paging over nextPageToken
        page = request.execute()
        listed += page.get("metricDescriptors", [])
        request = v3.projects().metricDescriptors().list_next(request, page)
    types = {d["type"] for d in listed}
    assert {t for t in BUILTIN if t.startswith(COMPUTE)} <= types
    got = v3.projects().metricDescriptors().get(name=f"{NAME}/metricDescriptors/{CPU}").execute()
    assert got["metricKind"] == "GAUGE" and got["valueType"] == "DOUBLE"
    with pytest.raises(HttpError) as e:
        v3.projects().metricDescriptors().get(name=f"{NAME}/metricDescriptors/custom.googleapis.com/none").execute()
    assert e.value.resp.status == 404


def test_monitored_resource_descriptors(v3):
    listed = v3.projects().monitoredResourceDescriptors().list(name=NAME).execute()["resourceDescriptors"]
    assert "gce_instance" in {d["type"] for d in listed}
    got = v3.projects().monitoredResourceDescriptors().get(name=f"{NAME}/monitoredResourceDescriptors/generic_task").execute()
    assert [label["key"] for label in got["labels"]] == ["project_id", "location", "namespace", "job", "task_id"]


def test_time_series_create_then_list_aggregated(v3, gcp):
    now = time.time()
    body = {"timeSeries": [{
        "metric": {"type": "custom.googleapis.com/rest_metric", "labels": {"k": "v"}},
        "resource": {"type": "global", "labels": {}},  # project_id filled from the request's name
        "points": [{"interval": {"endTime": proto_timestamp(now)}, "value": {"int64Value": "42"}}],
    }]}
    assert v3.projects().timeSeries().create(name=NAME, body=body).execute() == {}
    got = v3.projects().timeSeries().list(
        name=NAME, filter='metric.type = "custom.googleapis.com/rest_metric"',
        interval_startTime=proto_timestamp(now - 300), interval_endTime=proto_timestamp(now + 1)).execute()
    (series,) = got["timeSeries"]
    assert series["resource"] == {"type": "global", "labels": {"project_id": PROJECT}}
    assert series["valueType"] == "INT64" and series["points"][0]["value"] == {"int64Value": "42"}


def test_cpu_utilization_grouped_by_zone_over_rest(v3, gcp):
    emulated_cluster(gcp, "r", 2, project=PROJECT, running_minutes=10, busy=False)
    now = time.time()
    got = v3.projects().timeSeries().list(
        name=NAME, filter=f'metric.type = "{CPU}"', interval_startTime=proto_timestamp(now - 600),
        interval_endTime=proto_timestamp(now), aggregation_alignmentPeriod="600s",
        aggregation_perSeriesAligner="ALIGN_MAX", aggregation_crossSeriesReducer="REDUCE_COUNT",
        aggregation_groupByFields=["resource.zone"]).execute()
    (series,) = got["timeSeries"]
    assert series["resource"]["labels"] == {"zone": "us-central1-a"}
    assert series["points"][0]["value"] == {"int64Value": "2"}  # two VMs counted in their zone


def test_dashboards_v1_create_get_list_delete(gcp):
    v1 = service(gcp, "v1")
    body = {"displayName": "GPUs", "mosaicLayout": {"columns": 12, "tiles": []}}
    made = v1.projects().dashboards().create(parent=NAME, body=body).execute()
    assert made["name"].startswith(f"{NAME}/dashboards/") and made["etag"]
    assert v1.projects().dashboards().get(name=made["name"]).execute()["displayName"] == "GPUs"
    assert [d["name"] for d in v1.projects().dashboards().list(parent=NAME).execute()["dashboards"]] == [made["name"]]
    v1.projects().dashboards().delete(name=made["name"]).execute()
    with pytest.raises(HttpError) as e:
        v1.projects().dashboards().get(name=made["name"]).execute()
    assert e.value.resp.status == 404
