"""The network view on every A3/A4 family (issue 52): each node's own NIC counters, sampled by gcpgpu.node.nics
from the node's (fake) sysfs, written to Monitoring, and shown by `metrics tail` as GPU fabric apart from host.

The expected traffic is worked out here from what the job did: the parameters its trainer printed, the steps
its log reached (the emulator's step ledger), and a data-parallel ring's 2 (N - 1) / N x 4 bytes per parameter
per step; not from the code under test.
"""

from __future__ import annotations

import datetime as dt
import json
import random
import re

import pytest
from click.testing import CliRunner
from helpers import wait_for

from gcpgpu.cli import main

PROJECT = "test-proj"
GLOBAL = ["--project", PROJECT, "--region", "us-central1"]
NIC = "custom.googleapis.com/gcpgpu/nic/"


def cli(*argv: str):
    return CliRunner().invoke(main, [*GLOBAL, *argv])


@pytest.fixture(scope="module")
def text_file(tmp_path_factory: pytest.TempPathFactory) -> str:
    rng = random.Random(0)
    words = "the quick brown fox jumps over the lazy dog".split()
    path = tmp_path_factory.mktemp("data") / "small.txt"
    path.write_text("\n".join(" ".join(rng.choice(words) for _ in range(12)) for _ in range(2000)) + "\n")
    return str(path)


def up(gcp, machine_type: str, zone: str = "us-central1-a") -> None:
    extra: list[str] = []
    if machine_type.startswith(("a3-ultra", "a4-")):
        from test_cluster_reservations import dense_reservation

        dense_reservation(gcp, "sold", 2, machine_type=machine_type, zone=zone)
        extra = ["--reservation", "sold"]
    result = cli("cluster", "up", "c", "--machine-type", machine_type, "--nodes", "2", "--zone", zone, "--yes", *extra)
    assert result.exit_code == 0, result.output


def submit(text_file: str, steps: int = 100000) -> str:
    result = cli("job", "submit", "--cluster", "c", "--", "--model", "tiny", "--parallel", "ddp", "--precision",
                 "fp32", "--data", text_file, "--steps", str(steps), "--batch-size", "16", "--seq-len", "32",
                 "--log-every", "1")
    assert result.exit_code == 0, result.output
    return result.stdout.splitlines()[0]


def nic_points(gcp, key: str) -> dict[tuple[str, str, str], list[tuple[float, float]]]:
    """(node, nic, role) -> [(end time, value)] of one of the samplers' metrics, as written."""
    out = {}
    for s in gcp.monitoring.series.values():
        if s.metric_type == NIC + key:
            out[(s.metric_labels["node"], s.metric_labels["nic"], s.metric_labels["role"])] = [
                (p[1], p[2]) for p in s.points]
    return out


def training_points(gcp, node: str, nic: str, role: str) -> list[tuple[float, float]]:
    """The samplers' points of `nic` written since the job's first step (before it, torch is still starting)."""
    jobs = {r.id.rsplit("/", 1)[0] for r in gcp.jobs.runner.all_runs() if r.id.startswith("cluster/")}
    ledger = [p for job in jobs for p in gcp.activity.steps(job)]
    if not ledger:
        return []
    first = min(t for t, _s in ledger)
    return [p for p in nic_points(gcp, "sent_bytes_per_s").get((node, nic, role), []) if p[0] - 5.0 > first]


