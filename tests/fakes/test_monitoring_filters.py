"""The emulator's Cloud Monitoring filter language, on its own (the service tests go through the client)."""

from __future__ import annotations

import pytest

from gcpgpu.fakes.monitoring import filters

SERIES = dict(
    project="p", metric_type="custom.googleapis.com/a/b", metric_labels={"gpu_number": "3", "pipe": "tensor"},
    resource_type="gce_instance", resource_labels={"instance_id": "42", "zone": "us-central1-a"},
    user_labels={"gcpgpu-cluster": "demo"}, system_labels={"name": "demo-1"},
)


@pytest.mark.parametrize("text, expected", [
    ('metric.type = "custom.googleapis.com/a/b"', True),
    ('metric.type="custom.googleapis.com/a/b" resource.type="gce_instance"', True),  # adjacency is AND
    ('metric.type = "custom.googleapis.com/a/b" AND resource.type != "gce_instance"', False),
    ('metric.type = starts_with("custom.googleapis.com/")', True),
    ('metric.type = ends_with("/b") AND metric.type != ends_with("/c")', True),
    ('metric.type = has_substring("googleapis")', True),
    ('metric.type : "googleapis"', True),
    ('resource.labels.instance_id = one_of("1", "42", "7")', True),
    ('resource.label.instance_id = one_of("1", "7")', False),
    ('resource.labels.instance_id != one_of("1", "7")', True),
    ('metric.labels.pipe = "tensor" AND metric.label.gpu_number = "3"', True),
    ('metric.labels.gpu_number > 2 AND metric.labels.gpu_number <= 3', True),
    ('metric.labels.gpu_number < 3', False),
    ('metric.labels.missing = "x"', False),
    ('metric.labels.missing != "x"', True),
    ('metadata.user_labels."gcpgpu-cluster" = "demo"', True),
    ('metadata.system_labels.name = monitoring.regex.full_match("demo-[0-9]+")', True),
    ('metadata.system_labels.name = monitoring.regex.full_match("demo")', False),
    ('resource.type = "x" OR resource.labels.zone = starts_with("us-")', True),
    ('NOT resource.type = "gce_instance"', False),
    ('(resource.type = "x" OR resource.type = "gce_instance") AND NOT metric.labels.pipe = "fp16"', True),
    ('project = "p"', True),
])
def test_filters_match_as_cloud_monitoring_does(text, expected):
    assert filters.matcher(filters.parse(text), **SERIES) is expected


@pytest.mark.parametrize("text, words", [
    ("", "empty"),
    ("metric.type", "ends too early"),
    ('metric.typo = "x"', "unknown selector"),
    ('metric.type = nope("x")', "unknown function"),
    ('metric.type = one_of(1, 2)', "quoted strings"),
    ('metric.type = starts_with("a", "b")', "one string"),
    ('metric.type = "x" AND (resource.type = "y"', "ends too early"),
    ('metric.type = "x" )', "unexpected"),
    ('metric.type : starts_with("x")', "needs = or !="),
    ('metric.labels.a = monitoring.regex.full_match("(")', "bad regular expression"),
    ('metric.type = "x" # comment', "unexpected character"),
])
def test_bad_filters_say_what_is_wrong(text, words):
    with pytest.raises(filters.FilterError, match=words):
        filters.parse(text)


def test_the_metric_type_and_allowed_ids_are_read_from_the_top_level_and():
    node = filters.parse('metric.type = "m" AND resource.labels.instance_id = one_of("1", "2") '
                         'AND resource.labels.instance_id = one_of("2", "3")')
    assert filters.equal_literal(node, "metric.type") == ["m"]
    assert filters.allowed_values(node, "resource.labels.instance_id") == {"2"}
    either = filters.parse('metric.type = "m" OR metric.type = "n"')
    assert filters.equal_literal(either, "metric.type") == []
    assert filters.allowed_values(either, "resource.labels.instance_id") is None
