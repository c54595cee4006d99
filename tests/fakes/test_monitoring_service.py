"""The emulator's Cloud Monitoring MetricService, through the real google-cloud-monitoring client over gRPC."""

from __future__ import annotations

import json
import time

import pytest
from google.api import metric_pb2
from google.api_core import exceptions
from google.cloud import monitoring_v3

from gcpgpu.fakes.monitoring import configure
from gcpgpu.fakes.monitoring.__main__ import main as knobs_main
from gcpgpu.fakes.monitoring.testing import emulated_cluster
from gcpgpu.gcp.clients import Clients

PROJECT = "mon-test"
SENT = "compute.googleapis.com/instance/network/sent_bytes_count"
UTIL = "agent.googleapis.com/gpu/utilization"
E = float(int(time.time()) // 60 * 60)  # a whole minute, so the expected buckets are easy to write down


@pytest.fixture
def client(gcp):
    return Clients(emulator=gcp.address, project=PROJECT).monitoring()


@pytest.fixture
def known(gcp):
    """Known data only: two VMs' DELTA byte counters and per-GPU utilization, no made-up series."""
    gcp.monitoring.synthetic(False)
    for iid, per_minute in (("1", 6000), ("2", 12000)):
        res = {"project_id": PROJECT, "instance_id": iid, "zone": "us-central1-a"}
        gcp.monitoring.write_points(PROJECT, SENT, [(E - 60 * i - 60, E - 60 * i, per_minute) for i in range(10)],
                                    kind="DELTA", value_type="INT64", metric_labels={"instance_name": f"vm-{iid}"},
                                    resource_labels=res, unit="By")
        for gpu, value in enumerate((80.0, 90.0) if iid == "1" else (40.0, 50.0)):
            gcp.monitoring.write_points(PROJECT, UTIL, [(E - 60 * i, E - 60 * i, value) for i in range(10)],
                                        metric_labels={"gpu_number": str(gpu)}, resource_labels=res, unit="%")
    return gcp


def ask(client, flt, *, start=E - 600, end=E, period=60, aligner=None, reducer=None, group_by=(), **extra):
    request = {"name": f"projects/{PROJECT}", "filter": flt,
               "interval": {"start_time": {"seconds": int(start)}, "end_time": {"seconds": int(end)}}, **extra}
    if aligner:
        request["aggregation"] = {"alignment_period": {"seconds": period}, "per_series_aligner": aligner,
                                  "cross_series_reducer": reducer or "REDUCE_NONE", "group_by_fields": list(group_by)}
    return list(client.list_time_series(request=request))


def values(series):
    return [p.value.double_value or p.value.int64_value for p in series.points]


def test_align_rate_turns_delta_counters_into_bytes_per_second(client, known):
    got = ask(client, f'metric.type = "{SENT}"', aligner="ALIGN_RATE")
    by_id = {s.resource.labels["instance_id"]: s for s in got}
    assert values(by_id["1"]) == [100.0] * 10 and values(by_id["2"]) == [200.0] * 10
    assert by_id["1"].metric_kind == metric_pb2.MetricDescriptor.GAUGE
    assert by_id["1"].value_type == metric_pb2.MetricDescriptor.DOUBLE
    assert by_id["1"].unit == "By/s"
    stamps = [p.interval.end_time.timestamp() for p in by_id["1"].points]
    assert stamps == [E - 60 * i for i in range(10)]  # newest first, one per period ending at the interval's end


def test_align_delta_sums_a_period_and_stays_a_delta(client, known):
    got = ask(client, f'metric.type = "{SENT}" AND metric.labels.instance_name = "vm-1"', aligner="ALIGN_DELTA",
              period=120)
    assert [s.metric.labels["instance_name"] for s in got] == ["vm-1"]
    assert values(got[0]) == [12000] * 5
    assert got[0].metric_kind == metric_pb2.MetricDescriptor.DELTA
    first = got[0].points[0].interval
    assert first.end_time.timestamp() - first.start_time.timestamp() == 120


@pytest.mark.parametrize("reducer, group_by, expected", [
    ("REDUCE_SUM", (), {(): 300.0}),
    ("REDUCE_MEAN", (), {(): 150.0}),
    ("REDUCE_MAX", (), {(): 200.0}),
    ("REDUCE_COUNT", (), {(): 2}),
    ("REDUCE_SUM", ("resource.label.instance_id",), {("1",): 100.0, ("2",): 200.0}),
])
def test_cross_series_reducers_and_group_by(client, known, reducer, group_by, expected):
    got = ask(client, f'metric.type = "{SENT}"', aligner="ALIGN_RATE", reducer=reducer, group_by=group_by)
    result = {tuple(s.resource.labels[f.rsplit(".", 1)[1]] for f in group_by): values(s)[0] for s in got}
    assert result == expected
    if not group_by:
        assert dict(got[0].resource.labels) == {} and dict(got[0].metric.labels) == {}


def test_gauges_mean_per_node_and_per_gpu(client, known):
    per_node = ask(client, f'metric.type = "{UTIL}"', aligner="ALIGN_MEAN", reducer="REDUCE_MEAN",
                   group_by=["resource.labels.instance_id"])
    assert {s.resource.labels["instance_id"]: values(s)[0] for s in per_node} == {"1": 85.0, "2": 45.0}
    per_gpu = ask(client, f'metric.type = "{UTIL}"', aligner="ALIGN_MEAN", reducer="REDUCE_MEAN",
                  group_by=["metric.label.gpu_number"])
    assert {s.metric.labels["gpu_number"]: values(s)[0] for s in per_gpu} == {"0": 60.0, "1": 70.0}


def test_reduce_min_grouped_by_instance_is_each_nodes_worst_gpu(client, known):
    """What `metrics tail` asks over 64 nodes (focus.WORST_GPU, issue 27): vm 1's GPUs read 80 and 90, vm 2's 40 and 50."""
    got = ask(client, f'metric.type = "{UTIL}"', aligner="ALIGN_MEAN", reducer="REDUCE_MIN",
              group_by=["resource.labels.instance_id"])
    assert {s.resource.labels["instance_id"]: values(s) for s in got} == {"1": [80.0] * 10, "2": [40.0] * 10}


@pytest.mark.parametrize("flt, ids", [
    (f'metric.type = "{UTIL}" AND resource.labels.instance_id = "1"', ["1", "1"]),
    (f'metric.type = "{UTIL}" AND resource.labels.instance_id != "1"', ["2", "2"]),
    (f'metric.type = "{UTIL}" AND resource.labels.instance_id = one_of("2", "9")', ["2", "2"]),
    (f'metric.type = "{UTIL}" AND metric.labels.gpu_number = "1" AND resource.type = "gce_instance"', ["1", "2"]),
    (f'metric.type = "{UTIL}" AND resource.labels.zone = starts_with("europe-")', []),
    (f'metric.type="{UTIL}" resource.label.instance_id="2" metric.label.gpu_number="0"', ["2"]),
])
def test_filters_pick_the_series(client, known, flt, ids):
    got = ask(client, flt, start=E - 60, end=E)  # raw points, no aggregation
    assert sorted(s.resource.labels["instance_id"] for s in got) == ids


def test_raw_points_come_newest_first_and_headers_view_has_none(client, known):
    got = ask(client, f'metric.type = "{SENT}" AND resource.labels.instance_id = "1"', start=E - 180, end=E)
    assert values(got[0]) == [6000, 6000, 6000, 6000]
    assert [p.interval.end_time.timestamp() for p in got[0].points] == [E, E - 60, E - 120, E - 180]
    headers = ask(client, f'metric.type = "{SENT}"', view="HEADERS")
    assert len(headers) == 2 and all(not s.points for s in headers)


def test_cumulative_counters_become_rates_across_resets(client, gcp):
    gcp.monitoring.synthetic(False)
    res = {"project_id": PROJECT, "instance_id": "5", "zone": "us-central1-a"}
    pts = [(E - 600, E - 600 + 60 * i, 600.0 * i) for i in range(1, 6)]  # +600 bytes a minute
    pts += [(E - 240, E - 240 + 60 * i, 600.0 * i) for i in range(1, 5)]  # restarted: a new start time
    gcp.monitoring.write_points(PROJECT, "custom.googleapis.com/test/bytes", pts, kind="CUMULATIVE", resource_labels=res)
    got = ask(client, 'metric.type = "custom.googleapis.com/test/bytes"', aligner="ALIGN_RATE")
    assert set(values(got[0])) == {10.0}


def test_paging_follows_page_tokens_and_each_page_is_a_call(client, gcp):
    gcp.monitoring.synthetic(False)
    for i in range(25):
        gcp.monitoring.write_points(PROJECT, UTIL, [(E, E, float(i))],
                                    resource_labels={"project_id": PROJECT, "instance_id": str(100 + i), "zone": "z"})
    gcp.requests.clear()
    got = ask(client, f'metric.type = "{UTIL}"', start=E - 60, end=E, page_size=10)
    assert sorted(values(s)[0] for s in got) == [float(i) for i in range(25)]
    assert len(gcp.requests.all(api="monitoring", contains="ListTimeSeries")) == 3
    with pytest.raises(exceptions.InvalidArgument, match="pageToken"):
        ask(client, f'metric.type = "{UTIL}"', start=E - 60, end=E, page_token="bm9wZTox")


@pytest.mark.parametrize("flt, kw, error, words", [
    ('resource.type = "gce_instance"', {}, exceptions.InvalidArgument, "exactly one metric type"),
    (f'metric.type = "{SENT}" OR metric.type = "{UTIL}"', {}, exceptions.InvalidArgument, "exactly one metric type"),
    (f'metric.type = "{SENT}" AND', {}, exceptions.InvalidArgument, "invalid value"),
    (f'metric.type = "{UTIL}"', {"aligner": "ALIGN_RATE"}, exceptions.InvalidArgument, "not valid for metrics of kind GAUGE"),
    (f'metric.type = "{SENT}"', {"aligner": "ALIGN_RATE", "period": 10}, exceptions.InvalidArgument, "at least 60"),
    ('metric.type = "custom.googleapis.com/never/written"', {}, exceptions.NotFound, "Cannot find metric"),
])
def test_bad_queries_fail_as_the_real_api_does(client, known, flt, kw, error, words):
    with pytest.raises(error, match=words):
        ask(client, flt, **kw)


def test_a_reducer_needs_an_aligner(client, known):
    request = {"name": f"projects/{PROJECT}", "filter": f'metric.type = "{SENT}"',
               "interval": {"start_time": {"seconds": int(E - 600)}, "end_time": {"seconds": int(E)}},
               "aggregation": {"cross_series_reducer": "REDUCE_SUM"}}
    with pytest.raises(exceptions.InvalidArgument, match="needs a per-series aligner"):
        list(client.list_time_series(request=request))


def _series(metric_type, value, *, labels=None, task="0", end=None):
    end = E if end is None else end
    return monitoring_v3.TimeSeries(
        metric={"type": metric_type, "labels": labels or {}},
        resource={"type": "generic_task", "labels": {"project_id": PROJECT, "location": "us-central1",
                                                     "namespace": "ns", "job": "j", "task_id": task}},
        points=[{"interval": {"end_time": {"seconds": int(end)}}, "value": {"double_value": value}}],
    )


def test_written_custom_metrics_come_back_averaged_and_get_a_descriptor(client, gcp):
    for i, value in enumerate((1.0, 2.0, 3.0)):
        client.create_time_series(name=f"projects/{PROJECT}", time_series=[_series("custom.googleapis.com/t/x", value,
                                                                                    end=E - 50 + 10 * i)])
    got = ask(client, 'metric.type = "custom.googleapis.com/t/x" AND resource.labels.job = "j"', aligner="ALIGN_MEAN")
    assert values(got[0]) == [2.0]
    desc = client.get_metric_descriptor(name=f"projects/{PROJECT}/metricDescriptors/custom.googleapis.com/t/x")
    assert desc.metric_kind == metric_pb2.MetricDescriptor.GAUGE
    listed = client.list_metric_descriptors(request={"name": f"projects/{PROJECT}",
                                                     "filter": 'metric.type = starts_with("custom.googleapis.com/")'})
    assert [d.type for d in listed] == ["custom.googleapis.com/t/x"]
    assert len(gcp.requests.all(api="monitoring", contains="CreateTimeSeries")) == 3


@pytest.mark.parametrize("series, words", [
    ([_series("compute.googleapis.com/instance/cpu/utilization", 1.0)], "cannot be written"),
    ([_series("custom.googleapis.com/t/y", 1.0), _series("custom.googleapis.com/t/y", 2.0)], "appears twice"),
    ([_series("custom.googleapis.com/t/y", 1.0)] * 201, "at most 200"),
    ([monitoring_v3.TimeSeries(metric={"type": "custom.googleapis.com/t/y"},
                               resource={"type": "generic_task", "labels": {"project_id": PROJECT}},
                               points=[{"interval": {"end_time": {"seconds": int(E)}}, "value": {"double_value": 1}}])],
     "missing required label"),
])
def test_create_time_series_refuses_what_the_real_api_refuses(client, gcp, series, words):
    with pytest.raises(exceptions.InvalidArgument, match=words):
        client.create_time_series(name=f"projects/{PROJECT}", time_series=series)


def test_points_must_come_in_order_and_not_too_often(client, gcp):
    client.create_time_series(name=f"projects/{PROJECT}", time_series=[_series("custom.googleapis.com/t/z", 1.0, end=E)])
    with pytest.raises(exceptions.InvalidArgument, match="written in order"):
        client.create_time_series(name=f"projects/{PROJECT}", time_series=[_series("custom.googleapis.com/t/z", 1.0, end=E)])
    with pytest.raises(exceptions.InvalidArgument, match="more frequently"):
        client.create_time_series(name=f"projects/{PROJECT}",
                                  time_series=[_series("custom.googleapis.com/t/z", 1.0, end=E + 2)])
    # Another series of the same type is its own series: its first point is fine.
    client.create_time_series(name=f"projects/{PROJECT}",
                              time_series=[_series("custom.googleapis.com/t/z", 1.0, end=E, task="1")])


def test_grpc_calls_are_logged_and_faults_apply(client, known):
    known.requests.clear()
    ask(client, f'metric.type = "{SENT}"')
    (logged,) = known.requests.all(api="monitoring")
    assert logged.path == "/google.monitoring.v3.MetricService/ListTimeSeries" and logged.status == 200
    known.faults.update({"error_rate": 1.0, "error_methods": ["GET"], "error_codes": [429]})
    with pytest.raises(exceptions.TooManyRequests):
        ask(client, f'metric.type = "{SENT}"')


# ------------------------------------------------------------------ made-up series for emulated VMs
def test_emulated_vms_report_network_counters_and_per_gpu_utilization(client, gcp):
    vms = emulated_cluster(gcp, "syn", 2, project=PROJECT, running_minutes=10)
    now = gcp.clock.now()
    sent = ask(client, f'metric.type = "{SENT}"', start=now - 300, end=now)
    assert sorted(s.metric.labels["instance_name"] for s in sent) == ["syn-0", "syn-1"]
    assert all(v > 0 for s in sent for v in values(s))  # a DELTA counter that grows every minute
    util = ask(client, f'metric.type = "{UTIL}" AND resource.labels.instance_id = "{vms[0]["id"]}"',
               start=now - 120, end=now)
    assert sorted(int(s.metric.labels["gpu_number"]) for s in util) == list(range(8))
    assert all(80 <= v <= 100 for s in util for v in values(s))
    assert all(s.metric.labels["model"] == "NVIDIA H100 80GB" for s in util)


def test_made_up_series_are_deterministic_per_seed(client, gcp):
    emulated_cluster(gcp, "syn", 1, project=PROJECT, running_minutes=10)
    gcp.clock.freeze()
    now = gcp.clock.now()

    def snapshot():
        return sorted(values(s)[0] for s in ask(client, f'metric.type = "{UTIL}"', start=now - 600, end=now,
                                                aligner="ALIGN_MEAN", period=600))

    first = snapshot()
    assert snapshot() == first
    gcp.faults.reseed(7)
    assert snapshot() != first


def test_a_straggler_is_slower_on_gpus_and_network(client, gcp):
    vms = emulated_cluster(gcp, "syn", 3, project=PROJECT)
    gcp.monitoring.straggler("syn-1", factor=0.5)
    now = gcp.clock.now()
    util = ask(client, f'metric.type = "{UTIL}"', start=now - 300, end=now, aligner="ALIGN_MEAN",
               reducer="REDUCE_MEAN", group_by=["resource.labels.instance_id"])
    by_id = {s.resource.labels["instance_id"]: values(s)[0] for s in util}
    assert by_id[vms[1]["id"]] < 0.6 * by_id[vms[0]["id"]]
    net = ask(client, f'metric.type = "{SENT}"', start=now - 300, end=now, aligner="ALIGN_RATE",
              reducer="REDUCE_SUM", group_by=["metric.labels.instance_name"])
    rate = {s.metric.labels["instance_name"]: values(s)[0] for s in net}
    assert rate["syn-1"] < 0.7 * min(rate["syn-0"], rate["syn-2"])


def test_agents_decide_which_gpu_metrics_exist(client, gcp):
    vms = emulated_cluster(gcp, "syn", 2, project=PROJECT)
    gcp.monitoring.agents(dcgm=False)
    gcp.monitoring.agents(ops_agent=False, instances=["syn-1"])
    now = gcp.clock.now()
    dcgm = ask(client, 'metric.type = "workload.googleapis.com/dcgm.gpu.profiling.sm_utilization"',
               start=now - 120, end=now)
    assert dcgm == []
    util = ask(client, f'metric.type = "{UTIL}"', start=now - 120, end=now)
    assert {s.resource.labels["instance_id"] for s in util} == {vms[0]["id"]}


def test_vertex_jobs_report_cloudml_job_metrics_per_task(client, gcp):
    gcp.monitoring.add_job("4242", replicas=3, start=gcp.clock.now() - 600)
    now = gcp.clock.now()
    got = ask(client, 'metric.type = "ml.googleapis.com/training/accelerator/utilization" AND '
                      'resource.type = "cloudml_job" AND resource.labels.job_id = "4242"', start=now - 300, end=now)
    assert sorted(s.resource.labels["task_name"] for s in got) == ["workerpool0-0", "workerpool1-0", "workerpool1-1"]
    assert all(0.8 <= v <= 1.0 for s in got for v in values(s))  # Vertex reports a fraction


def test_knobs_can_be_turned_from_another_process(gcp, capsys):
    info = configure(gcp.info()["grpc"], {"stragglers": [{"instance": "x-1", "factor": 0.25}]})
    assert info["stragglers"] == {"x-1": [0.25, None]}
    assert knobs_main(["--emulator", gcp.address, "agents", "--no-dcgm"]) == 0
    assert json.loads(capsys.readouterr().out)["dcgm"] is False
    assert gcp.monitoring.knobs.dcgm is False


def test_the_agents_collection_interval_sets_how_often_gpu_samples_come(client, gcp, capsys):
    (vm,) = emulated_cluster(gcp, "iv", 1, project=PROJECT, running_minutes=10)
    flt = f'metric.type = "{UTIL}" AND resource.labels.instance_id = "{vm["id"]}" AND metric.labels.gpu_number = "0"'
    now = gcp.clock.now()
    (before,) = ask(client, flt, start=now - 120, end=now)
    assert knobs_main(["--emulator", gcp.address, "agents", "--interval", "10"]) == 0
    assert json.loads(capsys.readouterr().out)["agent_interval_s"] == 10
    (after,) = ask(client, flt, start=now - 120, end=now)
    assert len(before.points) in (2, 3) and len(after.points) in (12, 13)  # every 60 s, then every 10 s
    (net,) = ask(client, f'metric.type = "{SENT}" AND resource.labels.instance_id = "{vm["id"]}"', start=now - 120, end=now)
    assert len(net.points) in (2, 3)  # Compute's own counters keep their minute
    with pytest.raises(ValueError, match="between 10 s and 1 h"):
        gcp.monitoring.agents(interval_s=1)


def test_made_up_series_kept_between_calls_follow_a_new_straggler_and_time(client, gcp):
    """The emulator keeps the series a filter matched from one call to the next (issue 27: 8,192 GPU
    series per call at 1,024 nodes); a straggler set, or time moving on, between two calls still shows."""
    vms = emulated_cluster(gcp, "syn", 3, project=PROJECT)
    gcp.clock.freeze()
    now = gcp.clock.now()

    def per_node(end: float) -> dict[str, float]:
        util = ask(client, f'metric.type = "{UTIL}"', start=end - 300, end=end, aligner="ALIGN_MEAN",
                   reducer="REDUCE_MEAN", group_by=["resource.labels.instance_id"])
        return {s.resource.labels["instance_id"]: values(s)[0] for s in util}

    before = per_node(now)
    assert per_node(now) == before  # kept: the same answer
    gcp.monitoring.straggler("syn-1", factor=0.5)
    slowed = per_node(now)
    assert slowed[vms[1]["id"]] < 0.6 * before[vms[1]["id"]] and slowed[vms[0]["id"]] == before[vms[0]["id"]]
    gcp.clock.advance(600)
    later = ask(client, f'metric.type = "{UTIL}"', start=now + 300, end=now + 600, aligner="ALIGN_MEAN",
                period=60)
    assert later and max(p.interval.end_time.timestamp() for s in later for p in s.points) > now + 300
