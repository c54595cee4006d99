"""The emulator's made-up GPU, NVLink and network series follow the steps a node's job makes and stay
within the machine's own limits (issue 38 item 4).

Measured before: NVLink 256-273 GB/s on a one-GPU a2-highgpu-1g, network rising from 23 to 41 Gbit/s
while tokens/s fell, 30 Gbit/s with the GPU at 0 %, and 100 Gbit/s per NIC for every A2 shape.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from gcpgpu.cli import main
from gcpgpu.fakes.monitoring.testing import emulated_cluster
from gcpgpu.gcp.clients import Clients

PROJECT = "metrics-test"
UTIL = "agent.googleapis.com/gpu/utilization"
SENT = "compute.googleapis.com/instance/network/sent_bytes_count"
NVLINK = "workload.googleapis.com/dcgm.gpu.profiling.nvlink_traffic_rate"


def tail_rows(*argv: str) -> list[dict]:
    result = CliRunner().invoke(main, ["--project", PROJECT, "metrics", "tail", "--once", "--format", "json", *argv])
    assert result.exit_code == 0, result.output
    return [json.loads(line) for line in result.stdout.splitlines()]


def raw(gcp, metric_type: str, vm: dict, start: float, end: float, extra: str = "") -> dict[float, float]:
    """One VM's raw samples of a metric (its GPU 0's, for a GPU metric; tx, for NVLink), by end time."""
    client = Clients(emulator=gcp.address, project=PROJECT).monitoring()
    got = list(client.list_time_series(request={
        "name": f"projects/{PROJECT}",
        "filter": f'metric.type = "{metric_type}" AND resource.labels.instance_id = "{vm["id"]}"' + extra,
        "interval": {"start_time": {"seconds": int(start)}, "end_time": {"seconds": int(end)}}}))
    assert len(got) == 1, got
    return {p.interval.end_time.timestamp(): p.value.double_value or float(p.value.int64_value)
            for p in got[0].points}


@pytest.mark.parametrize(("machine_type", "gbps", "gpus"), [("a2-highgpu-1g", 24, 1), ("a2-highgpu-8g", 100, 8),
                                                             ("a2-ultragpu-4g", 50, 4), ("g2-standard-12", 16, 1)])
def test_a_busy_node_stays_within_its_own_shapes_limits(gcp, machine_type, gbps, gpus):
    emulated_cluster(gcp, "c", 2, machine_type=machine_type)
    rows = tail_rows("--cluster", "c", "--gpus")
    nodes = [r for r in rows if r["kind"] == "node"]
    assert len(nodes) == 2
    for node in nodes:
        assert 0.2 * gbps < node["net_sent_gbps"] <= gbps and node["link_share_pct"] <= 100, node
        assert node["gpu_util_pct"] > 80
        # NVLink joins a machine's GPUs: absent on a one-GPU machine (or on L4s), at most 600 GB/s per A100.
        nvlink = node["nvlink_gbytes_per_s"]
        assert nvlink is None if gpus == 1 else 0 < nvlink <= 600 * gpus, node
    for gpu in [r for r in rows if r["kind"] == "gpu"]:
        assert gpu["nvlink_gbytes_per_s"] is None if gpus == 1 else gpu["nvlink_gbytes_per_s"] <= 600, gpu
    table = CliRunner().invoke(main, ["--project", PROJECT, "metrics", "tail", "--once", "--cluster", "c"])
    assert f"of {machine_type} ({gbps} Gbit/s each)" in table.stdout, table.stdout


def test_gpu_nvlink_and_network_follow_the_steps_and_are_idle_without_them(gcp):
    """A job at its usual pace for five minutes, then at half of it for five (tokens/s halved), then gone."""
    vms = emulated_cluster(gcp, "c", 2, machine_type="a2-highgpu-8g", running_minutes=20, busy=False)
    began = gcp.clock.now() - 20 * 60  # when the VMs started: samples end at began + k minutes
    start, slow, end = began + 5 * 60, began + 10 * 60, began + 15 * 60
    for vm in vms:
        gcp.activity.begin(vm["id"], f"run-{vm['name']}", at=start, job="the-job")
        gcp.activity.end(vm["id"], f"run-{vm['name']}", at=end)
    step = 0
    for second in range(int(end - start)):
        step += 10 if start + second < slow else 5
        gcp.activity.progress("the-job", step, at=start + second + 1)

    for vm in vms:
        util = raw(gcp, UTIL, vm, began, gcp.clock.now(), ' AND metric.labels.gpu_number = "0"')
        sent = raw(gcp, SENT, vm, began, gcp.clock.now())
        nvlink = raw(gcp, NVLINK, vm, began, gcp.clock.now(),
                     ' AND metric.labels.gpu_number = "0" AND metric.labels.direction = "tx"')
        by_minute = [{round((t - began) / 60): v for t, v in series.items()} for series in (util, sent, nvlink)]
        full, half, idle = range(7, 11), range(12, 16), [*range(0, 5), *range(17, 20)]  # whole minutes of each phase
        for series in by_minute:
            assert mean(series, half) == pytest.approx(mean(series, full) / 2, rel=0.08)
        util_m, sent_m, nvlink_m = by_minute
        assert mean(util_m, full) > 85
        assert max(util_m[k] for k in idle) == 0 and max(nvlink_m[k] for k in idle) == 0  # no job, no GPU use
        assert max(sent_m[k] * 8 / 60 / 1e9 for k in idle) < 0.001  # Gbit/s: the agents' own traffic only


def mean(series: dict[int, float], minutes: range) -> float:
    return sum(series[k] for k in minutes) / len(minutes)
