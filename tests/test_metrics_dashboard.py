"""`gcpgpu metrics dashboard create|delete`: one labelled dashboard per cluster, from the Jinja2 template."""

from __future__ import annotations

import json

from click.testing import CliRunner

from gcpgpu.cli import main
from gcpgpu.fakes.monitoring import filters
from gcpgpu.fakes.monitoring.testing import emulated_cluster
from gcpgpu.gcp.clients import Clients
from gcpgpu.metrics.dashboard import dashboard_json
from gcpgpu.metrics.target import resolve

PROJECT = "metrics-test"


def run(*args: str):
    return CliRunner().invoke(main, ["--format", "json", "metrics", "dashboard", *args])


def boards(gcp) -> list:
    return list(Clients(emulator=gcp.address, project=PROJECT).dashboards().list_dashboards(parent=f"projects/{PROJECT}"))


def test_the_template_charts_network_gpu_and_training_for_the_clusters_nodes(gcp):
    vms = emulated_cluster(gcp, "demo", 3)
    target = resolve(Clients(emulator=gcp.address, project=PROJECT), PROJECT, "cluster", "demo")
    body = dashboard_json(target)
    assert body["displayName"] == "gcpgpu cluster demo" and body["labels"] == {"gcpgpu-cluster": "demo"}
    tiles = body["mosaicLayout"]["tiles"]
    titles = [t["widget"]["title"] for t in tiles]
    assert "Network bytes sent per node" in titles and "Network bytes received per node" in titles
    assert "GPU utilization per node (Ops Agent)" in titles and "Training throughput (tokens/s)" in titles
    flts = [t["widget"]["xyChart"]["dataSets"][0]["timeSeriesQuery"]["timeSeriesFilter"] for t in tiles
            if "xyChart" in t["widget"]]
    for f in flts:
        node = filters.parse(f["filter"])  # every chart's filter is one a real user could write
        assert len(filters.equal_literal(node, "metric.type")) == 1
    sent = next(f for f in flts if "sent_bytes_count" in f["filter"])
    assert sent["aggregation"]["perSeriesAligner"] == "ALIGN_RATE"
    assert filters.allowed_values(filters.parse(sent["filter"]), "resource.labels.instance_id") == {v["id"] for v in vms}
    for t in tiles:  # tiles stay inside the 48-column grid
        assert t.get("xPos", 0) + t["width"] <= 48


def test_create_then_create_again_updates_and_delete_removes(gcp, monkeypatch):
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", PROJECT)
    emulated_cluster(gcp, "demo", 2)
    first = run("create", "--cluster", "demo")
    assert first.exit_code == 0, first.output
    made = json.loads(first.stdout)
    assert made["action"] == "created" and made["url"].startswith("https://console.cloud.google.com/monitoring/")
    again = json.loads(run("create", "--cluster", "demo").stdout)
    assert again["action"] == "updated" and again["dashboard"] == made["dashboard"]
    assert [b.display_name for b in boards(gcp)] == ["gcpgpu cluster demo"]
    gone = json.loads(run("delete", "--cluster", "demo").stdout)
    assert gone["deleted"] == [made["dashboard"]] and boards(gcp) == []
    assert json.loads(run("delete", "--cluster", "demo").stdout)["deleted"] == []  # nothing left is fine


def test_delete_leaves_other_clusters_dashboards(gcp, monkeypatch):
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", PROJECT)
    emulated_cluster(gcp, "one", 1)
    emulated_cluster(gcp, "two", 1)
    assert run("create", "--cluster", "one").exit_code == 0
    assert run("create", "--cluster", "two").exit_code == 0
    assert run("delete", "--cluster", "one").exit_code == 0
    assert [b.display_name for b in boards(gcp)] == ["gcpgpu cluster two"]


def test_a_bad_cluster_name_is_refused_before_any_call(gcp, monkeypatch):
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", PROJECT)
    result = run("create", "--cluster", "UPPER")
    assert result.exit_code == 2 and "--cluster 'UPPER' is not a cluster name" in result.output
    assert len(gcp.requests) == 0