def expected_gbps(gcp, job_id: str, times: list[float]) -> float:
    """What each node sent over the fabric, in Gbit/s, averaged as the tail averages the samplers' points: each
    point's interval (from the point before; the first one's, the sampler's interval) at the job's step rate in
    it, times a ring all-reduce's 2 (N - 1) / N x 4 bytes per parameter per step."""
    (run,) = [r for r in gcp.jobs.runner.all_runs() if r.id.startswith("cluster/") and r.id.endswith("/c-0")]
    found = [re.search(r"model \S+ \((\d+(?:\.\d+)?)M params", line.text) for line in run.log_lines()]
    params = next(float(m.group(1)) * 1e6 for m in found if m)
    per_step = 2 * (2 - 1) / 2 * 4 * params
    ledger = gcp.activity.steps(run.id.rsplit("/", 1)[0])

    def step_at(t: float) -> float:
        before = [(tt, s) for tt, s in ledger if tt <= t]
        after = [(tt, s) for tt, s in ledger if tt > t]
        if not before:
            return 0.0
        if not after:
            return float(before[-1][1])
        (t0, s0), (t1, s1) = before[-1], after[0]
        return s0 + (s1 - s0) * (t - t0) / (t1 - t0)

    rates = []
    for i, t in enumerate(times):
        start = times[i - 1] if i else t - 5.0
        rates.append(per_step * (step_at(t) - step_at(start)) / (t - start))
    return sum(rates) / len(rates) * 8 / 1e9


def tail_json(*extra: str) -> list[dict]:
    result = CliRunner().invoke(main, ["--project", PROJECT, "metrics", "tail", "--cluster", "c", "--once",
                                       "--format", "json", *extra])
    assert result.exit_code == 0, result.output
    return [json.loads(line) for line in result.stdout.splitlines()]


def check_fabric_within_10_percent(gcp, job_id: str, fabric_nic: str, host_is_fabric: bool = False) -> list[dict]:
    role = "host" if host_is_fabric else "fabric"
    # Five points (25 s) of training: the counters trail the job's log by a moment, which a short span would feel.
    wait_for(lambda: all(len(training_points(gcp, n, fabric_nic, role)) >= 5 for n in ("c-0", "c-1")),
             what="five NIC points per node while the job trains", timeout=300)
    rows = tail_json()
    shown_at = max(r["time"] for r in rows)

    cutoff = dt.datetime.fromisoformat(shown_at).timestamp()
    nodes = {r["name"]: r for r in rows if r["kind"] == "node"}
    for name in ("c-0", "c-1"):
        points = nic_points(gcp, "sent_bytes_per_s")[(name, fabric_nic, "host" if host_is_fabric else "fabric")]
        times = [t for t, _v in points if cutoff - 60 < t <= cutoff]
        want = expected_gbps(gcp, job_id, times)
        got = nodes[name]["fabric_sent_gbps"]
        assert want > 0 and got == pytest.approx(want, rel=0.10), (name, got, want, nodes[name])
        if host_is_fabric:
            assert nodes[name]["host_sent_gbps"] == pytest.approx(got, rel=1e-6)  # one NIC: the same numbers
        else:
            assert nodes[name]["host_sent_gbps"] is not None and nodes[name]["host_sent_gbps"] < 0.01 * got
    return rows


@pytest.mark.slow
def test_a3_ultra_shows_each_nodes_rdma_fabric_apart_from_its_host_nics(gcp, text_file):
    up(gcp, "a3-ultragpu-8g", zone="us-central1-b")
    job = submit(text_file)
    rows = check_fabric_within_10_percent(gcp, job, "mlx5_0")
    node = next(r for r in rows if r["name"] == "c-0")
    assert node["cnp_per_s"] == 0 and node["retrans_per_s"] == 0 and not node["straggler"]
    total = rows[-1]
    assert "infiniband" in total["sources"]["fabric"] and "hw_counters" in total["sources"]["retrans"]
    per_nic = tail_json("--nics")
    nic_rows = [r for r in per_nic if r["kind"] == "nic" and r["name"].startswith("c-1/")]
    assert sorted(r["name"].split("/")[1] for r in nic_rows if r["role"] == "fabric") == [f"mlx5_{i}" for i in range(8)]
    assert {r["name"].split("/")[1] for r in nic_rows if r["role"] == "host"} == {"enp0s19", "enp192s20"}
    table = CliRunner().invoke(main, ["--project", PROJECT, "metrics", "tail", "--cluster", "c", "--once"])
    assert "FABRIC: the 8 RDMA NICs' own counters (/sys/class/infiniband" in table.stdout, table.stdout
    assert cli("job", "cancel", job).exit_code == 0


