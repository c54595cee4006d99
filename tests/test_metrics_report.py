"""`gcpgpu metrics report`: matplotlib panels to PNG and HTML, stragglers highlighted."""

from __future__ import annotations

import base64
import json
import re
import struct

import pytest
from click.testing import CliRunner

from gcpgpu.cli import main
from gcpgpu.fakes.monitoring.testing import emulated_cluster
from gcpgpu.gcp.clients import Clients
from gcpgpu.metrics.query import Window
from gcpgpu.node.reporter import Reporter

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
    # 11 node metrics (GPU memory used and free apart), the 4 NIC ones + 5 trainer ones + the jobs' goodput
    assert len(monitoring) == 21 and len({r.path for r in monitoring}) == 1
    assert len(env.requests.all(api="compute")) == 1


def test_a_report_draws_the_goodput_its_jobs_ended_with(env, tmp_path):
    from gcpgpu.jobs import goodput, ids

    got = {"percent": 81.5, "productive_s": 815.0, "node_s": 1000.0,
           "lost_s": dict.fromkeys(goodput.PARTS, 0.0) | {"recovery": 185.0}}
    client = Clients(emulator=env.address, project=PROJECT).monitoring()
    client.create_time_series(request={"name": f"projects/{PROJECT}", "time_series": goodput.series(
        PROJECT, ids.parse("cluster:demo:train-abc123"), got, env.clock.now() - 600)})
    out = tmp_path / "demo.html"
    result = CliRunner().invoke(main, ["--format", "json", "metrics", "report", "--cluster", "demo", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "goodput (share of node-time that trained)" in json.loads(result.stdout)["panels"]
    assert re.search(r"goodput \(share of node-time that trained\) 81\.5 %", out.read_text())


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


# The figure itself, inspected: a cluster a few minutes old, whose trainer has reported once.
def _figure_of_report(gcp, monkeypatch, tmp_path, minutes: float, since: str):
    import matplotlib.dates as mdates

    import gcpgpu.metrics.report as report_module

    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", PROJECT)
    emulated_cluster(gcp, "young", 2, running_minutes=minutes)
    client = Clients(emulator=gcp.address, project=PROJECT).monitoring()
    rep = Reporter("/nonexistent", project=PROJECT, kind="cluster", name="young", client=client)
    rep.pending.add({"step": 5, "tokens_per_s": 4000.0, "world_size": 16, "mfu": 0.38, "loss": 2.5,
                     "step_time_s": 0.4, "data_wait_frac": 0.01})
    assert rep.flush()
    made = []
    real = report_module.build_figure
    monkeypatch.setattr(report_module, "build_figure", lambda *a: made.append((a, real(*a))) or made[-1][1])
    result = CliRunner().invoke(main, ["metrics", "report", "--cluster", "young", "--since", since,
                                       "-o", str(tmp_path / "r.png")])
    assert result.exit_code == 0, result.output
    (args, fig), = made
    fig.canvas.draw()  # tick labels exist once drawn
    _target, panel_list, _slow, window = args
    axes = {ax.get_title(loc="left"): ax for ax in fig.axes}
    return panel_list, window, axes, mdates


@pytest.mark.parametrize(("minutes", "since"), [(3, "1h"), (1, "2m"), (4000, "3d")])
def test_report_axes_read_at_any_window(gcp, monkeypatch, tmp_path, minutes, since):
    panel_list, window, axes, mdates = _figure_of_report(gcp, monkeypatch, tmp_path, minutes, since)
    assert "training throughput" in axes and "model FLOPs utilization" in axes  # the trainer's own panels
    for panel in panel_list:
        ax = axes[panel.title]
        labels = [t.get_text() for t in ax.get_xticklabels() if t.get_text()]
        assert len(labels) >= 2 and len(set(labels)) == len(labels), (panel.title, labels)  # distinct ticks
        left, right = ax.get_xlim()  # the whole requested window, not just where the data is
        assert left == pytest.approx(mdates.date2num(mdates.num2date(window.start / 86400)), abs=1e-9)
        assert right >= window.end / 86400 - 1e-9
        bottom, top = ax.get_ylim()
        values = [v for pts in panel.lines.values() for _t, v in pts]
        assert bottom <= min(values) and top > max(values) + 0.02 * (top - bottom), panel.title  # none on the edge
        for line in ax.get_lines():
            if len(line.get_xdata()) <= 1:  # a single sample is drawn as a marker, not an invisible line
                assert line.get_marker() not in (None, "", "None") and line.get_markersize() > 0


def test_a_single_sample_is_visible(gcp, monkeypatch, tmp_path):
    panel_list, window, axes, _ = _figure_of_report(gcp, monkeypatch, tmp_path, 3, "1h")
    throughput = axes["training throughput"]
    (line,) = throughput.get_lines()
    assert len(line.get_xdata()) == 1 and line.get_marker() == "o"
    left, right = throughput.get_xlim()
    (x,) = line.get_xdata(orig=False)
    assert left < x < right  # inside the axis, not on its edge


def test_a_job_report_covers_the_jobs_run_not_the_last_hour(gcp, monkeypatch, tmp_path):
    """Issue 24 item 6: `metrics report --job` plotted the last hour, the job squeezed into its right 5 %."""
    import gcpgpu.metrics.jobspan as jobspan
    import gcpgpu.metrics.report as report_module

    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", PROJECT)
    monkeypatch.setattr(jobspan, "clock", gcp.clock.now)
    gcp.vertex.timings["simulated_run_s"] = 600.0  # a 10-minute job, by the emulator's clock
    # An image with no command stays simulated: its run follows the emulator's clock, which the test moves.
    submitted = CliRunner().invoke(main, ["--region", "us-central1", "job", "submit", "--vertex", "--machine-type",
                                          "a2-highgpu-1g", "--image", "busybox"])
    assert submitted.exit_code == 0, submitted.output
    job_id = submitted.stdout.splitlines()[0]
    gcp.clock.advance(600 + 20 * 60)  # it ended 20 minutes ago
    made = []
    real = report_module.build_figure
    monkeypatch.setattr(report_module, "build_figure", lambda *a: made.append(a) or real(*a))
    result = CliRunner().invoke(main, ["metrics", "report", "--job", job_id, "-o", str(tmp_path / "job.png")])
    assert result.exit_code == 0, result.output
    assert f"Plotting job {job_id} from its start at" in result.stderr and "(SUCCEEDED)" in result.stderr
    ((_target, panel_list, _slow, window, _job),) = made
    times = [t for p in panel_list for pts in p.lines.values() for t, _v in pts]
    assert panel_list and times
    run = max(times) - min(times)
    assert run >= 8 * 60 and window.end - window.start <= run + 6 * 60  # the job fills the plot, two-minute margins
    assert window.start <= min(times) and window.end >= max(times)

    # --since still chooses the window.
    made.clear()
    hour = CliRunner().invoke(main, ["metrics", "report", "--job", job_id, "--since", "3h", "-o", str(tmp_path / "h.png")])
    assert hour.exit_code == 0, hour.output
    assert made[0][3].end - made[0][3].start == 3 * 3600


def test_a_jobs_averages_and_stragglers_cover_its_run_not_the_idle_margins():
    """Issue 38: a job report's averages took in the idle minutes either side of the run."""
    from gcpgpu.metrics.report import JobRun, Panel, html_page, stragglers
    from gcpgpu.metrics.sources import CLUSTER
    from gcpgpu.metrics.target import Target

    util = next(m for m in CLUSTER if m.key == "gpu_util_pct")
    idle, busy = [(t * 60.0, 0.0) for t in range(1, 4)], [(t * 60.0, 90.0) for t in range(4, 8)]
    after = [(t * 60.0, 0.0) for t in range(8, 11)]
    slow = [(t, v * 0.5) for t, v in busy]
    panel = Panel(util, "GPU utilization", "%", {"c-0": idle + busy + after, "c-1": idle + slow + after})
    job = JobRun("cluster:c:train-abc123", "train", 3 * 60.0, 7 * 60.0)
    page = html_page(Target("cluster", "c", "p"), [panel], stragglers([panel], job), Window(0, 660, 60), b"", job)
    assert "<td>c-0</td><td>90.0</td>" in page and "<td>c-1</td><td>45.0</td>" in page, page
    assert "<h1>job train (cluster:c:train-abc123)</h1>" in page and "Averages are over the job's run" in page
    assert "c-1" in stragglers([panel], job)


def test_a_users_lines_that_carry_a_step_are_its_steps():
    from gcpgpu.metrics.steps import parse

    lines = [(1.0, "c-0", "starting"), (2.0, "c-0", "step 1 loss=2.5 lr=0.001 epoch 0"),
             (3.0, "c-1", "step 1 loss=2.5"), (4.0, "c-0", 'Step 2/10, loss: 2.25, lr: 0.001'),
             (5.0, "c-0", '{"step": 3, "loss": 2.0, "lr": 0.001}'), (6.0, "c-0", "resumed at step 2")]
    steps = parse(lines)
    assert [s for _t, s, _v in steps.points] == [1, 2, 3]  # c-0's, the node that printed most
    assert list(steps.fields) == ["loss", "lr"] and steps.series("loss") == [(1, 2.5), (2, 2.25), (3, 2.0)]


@pytest.mark.slow
def test_a_job_report_draws_its_steps_from_its_log_names_the_job_and_shades_its_run(gcp, monkeypatch, tmp_path):
    """Issue 38: a short run was one point per training panel (the minute alignment), titled with the cluster,
    "step time 0.0 s" for steps of tens of milliseconds."""
    pytest.importorskip("torch")
    import matplotlib.dates as mdates

    import gcpgpu.metrics.report as report_module

    cli = ["--project", "test-proj", "--region", "us-central1"]
    up = CliRunner().invoke(main, [*cli, "cluster", "up", "m", "--machine-type", "a2-highgpu-1g", "--nodes", "1",
                                   "--zone", "us-central1-a", "--yes"])
    assert up.exit_code == 0, up.output
    ran = CliRunner().invoke(main, [*cli, "job", "submit", "--cluster", "m", "--name", "short", "--wait", "--",
                                    "--model", "tiny", "--data", "synthetic", "--steps", "8", "--batch-size", "2",
                                    "--seq-len", "16", "--log-every", "1", "--log-json", "train.jsonl"])
    assert ran.exit_code == 0, ran.output
    job_id = ran.stdout.splitlines()[0]
    status = CliRunner().invoke(main, [*cli, "--format", "json", "job", "status", job_id])
    made = []
    real = report_module.build_figure
    monkeypatch.setattr(report_module, "build_figure", lambda *a: made.append((a, real(*a))) or made[-1][1])
    result = CliRunner().invoke(main, [*cli, "metrics", "report", "--job", job_id, "-o", str(tmp_path / "job.html")])
    assert result.exit_code == 0, result.output

    ((target, panel_list, _slow, _window, job), fig), = made
    assert job.name == "short" and fig.get_suptitle().startswith(f"job short ({job_id}): ")
    by_title = {p.title: p for p in panel_list}
    for title in ("loss", "training throughput", "step time", "data-wait share"):
        (line,) = by_title[title].lines.values()
        assert by_title[title].by_step and [s for s, _v in line] == list(range(8)), title  # every step, not a minute
    step_ms = [v for _s, v in next(iter(by_title["step time"].lines.values()))]
    assert by_title["step time"].unit == ("ms" if sorted(step_ms)[4] < 1000 else "s")
    # The node panels (time on x) shade the job's run, from its start to its end.
    run = json.loads(status.stdout)
    fig.canvas.draw()
    for ax in fig.axes:
        if "per step" in ax.get_title(loc="left"):
            continue
        (shade,) = [p for p in ax.patches if p.get_label() == "the job's run"]
        x0, x1 = shade.get_x(), shade.get_x() + shade.get_width()
        assert mdates.num2date(x0).strftime("%Y-%m-%dT%H:%M:%SZ") == run["started"]
        assert mdates.num2date(x1).strftime("%Y-%m-%dT%H:%M:%SZ") == run["ended"]
    page = (tmp_path / "job.html").read_text()
    assert f"<h1>job short ({job_id})</h1>" in page and "step time " in page
    assert f"{target.label}</h1>" not in page
