"""Which Cloud Monitoring metrics `gcpgpu metrics` shows, how each is aggregated, and how to enable it.

Data, not logic: one Metric per column. The aligner turns each series into one value per minute
(ALIGN_RATE for the DELTA counters: bytes/s from bytes per sample), the reducer joins a node's
series (its NICs, GPUs, directions) server-side, so one ListTimeSeries call per metric type covers
the whole cluster. Metric types and labels: shared/reference/gcp-facts.md section 7.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from gcpgpu.jobs.goodput import METRIC as GOODPUT_METRIC

NET = "compute.googleapis.com/instance/network/"
AGENT = "agent.googleapis.com/gpu/"
DCGM = "workload.googleapis.com/dcgm.gpu.profiling."
VERTEX = "ml.googleapis.com/training/"
TRAINER = "custom.googleapis.com/gcpgpu/trainer/"
NIC = "custom.googleapis.com/gcpgpu/nic/"  # each NIC's own counters, from gcpgpu.node.nics on every node

# The generic_task namespace the reporter writes the trainer's numbers under, per kind of target.
NAMESPACE = {"cluster": "gcpgpu-cluster", "job": "gcpgpu-vertex"}


@dataclass(frozen=True)
class Metric:
    """One column: a metric type, its server-side aggregation, and the unit it is shown in."""

    key: str  # the row field: "net_sent_gbps"
    title: str  # for plots and hints
    metric_type: str
    source: str  # network | ops_agent | dcgm | trainer | vertex: what must run for it to exist
    aligner: str
    reducer: str
    scale: float = 1.0  # raw value x scale = shown value
    unit: str = ""
    per_gpu: bool = False  # reported per GPU (metric label gpu_number)
    extra_filter: str = ""
    job_level: bool = False  # one value for the whole job (the trainer's), not per node
    history: bool = False  # the tail draws its sparkline from it (the others need only their latest minutes)
    per_nic: bool = False  # written per (node, NIC, role) by gcpgpu.node.nics (metrics/nics.py)
    by_nic: bool = True  # (per_nic) asked one series per NIC; else one per (node, role), summed server-side


GBIT = 8 / 1e9  # bytes/s -> Gbit/s

CLUSTER: tuple[Metric, ...] = (
    Metric("net_sent_gbps", "network sent", NET + "sent_bytes_count", "network", "ALIGN_RATE", "REDUCE_SUM", GBIT, "Gbit/s",
           history=True),
    Metric("net_recv_gbps", "network received", NET + "received_bytes_count", "network", "ALIGN_RATE", "REDUCE_SUM", GBIT,
           "Gbit/s", history=True),
    Metric("packets_sent_per_s", "packets sent", NET + "sent_packets_count", "network", "ALIGN_RATE", "REDUCE_SUM", 1.0,
           "packets/s"),
    Metric("packets_recv_per_s", "packets received", NET + "received_packets_count", "network", "ALIGN_RATE",
           "REDUCE_SUM", 1.0, "packets/s"),
    # Each NIC's own counters (gcpgpu.node.nics), per (node, NIC, role): metrics/nics.py sums them per role.
    Metric("nic_sent_gbps", "NIC sent", NIC + "sent_bytes_per_s", "nics", "ALIGN_MEAN", "REDUCE_SUM", GBIT, "Gbit/s",
           per_nic=True),
    # Sent per NIC (each node's slowest fabric NIC is judged on it); the rest per role unless --nics asks.
    Metric("nic_recv_gbps", "NIC received", NIC + "recv_bytes_per_s", "nics", "ALIGN_MEAN", "REDUCE_SUM", GBIT,
           "Gbit/s", per_nic=True, by_nic=False),
    Metric("nic_cnp_per_s", "congestion notifications", NIC + "cnp_per_s", "nics", "ALIGN_MEAN", "REDUCE_SUM", 1.0,
           "CNPs/s", per_nic=True, by_nic=False),
    Metric("nic_retrans_per_s", "retransmits", NIC + "retrans_per_s", "nics", "ALIGN_MEAN", "REDUCE_SUM", 1.0,
           "retransmits/s", per_nic=True, by_nic=False),
    Metric("gpu_util_pct", "GPU utilization", AGENT + "utilization", "ops_agent", "ALIGN_MEAN", "REDUCE_MEAN", 1.0, "%",
           per_gpu=True, history=True),
    # The agent writes bytes_used per memory_state (used, free): summing every series gives the total,
    # so used and free are asked apart, summed per node (or GPU), and shown as used / (used + free)
    # (gcp-facts sections 7 and 10; Google's GPU dashboards filter memory_state = "used").
    Metric("gpu_mem_bytes", "GPU memory used", AGENT + "memory/bytes_used", "ops_agent", "ALIGN_MEAN", "REDUCE_SUM", 1.0,
           "bytes", per_gpu=True, extra_filter='metric.labels.memory_state = "used"'),
    Metric("gpu_mem_free_bytes", "GPU memory free", AGENT + "memory/bytes_used", "ops_agent", "ALIGN_MEAN", "REDUCE_SUM",
           1.0, "bytes", per_gpu=True, extra_filter='metric.labels.memory_state = "free"'),
    Metric("sm_active_pct", "SM activity", DCGM + "sm_utilization", "dcgm", "ALIGN_MEAN", "REDUCE_MEAN", 100.0, "%",
           per_gpu=True),
    Metric("tensor_active_pct", "tensor pipe activity", DCGM + "pipe_utilization", "dcgm", "ALIGN_MEAN", "REDUCE_MEAN",
           100.0, "%", per_gpu=True, extra_filter='metric.labels.pipe = "tensor"'),
    Metric("nvlink_gbytes_per_s", "NVLink traffic", DCGM + "nvlink_traffic_rate", "dcgm", "ALIGN_MEAN", "REDUCE_SUM",
           1e-9, "GB/s", per_gpu=True),
    Metric("pcie_gbytes_per_s", "PCIe traffic", DCGM + "pcie_traffic_rate", "dcgm", "ALIGN_MEAN", "REDUCE_SUM", 1e-9,
           "GB/s", per_gpu=True),
)

# Vertex AI reports per task (replica), utilizations as fractions; no packets, no DCGM.
JOB: tuple[Metric, ...] = (
    Metric("net_sent_gbps", "network sent", VERTEX + "network/sent_bytes_count", "vertex", "ALIGN_RATE", "REDUCE_SUM",
           GBIT, "Gbit/s", history=True),
    Metric("net_recv_gbps", "network received", VERTEX + "network/received_bytes_count", "vertex", "ALIGN_RATE",
           "REDUCE_SUM", GBIT, "Gbit/s", history=True),
    Metric("gpu_util_pct", "GPU utilization", VERTEX + "accelerator/utilization", "vertex", "ALIGN_MEAN", "REDUCE_MEAN",
           100.0, "%", history=True),
    Metric("gpu_mem_pct", "GPU memory used", VERTEX + "accelerator/memory/utilization", "vertex", "ALIGN_MEAN",
           "REDUCE_MEAN", 100.0, "%"),
)

# The trainer's own numbers, written by gcpgpu.node.reporter. The first two are in every refresh.
TRAINER_TAIL: tuple[Metric, ...] = (
    Metric("tokens_per_s", "training throughput", TRAINER + "tokens_per_s", "trainer", "ALIGN_MEAN", "REDUCE_MEAN", 1.0,
           "tokens/s", job_level=True, history=True),
    Metric("mfu", "model FLOPs utilization", TRAINER + "mfu", "trainer", "ALIGN_MEAN", "REDUCE_MEAN", 1.0, "",
           job_level=True),
)
TRAINER_REPORT: tuple[Metric, ...] = TRAINER_TAIL + (
    Metric("loss", "loss", TRAINER + "loss", "trainer", "ALIGN_MEAN", "REDUCE_MEAN", 1.0, "", job_level=True),
    Metric("step_time_s", "step time", TRAINER + "step_time", "trainer", "ALIGN_MEAN", "REDUCE_MEAN", 1.0, "s",
           job_level=True),
    Metric("data_wait_pct", "data-wait share", TRAINER + "data_wait_fraction", "trainer", "ALIGN_MEAN", "REDUCE_MEAN",
           100.0, "%", job_level=True),
)

# The job's goodput, written once per job by whoever saw it end (jobs/goodput.py): one point per job, drawn
# whatever the job's log holds.
GOODPUT: tuple[Metric, ...] = (
    Metric("goodput_pct", "goodput (share of node-time that trained)", GOODPUT_METRIC + "goodput", "goodput",
           "ALIGN_MEAN", "REDUCE_MEAN", 1.0, "%", job_level=True),
)

OPS_AGENT_INSTALL = (
    "curl -sSO https://dl.google.com/cloudagents/add-google-cloud-ops-agent-repo.sh && "
    "sudo bash add-google-cloud-ops-agent-repo.sh --also-install"
)
HINTS = {
    "ops_agent": "GPU utilization and memory come from the Ops Agent (NVML); install it on each node: "
    "gcloud compute ssh NODE -- '" + OPS_AGENT_INSTALL + "'",
    "dcgm": "SM, tensor-pipe, NVLink and PCIe activity come from DCGM through the Ops Agent: install "
    "datacenter-gpu-manager, start nv-hostengine, and add a receiver of type dcgm to "
    "/etc/google-cloud-ops-agent/config.yaml (see cloud.google.com/monitoring/agent/ops-agent/third-party-nvidia)",
    "trainer": "tokens/s and MFU come from the trainer: run 'python -m gcpgpu.node.reporter --log-json FILE {flag}' "
    "beside it on rank 0 (the trainer's --log-json FILE)",
    "network": "Compute Engine reports network counters about once a minute, up to 4 minutes late for a new VM",
    "nics": "GPU-fabric and host-NIC traffic, congestion and retransmits come from each NIC's own counters, which "
    "gcpgpu's training image samples on every node (python -m gcpgpu.node.nics {flag}); none were written",
    "vertex": "Vertex AI reports its training metrics about once a minute once the job's replicas run",
    "goodput": "a job's goodput is written when it ends, by whoever followed it ('job submit --wait', 'job follow')",
}


def metrics_for(kind: str, per_nic: bool = False) -> tuple[Metric, ...]:
    """The tail's metrics for a cluster or a Vertex job, trainer throughput included (per_nic: every NIC metric
    one series per NIC, for --nics)."""
    base = CLUSTER if kind == "cluster" else JOB
    if per_nic:
        base = tuple(dataclasses.replace(m, by_nic=True) if m.per_nic else m for m in base)
    return base + TRAINER_TAIL


def report_metrics_for(kind: str) -> tuple[Metric, ...]:
    """The report's panels: the tail's metrics, the trainer's loss, step time and data wait, and goodput."""
    return (CLUSTER if kind == "cluster" else JOB) + TRAINER_REPORT + GOODPUT