@pytest.mark.slow
def test_a3_mega_shows_its_tcpxo_gvnics_and_says_it_has_no_cnps(gcp, text_file):
    up(gcp, "a3-megagpu-8g")
    job = submit(text_file)
    rows = check_fabric_within_10_percent(gcp, job, "enp6s0")
    node = next(r for r in rows if r["name"] == "c-1")
    assert node["cnp_per_s"] is None and node["unmeasured"]["cnp_per_s"].startswith("no RoCE: TCPXO")
    assert node["retrans_per_s"] == 0  # the kernel's TCP counters, measured
    table = CliRunner().invoke(main, ["--project", PROJECT, "metrics", "tail", "--cluster", "c", "--once"])
    assert "no RoCE" in table.stdout and "TCPXO" in table.stdout
    assert cli("job", "cancel", job).exit_code == 0


@pytest.mark.slow
def test_a2_host_nic_is_its_fabric(gcp, text_file):
    up(gcp, "a2-highgpu-1g")
    job = submit(text_file)
    rows = check_fabric_within_10_percent(gcp, job, "ens4", host_is_fabric=True)
    assert "no GPU NICs" in rows[-1]["sources"]["fabric"]
    assert cli("job", "cancel", job).exit_code == 0


@pytest.mark.slow
def test_a_slowed_nic_makes_its_node_the_straggler_with_retransmits_and_cnps(gcp, text_file):
    up(gcp, "a3-ultragpu-8g", zone="us-central1-b")
    gcp.faults.update({"slow_nic": ["c-1"]})
    job = submit(text_file)
    wait_for(lambda: all(len(training_points(gcp, n, "mlx5_0", "fabric")) >= 3 for n in ("c-0", "c-1")),
             what="three NIC points per node while the job trains", timeout=240)
    rows = tail_json()
    nodes = {r["name"]: r for r in rows if r["kind"] == "node"}
    assert nodes["c-1"]["straggler"] and not nodes["c-0"]["straggler"], nodes
    (why,) = nodes["c-1"]["straggler_reasons"]
    assert "NIC mlx5_2" in why and "retransmits" in why and "CNPs" in why, why
    assert nodes["c-1"]["retrans_per_s"] > 0 and nodes["c-1"]["cnp_per_s"] > 0
    assert nodes["c-0"]["retrans_per_s"] == 0
    retrans = [v for _t, v in nic_points(gcp, "retrans_per_s")[("c-1", "mlx5_2", "fabric")]]
    assert sum(v > 0 for v in retrans) >= 3  # rising all along: every training interval retransmitted more
    assert cli("job", "cancel", job).exit_code == 0


# --- the same series in report and dashboard, and at scale (seeded as the samplers would write them) -------------


def test_report_and_dashboard_carry_the_fabric_apart_from_the_host_nics(gcp, tmp_path, monkeypatch):
    from gcpgpu.fakes.monitoring.testing import emulated_cluster, emulated_nics
    from gcpgpu.gcp.clients import Clients
    from gcpgpu.metrics.dashboard import dashboard_json
    from gcpgpu.metrics.target import resolve

    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "metrics-test")
    emulated_cluster(gcp, "demo", 4, machine_type="a3-megagpu-8g", running_minutes=30)
    emulated_nics(gcp, "demo", 4, machine_type="a3-megagpu-8g", slow={"demo-2": 0.05})
    result = CliRunner().invoke(main, ["--format", "json", "metrics", "report", "--cluster", "demo", "--since", "30m",
                                       "-o", str(tmp_path / "r.html")])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert "NIC sent: GPU fabric" in summary["panels"] and "NIC sent: host NICs" in summary["panels"]
    assert "retransmits: the node's TCP" in summary["panels"]
    assert "NIC sent: GPU fabric" in (tmp_path / "r.html").read_text()
    target = resolve(Clients(emulator=gcp.address, project="metrics-test"), "metrics-test", "cluster", "demo")
    tiles = dashboard_json(target)["mosaicLayout"]["tiles"]
    nic = {t["widget"]["title"]: t["widget"]["xyChart"]["dataSets"][0]["timeSeriesQuery"]["timeSeriesFilter"]["filter"]
           for t in tiles if "nic/" in json.dumps(t)}
    assert 'metric.label.role = "fabric"' in nic["GPU fabric sent per node (the NICs' own counters)"]
    assert 'metric.label.role = "host"' in nic["Host NICs sent per node (the NICs' own counters)"]
    assert "Congestion notifications (CNPs) per node" not in nic  # TCPXO has none


