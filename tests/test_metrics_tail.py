"""`gcpgpu metrics tail` against the emulator: rows, stragglers, n/a, formats, and calls that do not grow."""

from __future__ import annotations

import csv
import io
import json

import pytest
from click.testing import CliRunner

from gcpgpu.cli import main
from gcpgpu.fakes.monitoring.testing import emulated_cluster
from gcpgpu.gcp.clients import Clients
from gcpgpu.metrics.tail import Tail, run

PROJECT = "metrics-test"


@pytest.fixture
def env(gcp, monkeypatch):
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", PROJECT)
    return gcp


def tail(*args: str):
    return CliRunner().invoke(main, ["metrics", "tail", *args])


def lines_of(output: str, name: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith(name + " ")]


def test_four_nodes_with_one_straggler_marks_that_node(env):
    emulated_cluster(env, "demo", 4)
    env.monitoring.straggler("demo-2", factor=0.5)
    result = tail("--cluster", "demo", "--once")
    assert result.exit_code == 0, result.output
    for name in ("demo-0", "demo-1", "demo-3"):
        (line,) = lines_of(result.stdout, name)
        assert "straggler" not in line
    (slow,) = lines_of(result.stdout, "demo-2")
    assert "straggler: GPU" in slow and "vs median" in slow
    assert "cluster demo" in result.stdout and "of a3-highgpu-8g (1000 Gbit/s each)" in result.stdout
    header = result.stdout.splitlines()[1]
    for column in ("SENT Gb/s", "RECV Gb/s", "LINK", "PKT/s", "GPU", "GPU MEM", "SM", "TENSOR", "NVLINK", "PCIE",
                   "TOK/s", "MFU", "LAST 15 MIN"):
        assert column in header


def test_json_rows_carry_numbers_link_share_and_history(env):
    emulated_cluster(env, "demo", 2)
    result = tail("--cluster", "demo", "--once", "--format", "json")
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert [r["name"] for r in rows] == ["demo-0", "demo-1", "cluster demo"]
    node = rows[0]
    assert node["kind"] == "node" and node["rank"] == 0 and node["straggler"] is False
    assert 0 < node["net_sent_gbps"] < 1000 and node["link_share_pct"] == pytest.approx(
        max(node["net_sent_gbps"], node["net_recv_gbps"]) / 1000 * 100, rel=1e-3)
    assert 80 < node["gpu_util_pct"] <= 100 and 60 < node["gpu_mem_pct"] < 80
    assert len(node["history"]) == 15 and node["history_of"] == "gpu_util_pct"
    total = rows[-1]
    assert total["net_sent_gbps"] == pytest.approx(rows[0]["net_sent_gbps"] + rows[1]["net_sent_gbps"], rel=1e-3)


