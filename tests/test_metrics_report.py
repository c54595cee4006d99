"""`gcpgpu metrics report`: matplotlib panels to PNG and HTML, stragglers highlighted."""

from __future__ import annotations

import base64
import re
import struct

import pytest
from click.testing import CliRunner

from gcpgpu.cli import main
from gcpgpu.fakes.monitoring.testing import emulated_cluster
from gcpgpu.gcp.clients import Clients
from gcpgpu.metrics.reporter import Reporter

PROJECT = "metrics-test"


@pytest.fixture
def env(gcp, monkeypatch):
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", PROJECT)
    emulated_cluster(gcp, "demo", 4, running_minutes=90)
    gcp.monitoring.straggler("demo-3", factor=0.55)
    return gcp


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def report(*args: str):
    return CliRunner().invoke(main, ["metrics", "report", "--cluster", "demo", *args])


def test_png_report_is_a_real_picture_of_every_panel(env, tmp_path):
    out = tmp_path / "demo.png"
    result = report("--since", "1h", "-o", str(out))
    assert result.exit_code == 0, result.output
    assert f"Wrote {out}" in result.stderr and "stragglers: demo-3" in result.stderr
    data = out.read_bytes()
    width, height = png_size(data)
    assert width >= 1000 and height >= 1000  # two columns of panels, several rows
    assert len(data) > 50_000  # lines drawn, not an empty canvas


def test_html_report_embeds_the_figure_and_a_table_of_averages(env, tmp_path):
    client = Clients(emulator=env.address, project=PROJECT).monitoring()
    rep = Reporter("/nonexistent", project=PROJECT, kind="cluster", name="demo", client=client)
    rep.pending.add({"step": 5, "tokens_per_s": 4000.0, "world_size": 32, "mfu": 0.38, "loss": 2.5, "step_time_s": 0.4,
                     "data_wait_frac": 0.01})
    assert rep.flush()
    out = tmp_path / "demo.html"
    result = CliRunner().invoke(main, ["--format", "json", "metrics", "report", "--cluster", "demo", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert '"stragglers": [\n    "demo-3"\n  ]' in result.stdout
    page = out.read_text()
    assert "<table>" in page and re.search(r"straggler: [^<]*GPU utilization [0-9.]+ % vs median", page)
    assert "training throughput" in page and "Trainer averages" in page
    for node in ("demo-0", "demo-1", "demo-2", "demo-3"):
        assert f"<td>{node}</td>" in page
    (image,) = re.findall(r'src="data:image/png;base64,([^"]+)"', page)
    png_size(base64.b64decode(image))


def test_report_makes_one_call_per_metric_type(env, tmp_path):
    env.requests.clear()
    assert report("-o", str(tmp_path / "r.png")).exit_code == 0
    monitoring = env.requests.all(api="monitoring")
    # 11 node metrics (GPU memory used and free apart) + 5 trainer ones
    assert len(monitoring) == 16 and len({r.path for r in monitoring}) == 1
    assert len(env.requests.all(api="compute")) == 1


@pytest.mark.parametrize("args, words", [
    (["-o", "report.pdf"], "must end in .html or .png"),
    (["-o", "/no/such/folder/r.png"], "does not exist"),
    (["--since", "soon", "-o", "r.png"], "--since 'soon' is not a duration"),
    (["--since", "30s", "-o", "r.png"], "shorter than a minute"),
    (["--since", "7w", "-o", "r.png"], "longer than six weeks"),
])
def test_bad_report_input_is_refused_before_any_api_call(env, args, words):
    env.requests.clear()
    result = report(*args)
    assert result.exit_code == 2 and words in result.output
    assert len(env.requests) == 0


def test_a_job_report(gcp, monkeypatch, tmp_path):
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", PROJECT)
    gcp.monitoring.add_job("555", replicas=2, start=gcp.clock.now() - 1800)
    out = tmp_path / "job.png"
    result = CliRunner().invoke(main, ["metrics", "report", "--job", "555", "--since", "30m", "-o", str(out)])
    assert result.exit_code == 0, result.output
    png_size(out.read_bytes())
