"""The emulator's DashboardsService, through the real google-cloud-monitoring-dashboards client over gRPC."""

from __future__ import annotations

import pytest
from google.api_core import exceptions
from google.cloud import monitoring_dashboard_v1 as dash

from gcpgpu.gcp.clients import Clients

PARENT = "projects/dash-test"


@pytest.fixture
def client(gcp):
    return Clients(emulator=gcp.address, project="dash-test").dashboards()


def board(title="Training", flt='metric.type = "agent.googleapis.com/gpu/utilization"', **kw):
    return dash.Dashboard.from_json(__import__("json").dumps({
        "displayName": title,
        "mosaicLayout": {"columns": 12, "tiles": [{"width": 6, "height": 4, "widget": {
            "title": "GPU", "xyChart": {"dataSets": [{"timeSeriesQuery": {"timeSeriesFilter": {
                "filter": flt, "aggregation": {"alignmentPeriod": "60s", "perSeriesAligner": "ALIGN_MEAN"}}}}]}}}]},
        **kw,
    }))


def test_create_get_list_update_delete(client, gcp):
    made = client.create_dashboard(parent=PARENT, dashboard=board(labels={"team": "ml"}))
    assert made.name.startswith(f"{PARENT}/dashboards/") and made.etag
    got = client.get_dashboard(name=made.name)
    assert got.display_name == "Training" and dict(got.labels) == {"team": "ml"}
    assert got.mosaic_layout.tiles[0].widget.xy_chart.data_sets[0].time_series_query.time_series_filter.filter
    got.display_name = "Training v2"
    updated = client.update_dashboard(request={"dashboard": got})
    assert updated.display_name == "Training v2" and updated.etag != made.etag
    stale = client.get_dashboard(name=made.name)
    stale.etag = made.etag
    with pytest.raises(exceptions.Aborted, match="etag"):
        client.update_dashboard(request={"dashboard": stale})
    client.delete_dashboard(name=made.name)
    with pytest.raises(exceptions.NotFound):
        client.get_dashboard(name=made.name)
    with pytest.raises(exceptions.NotFound):
        client.delete_dashboard(name=made.name)
    assert {r.path.rsplit("/", 1)[1] for r in gcp.requests.all(api="dashboards")} == {
        "CreateDashboard", "GetDashboard", "UpdateDashboard", "DeleteDashboard"}


def test_list_pages_through_many(client):
    for i in range(7):
        client.create_dashboard(parent=PARENT, dashboard=board(f"d{i}"))
    pager = client.list_dashboards(request={"parent": PARENT, "page_size": 3})
    assert sorted(d.display_name for d in pager) == [f"d{i}" for i in range(7)]
    assert list(client.list_dashboards(parent="projects/other")) == []


def test_a_given_dashboard_id_is_kept_and_cannot_be_taken_twice(client):
    made = client.create_dashboard(parent=PARENT, dashboard=board(name=f"{PARENT}/dashboards/mine"))
    assert made.name == f"{PARENT}/dashboards/mine"
    with pytest.raises(exceptions.AlreadyExists):
        client.create_dashboard(parent=PARENT, dashboard=board(name=f"{PARENT}/dashboards/mine"))


@pytest.mark.parametrize("bad, words", [
    (dash.Dashboard(mosaic_layout={"columns": 12}), "displayName is required"),
    (dash.Dashboard(display_name="x"), "exactly one layout"),
    (board(flt='metric.type = "x" AND'), "filter"),
])
def test_invalid_dashboards_are_refused(client, bad, words):
    with pytest.raises(exceptions.InvalidArgument, match=words):
        client.create_dashboard(parent=PARENT, dashboard=bad)


def test_validate_only_stores_nothing(client):
    client.create_dashboard(request={"parent": PARENT, "dashboard": board(), "validate_only": True})
    assert list(client.list_dashboards(parent=PARENT)) == []