def test_csv_has_one_header_and_a_row_per_node_and_gpu(env):
    emulated_cluster(env, "demo", 2)
    env.monitoring.straggler("demo-1", factor=0.4, gpu=5)
    result = tail("--cluster", "demo", "--gpus", "--once", "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert len(rows) == 2 + 16 + 1
    gpus = [r for r in rows if r["kind"] == "gpu"]
    assert [r["name"] for r in gpus if r["straggler"] == "True"] == ["demo-1/gpu5"]
    assert all(r["net_sent_gbps"] == "" for r in gpus)  # network is per VM: empty, not a made-up 0
    nodes = [r for r in rows if r["kind"] == "node"]
    assert all(r["straggler"] == "False" for r in nodes)  # one slow GPU of eight is not a slow node


def test_missing_agents_show_na_never_zero_with_one_hint(env):
    emulated_cluster(env, "demo", 3)
    env.monitoring.agents(dcgm=False)
    env.monitoring.agents(ops_agent=False, instances=["demo-1"])
    result = tail("--cluster", "demo", "--once")
    (bare,) = lines_of(result.stdout, "demo-1")
    # GPU and GPU MEM; and FABRIC, HOST and RETX: no node here samples its NICs (gcpgpu.node.nics)
    assert bare.count("n/a") == 5
    (other,) = lines_of(result.stdout, "demo-0")
    assert other.count("n/a") == 3  # the NICs' own columns alone
    assert "TENSOR" not in result.stdout  # no node reports DCGM: its columns are left out ...
    assert "DCGM" in result.stderr and "Ops Agent" in result.stderr and "demo-1" in result.stderr  # ... with a hint
    rows = [json.loads(line) for line in tail("--cluster", "demo", "--once", "--format", "json").stdout.splitlines()]
    missing = next(r for r in rows if r["name"] == "demo-1")
    assert missing["gpu_util_pct"] is None and missing["sm_active_pct"] is None and missing["tokens_per_s"] is None


def test_hints_are_said_once_per_session(env):
    emulated_cluster(env, "demo", 2)
    out, err = io.StringIO(), io.StringIO()
    session = Tail(Clients(emulator=env.address, project=PROJECT), PROJECT, "cluster", "demo")
    run(session, "json", interval=1, once=False, out=out, err=err, max_refreshes=2)
    assert len(out.getvalue().splitlines()) == 2 * 3
    assert err.getvalue().count("gcpgpu.node.reporter") == 1


@pytest.mark.parametrize("per_gpu", [False, True])
def test_api_calls_per_refresh_do_not_grow_with_the_cluster(env, per_gpu):
    calls = {}
    for nodes in (2, 64):
        env.reset()
        emulated_cluster(env, f"c{nodes}", nodes)
        session = Tail(Clients(emulator=env.address, project=PROJECT), PROJECT, "cluster", f"c{nodes}", per_gpu=per_gpu)
        session.refresh()  # the first refresh also finds the VMs (one Compute list call)
        env.requests.clear()
        snapshot = session.refresh()
        calls[nodes] = (len(env.requests.all(api="monitoring")), len(env.requests.all(api="compute")))
        assert len([r for r in snapshot.rows if r.kind == "node"]) == nodes
    # One ListTimeSeries per column (GPU memory: used and free apart), whatever the size.
    assert calls[2] == calls[64] == (17, 0)  # 13 columns and the 4 NIC metrics (metrics/nics.py)


def test_trainer_throughput_shows_next_to_the_node_metrics(env):
    from gcpgpu.node.reporter import Reporter

    emulated_cluster(env, "demo", 2)
    client = Clients(emulator=env.address, project=PROJECT).monitoring()
    reporter = Reporter("/nonexistent", project=PROJECT, kind="cluster", name="demo", client=client)
    reporter.pending.add({"step": 10, "tokens_per_s": 5000.0, "world_size": 16, "mfu": 0.41, "loss": 3.2})
    assert reporter.flush()
    rows = [json.loads(line) for line in tail("--cluster", "demo", "--once", "--format", "json").stdout.splitlines()]
    assert rows[-1]["tokens_per_s"] == 80000.0 and rows[-1]["mfu"] == 0.41
    table = tail("--cluster", "demo", "--once")
    (total,) = [line for line in table.stdout.splitlines() if line.startswith("cluster demo ")]
    assert "80.0k" in total and "41.0%" in total
    assert "reporter" not in table.stderr


def test_a_vertex_job_shows_a_row_per_task(env):
    env.monitoring.add_job("8675309", replicas=3, start=env.clock.now() - 900,
                           stragglers={"workerpool1-1": 0.5})
    result = tail("--job", "projects/p/locations/us-central1/customJobs/8675309", "--once", "--format", "json")
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert [(r["name"], r["rank"]) for r in rows[:-1]] == [("workerpool0-0", 0), ("workerpool1-0", 1),
                                                           ("workerpool1-1", 2)]
    assert [r["name"] for r in rows if r["straggler"]] == ["workerpool1-1"]
    assert rows[0]["packets_sent_per_s"] is None and rows[0]["link_share_pct"] is None
    assert rows[-1]["tokens_per_s"] is None


def test_a_vertex_jobs_trainer_numbers_show_on_its_total_row(env):
    from gcpgpu.node.reporter import Reporter

    env.monitoring.add_job("8675309", replicas=2, start=env.clock.now() - 300)
    client = Clients(emulator=env.address, project=PROJECT).monitoring()
    reporter = Reporter("/nonexistent", project=PROJECT, kind="job", name="8675309", client=client)
    reporter.pending.add({"step": 3, "tokens_per_s": 1500.0, "world_size": 2, "mfu": 0.3})
    assert reporter.flush()
    rows = [json.loads(line) for line in tail("--job", "8675309", "--once", "--format", "json").stdout.splitlines()]
    assert rows[-1]["name"] == "job 8675309" and rows[-1]["tokens_per_s"] == 3000.0 and rows[-1]["mfu"] == 0.3


@pytest.mark.parametrize("args, words", [
    ([], "exactly one of --cluster NAME or --job JOB"),
    (["--cluster", "a", "--job", "1"], "exactly one of"),
    (["--cluster", "Bad_Name"], "--cluster 'Bad_Name' is not a cluster name"),
    (["--job", "my-job"], "--job 'my-job' is not a job: give what 'gcpgpu job submit' printed"),
    (["--cluster", "demo", "--interval", "0.2"], "--interval 0.2 must be between 1 and 3600"),
    (["--job", "123", "--gpus"], "--gpus needs --cluster"),
    (["--cluster", "demo", "--format", "xml"], "'xml' is not one of"),
])
def test_bad_input_is_refused_before_any_api_call(env, args, words):
    result = tail(*args)
    assert result.exit_code == 2 and words in result.output
    assert len(env.requests) == 0


def test_an_unknown_cluster_is_a_one_line_cloud_error(env):
    result = tail("--cluster", "ghost", "--once")
    assert result.exit_code == 1 and "no cluster named ghost in project metrics-test with nodes" in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_the_global_json_format_streams_rows_too(env):
    emulated_cluster(env, "demo", 1)
    result = CliRunner().invoke(main, ["--format", "json", "metrics", "tail", "--cluster", "demo", "--once"])
    assert [json.loads(line)["name"] for line in result.stdout.splitlines()] == ["demo-0", "cluster demo"]


def test_a_job_the_emulators_vertex_ai_runs_has_metrics_per_replica(env):
    from google.cloud import aiplatform_v1 as aip

    env.vertex.timings.update(queued_s=0.0, pending_s=0.0)  # RUNNING at once, so this minute has a sample
    jobs = Clients(emulator=env.address, project=PROJECT).job_service("us-central1")
    machine = aip.MachineSpec(machine_type="a2-highgpu-8g", accelerator_type="NVIDIA_TESLA_A100", accelerator_count=8)
    pools = [aip.WorkerPoolSpec(replica_count=n, machine_spec=machine,
                                container_spec=aip.ContainerSpec(image_uri="us-docker.pkg.dev/p/r/other:1"))
             for n in (1, 2)]
    job = jobs.create_custom_job(parent=f"projects/{PROJECT}/locations/us-central1",
                                 custom_job=aip.CustomJob(display_name="m", job_spec=aip.CustomJobSpec(worker_pool_specs=pools)))
    result = tail("--job", job.name.rsplit("/", 1)[1], "--once", "--format", "json")
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert [r["name"] for r in rows] == ["workerpool0-0", "workerpool1-0", "workerpool1-1", f"job {job.name.rsplit('/', 1)[1]}"]
    # Busy GPUs from the moment the replicas run; the first minute's network counter counts the minute
    # before the job ran, so it exists but is near zero.
    assert all(r["gpu_util_pct"] > 80 and r["net_sent_gbps"] is not None for r in rows[:-1])


@pytest.mark.parametrize("job, name", [("vertex:us-central1:8675309", "job 8675309"),
                                       ("cluster:demo:train-0d21b9", "cluster demo")])
def test_job_ids_as_job_submit_prints_them(env, job, name):
    emulated_cluster(env, "demo", 2)
    env.monitoring.add_job("8675309", replicas=1, start=env.clock.now() - 300)
    result = tail("--job", job, "--once", "--format", "json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout.splitlines()[-1])["name"] == name
