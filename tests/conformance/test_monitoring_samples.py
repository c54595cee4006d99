"""Cloud Monitoring as Google's published Python samples use it, against the emulator.

The calls below follow python-docs-samples `monitoring/snippets/v3/cloud-client/snippets.py`
(list descriptors, write a gce_instance point, list time series raw / aligned / reduced by zone /
headers only, monitored-resource descriptors), written afresh with google-cloud-monitoring's
MetricServiceClient in its default (gRPC) transport, over VMs made with google-cloud-compute. The
only change a sample needs is the channel: an insecure one to the emulator's loopback port instead
of TLS to monitoring.googleapis.com.
Each test asserts what the real API answers (gcp-facts section 5; the API reference).
"""

from __future__ import annotations

import time
import uuid

import grpc
import pytest
from google.api import label_pb2, metric_pb2
from google.api_core import exceptions
from google.cloud import monitoring_v3
from google.cloud.monitoring_v3.services.metric_service.transports import MetricServiceGrpcTransport

from gcpgpu.fakes.monitoring.catalog import BUILTIN, COMPUTE

PROJECT = "samples-project"
NAME = f"projects/{PROJECT}"
CPU = "compute.googleapis.com/instance/cpu/utilization"


@pytest.fixture
def client(gcp):
    channel = grpc.insecure_channel(f"127.0.0.1:{gcp.grpc_port}")
    yield monitoring_v3.MetricServiceClient(transport=MetricServiceGrpcTransport(channel=channel))
    channel.close()


