"""The emulator's Monitoring REST front end: Google's error shape for requests a client gets wrong."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest


def call(gcp, path: str, method: str = "GET", body: dict | None = None) -> tuple[int, dict]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(f"http://{gcp.address}/monitoring/{path}", data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:  # noqa: S310 - loopback emulator
            return r.status, json.loads(r.read() or b"{}")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


@pytest.mark.parametrize("path, code, words", [
    ("v3/projects/p/timeSeries?filter=metric.type%3D%22x%22&interval.endTime=yesterday", 400, "Illegal timestamp"),
    ("v3/projects/p/metricDescriptors?pageSize=ten", 400, "page_size"),
    ("v3/projects/p/timeSeries?filter=resource.type%3D%22gce_instance%22&interval.endTime=2026-01-01T00:00:00Z", 400,
     "exactly one metric type"),
    ("v3/projects/p/monitoredResourceDescriptors/no_such", 404, "does not exist"),
    ("v1/projects/p/metricDescriptors", 404, "no metricDescriptors"),
    ("v3/projects/p/alertPolicies", 404, "no method"),
])
def test_bad_requests_get_googles_error_json(gcp, path, code, words):
    status, body = call(gcp, path)
    assert status == code and words in body["error"]["message"] and body["error"]["code"] == code


def test_a_write_without_points_is_refused_and_nothing_is_stored(gcp):
    status, body = call(gcp, "v3/projects/p/timeSeries", "POST", {"timeSeries": [
        {"metric": {"type": "custom.googleapis.com/x"}, "resource": {"type": "global"}, "points": []}]})
    assert status == 400 and "exactly one point" in body["error"]["message"]
    assert not gcp.monitoring.series
