"""What Cloud Monitoring knows before anyone writes: built-in metric descriptors and monitored resources.

Data only. Sources (names, kinds, value types, units, labels):
- compute.googleapis.com/instance/*: Google Cloud's metrics list, "Compute Engine" section
  (cloud.google.com/monitoring/api/metrics_gcp); names and labels (instance_name; device_name,
  device_type, storage_type on disk metrics) cross-checked with elastic/beats
  `x-pack/metricbeat/module/gcp/compute/_meta/docs.md`. Kinds and units of the integrity, balloon
  and guest_visible_vcpus types are from memory of that list (unverified here); the GPU NIC metrics
  (instance/gpu/*): gcp-facts section 7, their kinds and units unverified.
- agent.googleapis.com/gpu/*: the Ops Agent's NVML pipeline (GoogleCloudPlatform/ops-agent
  `apps/hostmetrics.go`: nvml.gpu.* renamed to gpu/*, utilization scaled x100, the hostmetrics
  receiver's collection_interval); bytes_used carries `memory_state` with values used and free,
  "summing the values of all states yields the total GPU memory" (the nvml receiver's
  metadata.yaml in GoogleCloudPlatform/opentelemetry-operations-collector; gcp-facts 7 and 10).
- workload.googleapis.com/dcgm.gpu.profiling.*: the Ops Agent's DCGM receiver v1 (`apps/dcgm.go`).
- ml.googleapis.com/training/*: Vertex AI custom training (monitoring-dashboard-samples
  `dashboards/google-vertex-ai/vertex-ai-custom-training.json`).
- Monitored resources: Google Cloud's monitored-resource list (gce_instance, generic_task,
  generic_node, global, cloudml_job).
"""

from __future__ import annotations

from dataclasses import dataclass

COMPUTE = "compute.googleapis.com/instance/"
NET = COMPUTE + "network/"
AGENT = "agent.googleapis.com/gpu/"
DCGM = "workload.googleapis.com/dcgm.gpu.profiling."
VERTEX = "ml.googleapis.com/training/"


@dataclass(frozen=True)
class Builtin:
    """One built-in metric type: what ListMetricDescriptors shows for it."""

    kind: str
    value_type: str
    unit: str
    labels: tuple[str, ...]
    description: str
    resource: str = "gce_instance"
    sample_period_s: int = 60
    ingest_delay_s: int = 240


_I = ("instance_name",)
_DISK = ("instance_name", "device_name", "device_type", "storage_type")
_NET = ("instance_name", "loadbalanced")
_GPU = ("gpu_number", "model", "uuid")
_PROC = ("pid", "process", "command", "command_line", "owner", *_GPU)
_G = "gce_instance"