@pytest.fixture
def vms(gcp):
    """Two idle e2-standard-4 VMs in two zones, made with google-cloud-compute, then 30 minutes pass."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import compute_v1

    instances = compute_v1.InstancesClient(credentials=AnonymousCredentials(),
                                           client_options={"api_endpoint": f"http://{gcp.address}"})
    made = []
    for name, zone in (("a-0", "us-central1-a"), ("b-0", "us-east4-a")):
        body = compute_v1.Instance(
            name=name, machine_type=f"zones/{zone}/machineTypes/e2-standard-4",
            disks=[compute_v1.AttachedDisk(boot=True, auto_delete=True, initialize_params=compute_v1.AttachedDiskInitializeParams(
                source_image="projects/debian-cloud/global/images/family/debian-12"))],
            network_interfaces=[compute_v1.NetworkInterface(network="global/networks/default")])
        instances.insert(project=PROJECT, zone=zone, instance_resource=body)
        made.append(instances.get(project=PROJECT, zone=zone, instance=name))
    assert [vm.status for vm in made] == ["RUNNING", "RUNNING"]
    gcp.clock.advance(30 * 60)  # by the emulator's clock: the queries below ask up to its "now"
    return [{"id": str(vm.id), "name": vm.name} for vm in made]


def interval(seconds: int = 1200, now: float | None = None) -> monitoring_v3.TimeInterval:
    now = time.time() if now is None else now
    whole, nanos = int(now), int((now - int(now)) * 1e9)
    return monitoring_v3.TimeInterval({"end_time": {"seconds": whole, "nanos": nanos},
                                       "start_time": {"seconds": whole - seconds, "nanos": nanos}})


def test_list_metric_descriptors_shows_the_built_in_types(client):
    types = {d.type: d for d in client.list_metric_descriptors(name=NAME)}
    compute = {t for t in BUILTIN if t.startswith(COMPUTE)}
    assert compute <= set(types) and len(compute) >= 25
    for t in ("agent.googleapis.com/gpu/utilization", "agent.googleapis.com/gpu/memory/bytes_used",
              "workload.googleapis.com/dcgm.gpu.profiling.sm_utilization",
              "workload.googleapis.com/dcgm.gpu.profiling.pipe_utilization"):
        assert t in types
    cpu = types[CPU]
    assert cpu.metric_kind == metric_pb2.MetricDescriptor.MetricKind.GAUGE
    assert cpu.value_type == metric_pb2.MetricDescriptor.ValueType.DOUBLE
    assert "memory_state" in [label.key for label in types["agent.googleapis.com/gpu/memory/bytes_used"].labels]


def test_get_metric_descriptor_of_a_built_in_type(client):
    d = client.get_metric_descriptor(name=f"{NAME}/metricDescriptors/{CPU}")
    assert d.type == CPU and d.name == f"{NAME}/metricDescriptors/{CPU}"
    assert [label.key for label in d.labels] == ["instance_name"]


def test_monitored_resource_descriptors_list_and_get(client):
    listed = {d.type: d for d in client.list_monitored_resource_descriptors(name=NAME)}
    assert {"gce_instance", "generic_task", "generic_node", "global"} <= set(listed)
    got = client.get_monitored_resource_descriptor(name=f"{NAME}/monitoredResourceDescriptors/gce_instance")
    assert got.type == "gce_instance" and [label.key for label in got.labels] == ["project_id", "instance_id", "zone"]
    with pytest.raises(exceptions.NotFound):
        client.get_monitored_resource_descriptor(name=f"{NAME}/monitoredResourceDescriptors/no_such_resource")


def test_write_a_gce_instance_point_without_project_id_then_read_it_back(client):
    metric_type = f"custom.googleapis.com/my_metric{uuid.uuid4().hex[:8]}"
    series = monitoring_v3.TimeSeries()
    series.metric.type = metric_type
    series.resource.type = "gce_instance"
    series.resource.labels["instance_id"] = "1234567890123456789"
    series.resource.labels["zone"] = "us-central1-c"
    series.metric.labels["TestLabel"] = "My Label Data"
    now = time.time()
    point = monitoring_v3.Point({"interval": {"end_time": {"seconds": int(now), "nanos": int((now % 1) * 1e9)}},
                                 "value": {"double_value": 3.14}})
    series.points = [point]
    client.create_time_series(name=NAME, time_series=[series])  # the real API fills project_id from NAME

    got = list(client.list_time_series(name=NAME, filter=f'metric.type = "{metric_type}"', interval=interval(),
                                       view=monitoring_v3.ListTimeSeriesRequest.TimeSeriesView.FULL))
    assert len(got) == 1
    assert dict(got[0].resource.labels) == {"project_id": PROJECT, "instance_id": "1234567890123456789",
                                           "zone": "us-central1-c"}
    assert got[0].points[0].value.double_value == pytest.approx(3.14)
    client.delete_metric_descriptor(name=f"{NAME}/metricDescriptors/{metric_type}")
    with pytest.raises(exceptions.NotFound):
        client.get_metric_descriptor(name=f"{NAME}/metricDescriptors/{metric_type}")


def test_create_a_custom_metric_descriptor(client):
    d = metric_pb2.MetricDescriptor(type="custom.googleapis.com/sample_metric",
                                    metric_kind=metric_pb2.MetricDescriptor.MetricKind.GAUGE,
                                    value_type=metric_pb2.MetricDescriptor.ValueType.DOUBLE,
                                    description="A sample's metric.")
    d.labels.append(label_pb2.LabelDescriptor(key="store_id", value_type=label_pb2.LabelDescriptor.ValueType.STRING))
    made = client.create_metric_descriptor(name=NAME, metric_descriptor=d)
    assert made.name == f"{NAME}/metricDescriptors/custom.googleapis.com/sample_metric"


def test_cpu_utilization_of_running_vms_raw(client, vms, gcp):
    got = list(client.list_time_series(name=NAME, filter=f'metric.type = "{CPU}"', interval=interval(now=gcp.clock.now()),
                                       view=monitoring_v3.ListTimeSeriesRequest.TimeSeriesView.FULL))
    assert sorted(s.resource.labels["instance_id"] for s in got) == sorted(v["id"] for v in vms)
    for s in got:
        assert len(s.points) == 20  # one sample a minute over the 20 minutes asked
        assert all(0 <= p.value.double_value < 0.05 for p in s.points)  # idle VMs: no job runs on them


def test_cpu_utilization_aligned_to_the_window(client, vms, gcp):
    aggregation = monitoring_v3.Aggregation({"alignment_period": {"seconds": 1200},
                                             "per_series_aligner": monitoring_v3.Aggregation.Aligner.ALIGN_MEAN})
    got = list(client.list_time_series(request={
        "name": NAME, "filter": f'metric.type = "{CPU}"', "interval": interval(now=gcp.clock.now()),
        "view": monitoring_v3.ListTimeSeriesRequest.TimeSeriesView.FULL, "aggregation": aggregation}))
    assert len(got) == 2 and all(len(s.points) == 1 for s in got)


def test_cpu_utilization_reduced_per_zone_with_the_group_by_shorthand(client, vms, gcp):
    aggregation = monitoring_v3.Aggregation({
        "alignment_period": {"seconds": 1200}, "per_series_aligner": monitoring_v3.Aggregation.Aligner.ALIGN_MEAN,
        "cross_series_reducer": monitoring_v3.Aggregation.Reducer.REDUCE_MEAN, "group_by_fields": ["resource.zone"]})
    got = list(client.list_time_series(request={
        "name": NAME, "filter": f'metric.type = "{CPU}"', "interval": interval(now=gcp.clock.now()),
        "view": monitoring_v3.ListTimeSeriesRequest.TimeSeriesView.FULL, "aggregation": aggregation}))
    assert sorted(s.resource.labels["zone"] for s in got) == ["us-central1-a", "us-east4-a"]


def test_cpu_utilization_headers_only(client, vms, gcp):
    got = list(client.list_time_series(name=NAME, filter=f'metric.type = "{CPU}"', interval=interval(now=gcp.clock.now()),
                                       view=monitoring_v3.ListTimeSeriesRequest.TimeSeriesView.HEADERS))
    assert len(got) == 2 and all(not s.points for s in got)
    assert {s.metric.labels["instance_name"] for s in got} == {"a-0", "b-0"}
