"""The Monitoring emulator's ListTimeSeries bytes made from columns (wire.py, issue 27) are the response the
field-by-field path builds: compared as parsed messages, for gauges and deltas, whole and partly empty
windows, reduced and per-series answers, a paged one; and an INT64 answer is left to the field-by-field
path."""

from __future__ import annotations

import pytest
from google.cloud import monitoring_v3

from gcpgpu.fakes.monitoring import wire
from gcpgpu.fakes.monitoring.columns import Columns
from gcpgpu.fakes.monitoring.service import series_message
from gcpgpu.fakes.monitoring.testing import emulated_cluster

PROJECT = "wire-test"
UTIL = "agent.googleapis.com/gpu/utilization"
SENT = "compute.googleapis.com/instance/network/sent_bytes_count"
RESPONSE = monitoring_v3.ListTimeSeriesResponse.pb()


@pytest.fixture
def cluster(gcp):
    emulated_cluster(gcp, "w", 6, project=PROJECT, running_minutes=6)  # a 15-minute window is partly empty
    gcp.monitoring.straggler("w-2", 0.5, gpu=3)
    return gcp


CASES = {
    "per node, mean": (UTIL, "ALIGN_MEAN", "REDUCE_MEAN", ["resource.labels.instance_id"], 15),
    "each node's worst GPU": (UTIL, "ALIGN_MEAN", "REDUCE_MIN", ["resource.labels.instance_id"], 5),
    "per GPU": (UTIL, "ALIGN_MAX", "REDUCE_NONE", [], 15),
    "cluster total": (UTIL, "ALIGN_MEAN", "REDUCE_SUM", [], 15),
    "delta counter as a rate": (SENT, "ALIGN_RATE", "REDUCE_SUM", ["resource.labels.instance_id"], 15),
    "delta counter summed per period (stays DELTA: points start a period early)": (SENT, "ALIGN_DELTA", "REDUCE_MEAN",
                                                                                  ["resource.labels.instance_id"], 15),
}


@pytest.mark.parametrize("case", CASES)
def test_bytes_from_columns_parse_to_the_field_by_field_message(cluster, case):
    metric, aligner, reducer, group_by, minutes = CASES[case]
    end = float(int(cluster.clock.now()) // 60 * 60 + 17)  # not on a minute: stamps with seconds to them
    agg = {"period": 60, "aligner": aligner, "reducer": reducer, "group_by": group_by}
    series, token = cluster.monitoring.list_time_series(PROJECT, f'metric.type = "{metric}"', end - minutes * 60, end,
                                                        agg)
    assert isinstance(series, Columns) and len(series) > 0
    if minutes == 15:
        assert not series.mask[series.rows].all()  # the VMs ran 6 of the 15 minutes: empty buckets are left out
    got = wire.encode(series, metric, token)
    assert got is not None
    assert RESPONSE.FromString(got) == series_message(list(series), metric, token)


def test_a_paged_answer_carries_its_next_page_token(cluster):
    end = cluster.clock.now()
    agg = {"period": 60, "aligner": "ALIGN_MEAN", "reducer": "REDUCE_NONE", "group_by": []}
    series, token = cluster.monitoring.list_time_series(PROJECT, f'metric.type = "{UTIL}"', end - 600, end, agg,
                                                        page_size=5)
    assert token and len(series) == 5
    parsed = RESPONSE.FromString(wire.encode(series, UTIL, token))
    assert parsed == series_message(list(series), UTIL, token)
    assert parsed.next_page_token == token


def test_an_int64_answer_is_left_to_the_field_by_field_path(cluster):
    end = cluster.clock.now()
    agg = {"period": 60, "aligner": "ALIGN_DELTA", "reducer": "REDUCE_NONE", "group_by": []}
    series, token = cluster.monitoring.list_time_series(PROJECT, f'metric.type = "{SENT}"', end - 600, end, agg)
    assert isinstance(series, Columns) and series[0]["value_type"] == "INT64"
    assert wire.encode(series, SENT, token) is None


def test_the_client_reads_the_same_answer_either_way(cluster, monkeypatch):
    """Through google-cloud-monitoring over gRPC: bytes from columns, then the field-by-field path forced."""
    from gcpgpu.gcp.clients import Clients

    client = Clients(emulator=cluster.address, project=PROJECT).monitoring()
    end = int(cluster.clock.now())
    request = {"name": f"projects/{PROJECT}", "filter": f'metric.type = "{UTIL}"',
               "interval": {"start_time": {"seconds": end - 900}, "end_time": {"seconds": end}},
               "aggregation": {"alignment_period": {"seconds": 60}, "per_series_aligner": "ALIGN_MEAN",
                               "cross_series_reducer": "REDUCE_MIN", "group_by_fields": ["resource.labels.instance_id"]}}
    fast = [monitoring_v3.TimeSeries.pb(ts) for ts in client.list_time_series(request=request)]
    monkeypatch.setattr(wire, "encode", lambda *a: None)
    slow = [monitoring_v3.TimeSeries.pb(ts) for ts in client.list_time_series(request=request)]
    assert len(fast) == 6 and fast == slow