# One table a family: (prefix, monitored resource, labels unless a row names its own,
#   rows of (name, metric kind, value type, unit, description[, labels])).
_FAMILIES: tuple[tuple[str, str, tuple[str, ...], tuple[tuple, ...]], ...] = (
    # Compute Engine's own (no agent): every VM has them while it runs.
    (COMPUTE, _G, _I, (
        ("cpu/utilization", "GAUGE", "DOUBLE", "10^2.%", "Fractional utilization of allocated CPU on this instance."),
        ("cpu/usage_time", "DELTA", "DOUBLE", "s{CPU}", "Delta vCPU usage for all vCPUs, in vCPU-seconds."),
        ("cpu/reserved_cores", "GAUGE", "DOUBLE", "{CPU}", "Number of vCPUs reserved on the host of the instance."),
        ("cpu/scheduler_wait_time", "DELTA", "DOUBLE", "s{idle}", "Wait time is the time a vCPU is ready to run, but unexpectedly not scheduled to run."),
        ("cpu/guest_visible_vcpus", "GAUGE", "DOUBLE", "{CPU}", "Number of vCPUs visible inside the guest."),
        ("disk/read_bytes_count", "DELTA", "INT64", "By", "Count of bytes read from disk.", _DISK),
        ("disk/write_bytes_count", "DELTA", "INT64", "By", "Count of bytes written to disk.", _DISK),
        ("disk/read_ops_count", "DELTA", "INT64", "1", "Count of disk read IO operations.", _DISK),
        ("disk/write_ops_count", "DELTA", "INT64", "1", "Count of disk write IO operations.", _DISK),
        ("firewall/dropped_bytes_count", "DELTA", "INT64", "By", "Count of incoming bytes dropped by the firewall."),
        ("firewall/dropped_packets_count", "DELTA", "INT64", "1", "Count of incoming packets dropped by the firewall."),
        ("integrity/early_boot_validation_status", "GAUGE", "INT64", "1", "The validation status of the early boot integrity policy.", ("instance_name", "status")),
        ("integrity/late_boot_validation_status", "GAUGE", "INT64", "1", "The validation status of the late boot integrity policy.", ("instance_name", "status")),
        ("memory/balloon/ram_size", "GAUGE", "INT64", "By", "The total amount of memory in the VM."),
        ("memory/balloon/ram_used", "GAUGE", "INT64", "By", "Memory currently used in the VM."),
        ("memory/balloon/swap_in_bytes_count", "DELTA", "INT64", "By", "The amount of memory read into the guest from its own swap space."),
        ("memory/balloon/swap_out_bytes_count", "DELTA", "INT64", "By", "The amount of memory written from the guest to its own swap space."),
        ("network/sent_bytes_count", "DELTA", "INT64", "By", "Count of bytes sent over the network.", _NET),
        ("network/received_bytes_count", "DELTA", "INT64", "By", "Count of bytes received from the network.", _NET),
        ("network/sent_packets_count", "DELTA", "INT64", "{packet}", "Count of packets sent over the network.", _NET),
        ("network/received_packets_count", "DELTA", "INT64", "{packet}", "Count of packets received from the network.", _NET),
        ("uptime", "DELTA", "DOUBLE", "s", "Delta of the VM's running time."),
        ("uptime_total", "GAUGE", "INT64", "s", "Elapsed time since the VM was started."),
        ("gpu/throughput_tx_bytes", "DELTA", "INT64", "By", "Bytes sent on the GPU NICs (kind and unit unverified)."),
        ("gpu/throughput_rx_bytes", "DELTA", "INT64", "By", "Bytes received on the GPU NICs (kind and unit unverified)."),
        ("gpu/packet_retransmission_count", "DELTA", "INT64", "1", "Packets retransmitted on the GPU NICs (kind unverified)."),
        ("gpu/network_rtt", "GAUGE", "DOUBLE", "us", "Round-trip time on the GPU NICs (kind and unit unverified)."),
    )),
    # Ops Agent, NVML receiver.
    (AGENT, _G, _GPU, (
        ("utilization", "GAUGE", "DOUBLE", "%", "Percent of time a kernel ran on the GPU (NVML)."),
        ("memory/bytes_used", "GAUGE", "DOUBLE", "By", "GPU memory by state: used or free (NVML).", (*_GPU, "memory_state")),
        ("processes/max_bytes_used", "GAUGE", "DOUBLE", "By", "Maximum GPU memory a process has used.", _PROC),
        ("processes/utilization", "GAUGE", "DOUBLE", "%", "Percent of time a process's kernels ran on the GPU.", _PROC),
    )),
    # Ops Agent, DCGM receiver v1.
    (DCGM, _G, _GPU, (
        ("sm_utilization", "GAUGE", "DOUBLE", "1", "Fraction of time at least one warp was active on an SM."),
        ("sm_occupancy", "GAUGE", "DOUBLE", "1", "Fraction of resident warps over the maximum."),
        ("pipe_utilization", "GAUGE", "DOUBLE", "1", "Fraction of cycles a pipe was active.", (*_GPU, "pipe")),
        ("dram_utilization", "GAUGE", "DOUBLE", "1", "Fraction of cycles device memory was busy."),
        ("nvlink_traffic_rate", "GAUGE", "INT64", "By/s", "NVLink traffic.", (*_GPU, "direction")),
        ("pcie_traffic_rate", "GAUGE", "INT64", "By/s", "PCIe traffic.", (*_GPU, "direction")),
    )),
    # Vertex AI custom training.
    (VERTEX, "cloudml_job", (), (
        ("accelerator/utilization", "GAUGE", "DOUBLE", "1", "Fraction of the allocated accelerators in use."),
        ("accelerator/memory/utilization", "GAUGE", "DOUBLE", "1", "Fraction of accelerator memory in use."),
        ("cpu/utilization", "GAUGE", "DOUBLE", "1", "Fraction of the allocated CPU in use."),
        ("memory/utilization", "GAUGE", "DOUBLE", "1", "Fraction of the allocated memory in use."),
        ("network/sent_bytes_count", "DELTA", "INT64", "By", "Bytes sent by the training job."),
        ("network/received_bytes_count", "DELTA", "INT64", "By", "Bytes received by the training job."),
    )),
)  # fmt: skip

