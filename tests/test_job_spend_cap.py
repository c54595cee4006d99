"""`job submit --max-spend USD`: the job's follower (the cluster's own, after --detach) warns at 80 % and
stops the job at its cap, its trainer checkpointing first (jobs/cluster/spendcap.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from click.testing import CliRunner
from helpers import PROJECT, followers_log, wait_for, webhook_server

from gcpgpu.cli import main
from gcpgpu.cluster import cost

GLOBAL = ["--project", PROJECT, "--region", "us-central1"]
UP = ["--machine-type", "a2-highgpu-1g", "--nodes", "2", "--zone", "us-central1-a", "--yes"]
HOUR = 3600.0


def cli(*argv: str, fmt: str | None = None):
    return CliRunner().invoke(main, [*GLOBAL, *(["--format", fmt] if fmt else []), *argv])


def price() -> float:
    """A node's price per hour as the cloud's catalog (the emulated Billing Catalog) gives it, which COST SO FAR uses."""
    return json.loads(cli("catalog", "show", "a2-highgpu-1g", fmt="json").stdout)["price_per_hour"]


def status(job_id: str) -> dict:
    return json.loads(cli("job", "status", job_id, fmt="json").stdout)


@pytest.fixture
def webhook():
    with webhook_server(fail_first=False) as served:
        yield served


def trainer(run: str) -> list[str]:
    # Far more steps than the test lets it run, and no periodic checkpoint: the one it leaves is the stop's.
    return ["--model", "tiny", "--parallel", "ddp", "--precision", "fp32", "--data", "synthetic", "--steps",
            "1000000", "--batch-size", "8", "--seq-len", "32", "--lr", "1e-3", "--warmup-steps", "5",
            "--log-every", "1", "--ckpt-every", "0", "--log-json", f"/gcs/bkt/{run}/log.jsonl"]


@pytest.mark.slow
def test_a_detached_job_is_stopped_by_the_cluster_itself_at_its_spend_cap(gcp, webhook):
    pytest.importorskip("torch")
    url, hook = webhook
    assert cli("cluster", "up", "c", *UP).exit_code == 0
    cap = round(2 * price(), 2)  # an hour of both nodes
    gcp.storage.insert_bucket(PROJECT, {"name": "bkt"})  # a job mounts only a bucket that exists, as on Google
    bucket = gcp.jobs.agent.storage.root / "gcs" / "bkt"
    # The submitting process is its own, and it is gone before the cap is reached: the cluster enforces it.
    submit = subprocess.run(
        [sys.executable, "-c", "from gcpgpu.cli import main; main()", *GLOBAL, "job", "submit", "--cluster", "c",
         "--detach", "--max-spend", f"{cap}", "--notify", url, "--output-dir", "gs://bkt/run",
         "--env", "GCPGPU_METRICS=0", "--", *trainer("run")],
        env={**os.environ, "GCPGPU_EMULATOR": gcp.address}, capture_output=True, text=True, timeout=120)
    assert submit.returncode == 0, submit.stderr
    job_id = submit.stdout.splitlines()[0]
    assert "this machine may go" in submit.stderr
    wait_for(lambda: f"leading: following job {job_id}" in followers_log(gcp), timeout=120, what="a node leading")
    log = bucket / "run" / "log.jsonl"
    wait_for(lambda: log.is_file() and '"loss"' in log.read_text(), timeout=300, what="the trainer's first step")

    gcp.clock.advance(0.85 * HOUR)  # 85 % of the cap: told once, the job runs on
    wait_for(lambda: "SPEND_WARNING" in [m["event"] for m in hook.got], timeout=120, what="SPEND_WARNING",
             interval=0.5)
    (warned,) = [m for m in hook.got if m["event"] == "SPEND_WARNING"]
    assert warned["job"] == job_id and warned["max_spend_usd"] == cap and 80 <= warned["percent"] < 100
    assert status(job_id)["state"] == "RUNNING"

    gcp.clock.advance(0.2 * HOUR)  # past the cap

    def stopped() -> dict | None:
        got = status(job_id)
        return got if got["state"] in ("SUCCEEDED", "FAILED", "CANCELLED") else None

    try:
        end = wait_for(stopped, timeout=300, what="the job stopped at its cap", interval=1.0)
    except AssertionError:
        raise AssertionError(f"not stopped: {cli('job', 'status', job_id).output}\n{followers_log(gcp)}") from None
    assert end["state"] == "CANCELLED" and end["cause"] == "max spend", end
    assert f"of --max-spend ${cap:,.2f}" in end["error"] and end["cost_usd"] >= cap
    # The trainer saved on the stop's SIGTERM: the only checkpoint of a run with --ckpt-every 0.
    saved = sorted(p.name for p in (bucket / "run" / "checkpoints").glob("step_*"))
    assert saved, followers_log(gcp)
    assert "stopping it so its trainers checkpoint" in followers_log(gcp)  # a node's follower did it
    wait_for(lambda: "CANCELLED" in [m["event"] for m in hook.got], timeout=60, what="CANCELLED at the webhook")
    (told,) = [m for m in hook.got if m["event"] == "CANCELLED"]
    assert told["cause"] == "max spend" and told["spent_usd"] >= cap and told["max_spend_usd"] == cap
    assert [m["event"] for m in hook.got].count("SPEND_WARNING") == 1


@pytest.mark.parametrize("value", ["-5", "lots", "0"])
def test_a_bad_spend_cap_is_refused_in_one_line_before_any_call(gcp, value):
    got = cli("job", "submit", "--cluster", "c", "--image", "busybox", "--max-spend", value)
    assert got.exit_code == 2, got.output
    (line,) = got.stderr.strip().splitlines()
    assert "--max-spend" in line
    assert gcp.requests.all() == []


def test_a_vertex_job_has_no_spend_cap(gcp):
    got = cli("job", "submit", "--vertex", "--machine-type", "a2-highgpu-1g", "--image", "busybox",
              "--max-spend", "100")
    assert got.exit_code == 2 and "--max-spend applies to --cluster jobs" in got.stderr


def statuses(gcp, cluster: str) -> dict[str, str]:
    found = gcp.compute.list(PROJECT, "zones/us-central1-a/instances")
    return {i["name"]: i["status"] for i in found if i["name"].startswith(f"{cluster}-")}


def test_a_cluster_stops_its_job_and_itself_at_its_own_spend_cap(gcp, webhook):
    url, hook = webhook
    gcp.jobs.agent.simulated_run_s = 10 * HOUR  # of the emulator's clock: it runs on until stopped
    cap = round(2 * price(), 2)  # an hour of both nodes
    up = cli("cluster", "up", "c", *UP, "--max-spend", f"{cap}", "--notify", url)
    assert up.exit_code == 0, up.output
    submitted = cli("job", "submit", "--cluster", "c", "--image", "busybox")  # simulated; nothing here follows it
    assert submitted.exit_code == 0, submitted.output
    job_id = submitted.stdout.splitlines()[0]
    wait_for(lambda: f"leading: following job {job_id}" in followers_log(gcp), timeout=120, what="a node leading")

    gcp.clock.advance(0.85 * HOUR)
    wait_for(lambda: "SPEND_WARNING" in [m["event"] for m in hook.got], timeout=120, what="SPEND_WARNING")
    assert statuses(gcp, "c") == {"c-0": "RUNNING", "c-1": "RUNNING"}
    gcp.clock.advance(0.2 * HOUR)
    wait_for(lambda: set(statuses(gcp, "c").values()) == {"TERMINATED"}, timeout=120, what="the cluster stopped")
    end = status(job_id)
    assert end["state"] == "CANCELLED" and end["cause"] == "cluster max spend", end
    assert f"of its --max-spend ${cap:,.2f}" in end["error"]
    events = [m["event"] for m in hook.got]
    assert events.count("SPEND_WARNING") == 1 and events[-1] == "SPEND_CAPPED", hook.got
    capped = hook.got[-1]
    assert capped["cluster"] == "c" and capped["max_spend_usd"] == cap and capped["spent_usd"] >= cap
    shown = json.loads(cli("cluster", "status", "c", fmt="json").stdout)
    assert shown["max_spend"]["usd"] == cap and shown["max_spend"]["stopped"], shown.get("max_spend")
    assert "notify" not in json.dumps(shown["max_spend"])  # a webhook URL may hold a token


def test_max_hourly_cost_refuses_a_plan_over_it_before_any_call(gcp):
    price = cost.node_price("a2-highgpu-1g", "STANDARD")  # a plan calls no API: the cache's or the bundled price
    over = cli("cluster", "up", "c", *UP, "--max-hourly-cost", f"{2 * price - 1:.2f}")
    assert over.exit_code == 2, over.output
    (line,) = over.stderr.strip().splitlines()
    assert "--max-hourly-cost" in line and f"${2 * price:,.2f}/hour" in line
    assert gcp.requests.all() == []
    for bad in ("-3", "cheap"):
        got = cli("cluster", "up", "c", *UP, "--max-hourly-cost", bad)
        assert got.exit_code == 2 and "--max-hourly-cost" in got.stderr and gcp.requests.all() == []
    for bad in ("-3", "x"):
        got = cli("cluster", "up", "c", *UP, "--max-spend", bad)
        assert got.exit_code == 2 and "--max-spend" in got.stderr and gcp.requests.all() == []
    assert cli("cluster", "up", "c", *UP, "--max-hourly-cost", f"{2 * price + 1:.2f}").exit_code == 0


def test_cluster_up_again_with_max_spend_puts_the_cap_on_the_nodes_it_finds(gcp):
    assert cli("cluster", "up", "c", *UP).exit_code == 0
    assert "max_spend" not in json.loads(cli("cluster", "status", "c", fmt="json").stdout) or \
        json.loads(cli("cluster", "status", "c", fmt="json").stdout)["max_spend"] is None
    again = cli("cluster", "up", "c", *UP, "--max-spend", "40")
    assert again.exit_code == 0, again.output
    assert "max spend $40.00 set on its nodes" in again.output
    assert json.loads(cli("cluster", "status", "c", fmt="json").stdout)["max_spend"] == {"usd": 40.0}
    for inst in gcp.compute.list(PROJECT, "zones/us-central1-a/instances"):
        items = {i["key"]: i["value"] for i in inst["metadata"]["items"]}
        assert json.loads(items["gcpgpu-max-spend"]) == {"usd": 40.0} and items["gcpgpu-agent"]
        assert json.loads(items["gcpgpu-spec"])["max_spend"] == 40.0


def test_a_slurm_cluster_takes_no_spend_cap_it_could_not_enforce(gcp):
    got = cli("cluster", "up", "q", *UP, "--scheduler", "slurm", "--max-spend", "40")
    assert got.exit_code == 2, got.output
    (line,) = got.stderr.strip().splitlines()
    assert "--max-spend" in line and "--scheduler" in line
    assert gcp.requests.all() == []
