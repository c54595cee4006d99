"""The built-in metric and monitored-resource descriptors the emulator lists, pinned.

The golden file was written from the catalog before it was turned from a literal table into data
read in a loop; a change to any descriptor (name, kind, unit, labels, resource, metadata) fails here.
"""

from __future__ import annotations

import json
from pathlib import Path

from gcpgpu.fakes.monitoring.catalog import BUILTIN, RESOURCES, metric_descriptor, resource_descriptor

GOLDEN = Path(__file__).parent / "data" / "monitoring_descriptors.json"


def _current() -> dict:
    return {
        "metricDescriptors": [metric_descriptor("p", t) for t in BUILTIN],
        "monitoredResourceDescriptors": [resource_descriptor("p", t) for t in RESOURCES],
    }


def test_descriptors_match_the_pinned_list():
    golden = json.loads(GOLDEN.read_text())
    current = _current()
    assert [d["type"] for d in current["metricDescriptors"]] == [d["type"] for d in golden["metricDescriptors"]]
    assert current == golden


def test_unknown_types_have_no_descriptor():
    assert metric_descriptor("p", "compute.googleapis.com/instance/no_such_metric") is None
    assert resource_descriptor("p", "no_such_resource") is None