def test_a_big_clusters_tail_shows_the_node_with_a_slow_nic(gcp):
    from gcpgpu.fakes.monitoring.testing import emulated_cluster, emulated_nics

    emulated_cluster(gcp, "big", 80, machine_type="a3-megagpu-8g")
    emulated_nics(gcp, "big", 80, machine_type="a3-megagpu-8g", slow={"big-33": 0.1})
    result = CliRunner().invoke(main, ["--project", "metrics-test", "metrics", "tail", "--cluster", "big", "--once",
                                       "--format", "json"])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    slow = next(r for r in rows if r["name"] == "big-33")  # one of 80 nodes: shown because it straggles
    assert slow["straggler"] and "NIC enp6s0" in slow["straggler_reasons"][0], slow
    assert len([r for r in rows if r["kind"] == "node"]) < 80


@pytest.mark.slow
def test_cluster_doctor_names_the_node_and_nic_a_slowed_nic_is_on(gcp, text_file):
    up(gcp, "a3-ultragpu-8g", zone="us-central1-b")
    gcp.faults.update({"slow_nic": ["c-1"]})
    job = submit(text_file)
    wait_for(lambda: all(len(training_points(gcp, n, "mlx5_0", "fabric")) >= 2 for n in ("c-0", "c-1")),
             what="two NIC points per node while the job trains", timeout=240)
    result = cli("cluster", "doctor", "c")
    assert result.exit_code == 1, result.output
    assert "network: c-1 (rank 1): NIC mlx5_2 at" in result.output and "retransmits" in result.output
    assert "c-0 (rank 0): NIC" not in result.output
    table = result.stdout
    assert "Cluster c: network (each NIC's own counters" in table and "10/10" in table  # 8 RDMA + 2 gVNICs up
    health = json.loads(cli("--format", "json", "cluster", "doctor", "c").stdout.split("\n]\n")[0] + "\n]")
    assert {n["host_tuning"] for n in health} == {"on"}  # the startup script's TCP settings are in force
    assert cli("job", "cancel", job).exit_code == 0


def test_cluster_doctor_says_when_the_host_tcp_tuning_is_not_in_force(gcp):
    result = cli("cluster", "up", "c", "--machine-type", "a2-highgpu-1g", "--nodes", "1", "--zone", "us-central1-a",
                 "--no-host-tuning", "--yes")
    assert result.exit_code == 0, result.output
    assert "host tuning: off (--no-host-tuning)" in result.output
    doctor = cli("--format", "json", "cluster", "doctor", "c")
    (node,) = json.loads(doctor.stdout.split("\n]\n")[0] + "\n]")
    assert node["host_tuning"] == "off (rmem_max 212992)"


def test_cluster_doctor_active_measures_the_rings_latency_against_compact_placement(gcp):
    up(gcp, "a3-megagpu-8g")
    result = cli("cluster", "doctor", "c", "--active")
    assert result.exit_code == 0, result.output
    assert "RING RTT µs" in result.stdout
    rtts = {m.group(1): int(m.group(2)) for m in re.finditer(r"(c-\d)=(\d+)", result.stdout)}
    assert set(rtts) == {"c-0", "c-1"} and all(v < 50 for v in rtts.values()), rtts  # the seed's compact figure
    gcp.faults.update({"slow_nic": ["c-1"]})
    slow = cli("cluster", "doctor", "c", "--active")
    assert slow.exit_code == 1
    assert re.search(r"c-0 \(rank 0\):.*round trip to c-1 \d+ µs, expected under 50 inside a compact placement",
                     slow.output), slow.output