BUILTIN: dict[str, Builtin] = {
    prefix + name: Builtin(kind, value_type, unit, labels_of[0] if labels_of else labels, description, resource)
    for prefix, resource, labels, rows in _FAMILIES
    for name, kind, value_type, unit, description, *labels_of in rows
}


@dataclass(frozen=True)
class Resource:
    """One monitored resource type: its labels (all required when writing) and display text."""

    display_name: str
    description: str
    labels: tuple[tuple[str, str], ...]  # (key, description)
    writable: bool = True  # user-defined metrics may be written against it


RESOURCES: dict[str, Resource] = {
    "gce_instance": Resource("VM Instance", "A virtual machine instance hosted in Compute Engine.", (
        ("project_id", "The identifier of the GCP project associated with this resource, such as \"my-project\"."),
        ("instance_id", "The numeric VM instance identifier assigned by Compute Engine."),
        ("zone", "The Compute Engine zone in which the VM is running."))),
    "generic_task": Resource("Generic Task", "A generic task identifies an application process for which no more "
                             "specific resource is applicable.", (
        ("project_id", "The identifier of the GCP project associated with this resource."),
        ("location", "The GCP or AWS region in which data about the resource is stored."),
        ("namespace", "A namespace identifier, such as a cluster name."),
        ("job", "An identifier for a grouping of related tasks, such as the name of a microservice."),
        ("task_id", "A unique identifier for the task within the namespace and job."))),
    "generic_node": Resource("Generic Node", "A generic node identifies a machine or other computational resource "
                             "for which no more specific resource type is applicable.", (
        ("project_id", "The identifier of the GCP project associated with this resource."),
        ("location", "The GCP or AWS region in which data about the resource is stored."),
        ("namespace", "A namespace identifier, such as a cluster name."),
        ("node_id", "A unique identifier for the node within the namespace."))),
    "global": Resource("Global", "A global resource, not tied to a location.", (
        ("project_id", "The identifier of the GCP project associated with this resource."),)),
    "cloudml_job": Resource("Cloud ML Job", "A Vertex AI (formerly Cloud ML) training job.", (
        ("project_id", "The identifier of the GCP project associated with this resource."),
        ("job_id", "The ID of the job."),
        ("task_name", "The name of the task within the job."))),
}  # fmt: skip

# Monitored resource types a user may write to, with the labels each requires.
RESOURCE_LABELS: dict[str, tuple[str, ...]] = {
    t: tuple(k for k, _ in r.labels) for t, r in RESOURCES.items() if r.writable
}


def metric_descriptor(project: str, metric_type: str) -> dict | None:
    """The MetricDescriptor JSON of a built-in type, as projects.metricDescriptors.get shows it."""
    b = BUILTIN.get(metric_type)
    if b is None:
        return None
    return {
        "name": f"projects/{project}/metricDescriptors/{metric_type}", "type": metric_type,
        "metricKind": b.kind, "valueType": b.value_type, "unit": b.unit, "description": b.description,
        "labels": [{"key": k, "valueType": "STRING"} for k in b.labels],
        "displayName": metric_type.split("/", 1)[1].replace("/", " ").replace("_", " "),
        "launchStage": "GA", "monitoredResourceTypes": [b.resource],
        "metadata": {"samplePeriod": f"{b.sample_period_s}s", "ingestDelay": f"{b.ingest_delay_s}s"},
    }


def resource_descriptor(project: str, resource_type: str) -> dict | None:
    """The MonitoredResourceDescriptor JSON of one type, as monitoredResourceDescriptors.get shows it."""
    r = RESOURCES.get(resource_type)
    if r is None:
        return None
    return {
        "name": f"projects/{project}/monitoredResourceDescriptors/{resource_type}", "type": resource_type,
        "displayName": r.display_name, "description": r.description, "launchStage": "GA",
        "labels": [{"key": k, "valueType": "STRING", "description": d} for k, d in r.labels],
    }
