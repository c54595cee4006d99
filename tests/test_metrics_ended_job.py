"""Issue 50: what the metrics views say about a job that has ended, and about a machine with one GPU.

An ended job's `metrics tail` showed "its last numbers", which changed between refreshes (0 % GPU, then
95 % a minute later), while `metrics report` of the same job averaged something else; the report drew
each point after the minute it describes; `cluster doctor --active` printed an NVLink bandwidth for a
one-GPU a2-highgpu-1g; `metrics report --job` of a job that does not exist exited 0 with the last hour.
"""

from __future__ import annotations

import datetime as dt
import json

import pytest
from click.testing import CliRunner
from helpers import wait_for

from gcpgpu.cli import main
from gcpgpu.times import parse_timestamp

PROJECT = "test-proj"


def cli(*argv: str):
    return CliRunner().invoke(main, ["--project", PROJECT, "--region", "us-central1", *argv])


def state(job_id: str) -> dict:
    got = cli("--format", "json", "job", "status", job_id)
    assert got.exit_code == 0, got.output
    return json.loads(got.stdout)


@pytest.fixture
def ended_job(gcp) -> str:
    """A two-node job on one-GPU machines that ran six minutes of the emulator's clock, then ended."""
    assert cli("cluster", "up", "t", "--machine-type", "a2-highgpu-1g", "--nodes", "2", "--zone", "us-central1-a",
               "--yes").exit_code == 0
    gcp.jobs.agent.simulated_run_s = 300.0  # an image the emulator does not run: busy until its clock says
    submitted = cli("job", "submit", "--cluster", "t", "--nodes", "2", "--image", "busybox")
    assert submitted.exit_code == 0, submitted.output
    job_id = submitted.stdout.splitlines()[0]
    wait_for(lambda: state(job_id)["state"] == "RUNNING", timeout=60, what="the job running")
    for _ in range(6):  # minute by minute, as the agents write their samples
        gcp.clock.advance(60)
    wait_for(lambda: state(job_id)["state"] == "SUCCEEDED", timeout=60, what="the job's end")
    gcp.clock.advance(30)
    return job_id


def tail(job_id: str) -> dict[str, dict]:
    got = cli("--format", "json", "metrics", "tail", "--once", "--job", job_id)
    assert got.exit_code == 0, got.output
    return {row["name"]: row for row in map(json.loads, got.stdout.splitlines())}


def test_an_ended_jobs_tail_shows_its_runs_averages_the_same_at_each_refresh_and_as_the_report(gcp, ended_job, tmp_path):
    first = tail(ended_job)
    gcp.clock.advance(60)
    second = tail(ended_job)
    gcp.clock.advance(3600)  # long after its end
    third = tail(ended_job)
    columns = ("gpu_util_pct", "net_sent_gbps", "sm_active_pct", "pcie_gbytes_per_s")
    nodes = ["t-0", "t-1"]
    for node in nodes:
        assert first[node]["note"].endswith("averages over its run"), first[node]
        assert first[node]["gpu_util_pct"] > 80, first[node]  # busy through its run, not an idle minute after it
        for column in columns:
            assert first[node][column] == second[node][column] == third[node][column], (node, column)
    report = cli("--format", "json", "metrics", "report", "--job", ended_job, "-o", str(tmp_path / "r.html"))
    assert report.exit_code == 0, report.output
    averages = json.loads(report.stdout)["averages"]
    for node in nodes:
        for column in columns:
            assert averages[node][column] == pytest.approx(first[node][column], abs=1e-3), (node, column)


def test_a_one_gpu_machine_shows_no_nvlink_and_no_hint_to_install_dcgm_for_it(gcp, ended_job):
    rows = tail(ended_job)
    assert rows["t-0"]["nvlink_gbytes_per_s"] is None and rows["t-0"]["sm_active_pct"] is not None
    hints = cli("metrics", "tail", "--once", "--job", ended_job)
    assert hints.exit_code == 0 and "DCGM" not in hints.stderr, hints.stderr
    doctor = cli("--format", "json", "cluster", "doctor", "t", "--active")
    assert doctor.exit_code == 0, doctor.output
    assert "230" not in doctor.stdout and '"nvlink": "none"' in doctor.stdout, doctor.stdout


def test_a_report_draws_each_point_in_the_middle_of_the_interval_it_describes(gcp, ended_job, monkeypatch, tmp_path):
    """Monitoring stamps a point at the end of its interval; drawn there, the job's last busy minute fell after
    its shaded run. Each point is drawn at its interval's middle, so every busy one overlaps the run."""
    from matplotlib.dates import num2date

    import gcpgpu.metrics.report as report_module

    made = []
    real = report_module.build_figure
    monkeypatch.setattr(report_module, "build_figure", lambda *a: made.append((a, real(*a))) or made[-1][1])
    assert cli("metrics", "report", "--job", ended_job, "-o", str(tmp_path / "r.png")).exit_code == 0
    status = state(ended_job)
    started, ended = parse_timestamp(status["started"]), parse_timestamp(status["ended"])
    ((_target, panel_list, _slow, window, _job), figure) = made[0]
    (panel,) = [p for p in panel_list if p.title == "GPU utilization"]
    (gpu,) = [ax for ax in figure.axes if ax.get_title(loc="left") == "GPU utilization"]
    stamped = sorted(t for pts in panel.lines.values() for t, _v in pts)
    drawn = sorted(num2date(x).timestamp() for line in gpu.get_lines() for x in line.get_xdata(orig=False))
    assert drawn == pytest.approx([t - window.period / 2 for t in stamped], abs=1e-3)
    half = window.period / 2
    busy = [num2date(x).timestamp() for line in gpu.get_lines() for x, y in zip(*line.get_data(orig=False),
                                                                                  strict=True) if y > 50]
    assert busy and all(x - half < ended and x + half > started for x in busy), (
        [dt.datetime.fromtimestamp(t, dt.timezone.utc) for t in busy], status["started"], status["ended"])


def test_a_report_of_a_job_that_does_not_exist_exits_1_and_writes_nothing(gcp, tmp_path):
    assert cli("cluster", "up", "team", "--machine-type", "a2-highgpu-1g", "--nodes", "1", "--zone",
               "us-central1-a", "--yes").exit_code == 0
    out = tmp_path / "r.html"
    got = cli("metrics", "report", "--job", "cluster:team:nosuch", "-o", str(out))
    assert got.exit_code == 1, got.output
    assert "nosuch" in got.output and "--cluster" in got.output and not out.exists()
