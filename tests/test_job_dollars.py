"""`job status` in dollars (jobs/detail.py): dollars per million tokens from the job's step lines, and what
each lost goodput part cost at the job's node price; `cost report` prices the same parts."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from helpers import PROJECT, wait_for

from gcpgpu.cli import main
from gcpgpu.jobs import goodput, steplines

GLOBAL = ["--project", PROJECT, "--region", "us-central1"]
HOUR = 3600.0


def cli(*argv: str, fmt: str | None = None):
    return CliRunner().invoke(main, [*GLOBAL, *(["--format", fmt] if fmt else []), *argv])


def shown(job: str) -> dict:
    got = cli("job", "status", job, fmt="json")
    assert got.exit_code == 0 and got.exception is None, got.output
    return json.loads(got.stdout)


def trainer_line(i: int) -> str:
    return f"step {i:>6} | loss 5.0000 | lr 1.00e-03 | 9.1k tok/s/gpu | mfu n/a | 1000.0 ms | data 0.1%"


def test_tokens_come_from_the_trainer_s_rate_and_step_time_or_a_user_s_tokens_value():
    lines = [(float(i), trainer_line(i)) for i in range(10)]
    assert steplines.tokens_trained(lines, gpus=8) == pytest.approx(9100 * 1.0 * 8 * 10)  # 10 steps of 72,800
    user = [(0.0, "step 10 loss=2.3 tokens=40960"), (1.0, "step 20 loss=2.1 tokens=81920")]
    assert steplines.tokens_trained(user, gpus=8) == 81920
    assert steplines.tokens_trained([(0.0, "step 10 loss=2.3")], gpus=8) is None  # nothing tells the tokens
    assert goodput.lost_usd({"lost_s": {"recovery": 1800.0, "startup": 0.0}}, 4.0) == {"recovery": 2.0,
                                                                                        "startup": 0.0}
    assert goodput.lost_usd({"lost_s": {"recovery": 1800.0}}, None) is None


def test_job_status_shows_dollars_per_million_tokens_and_each_lost_part_in_dollars(gcp):
    gcp.jobs.agent.simulated_run_s = 10 * HOUR  # of the emulator's clock: it runs until the test is done
    assert cli("cluster", "up", "t", "--machine-type", "a2-highgpu-1g", "--nodes", "1", "--zone", "us-central1-a",
               "--yes").exit_code == 0
    submitted = cli("job", "submit", "--cluster", "t", "--image", "busybox")
    assert submitted.exit_code == 0, submitted.output
    job = submitted.stdout.splitlines()[0]
    wait_for(lambda: shown(job)["state"] == "RUNNING", timeout=60, what="the job running")
    gcp.clock.advance(HOUR)
    run = next(r for r in gcp.jobs.runner.all_runs() if r.id.startswith("cluster/"))
    for i in range(10):
        run.log("", "stdout", trainer_line(i))
    wait_for(lambda: "step      9" in cli("job", "logs", job).output, timeout=60, what="the lines in the job's log")
    gcp.clock.freeze()
    got = shown(job)
    price = json.loads(cli("catalog", "show", "a2-highgpu-1g", fmt="json").stdout)["price_per_hour"]  # the cloud's
    assert got["tokens"] == pytest.approx(9100 * 1.0 * 1 * 10)  # one GPU, ten steps
    assert got["usd_per_million_tokens"] == pytest.approx(got["cost_usd"] / (got["tokens"] / 1e6), abs=0.01)
    lost = got["goodput"]["lost_s"]
    assert got["goodput_lost_usd"] == {k: pytest.approx(v * price / HOUR, abs=0.01) for k, v in lost.items()}
    assert any(v > 0 for v in got["goodput_lost_usd"].values())  # an hour mostly before the first step
    table = cli("job", "status", job).output
    assert "$ PER M TOKENS" in table and f"${got['usd_per_million_tokens']:,.2f}" in table
    part, usd = max(got["goodput_lost_usd"].items(), key=lambda kv: kv[1])
    row = next(line for line in table.splitlines() if line.startswith(f"lost: {part.replace('_', ' ')}"))
    assert row.split()[-2] == f"${usd:,.2f}", table  # PART, NODE-TIME, COST, SHARE
    # The cost report prices the same parts.
    report = json.loads(cli("cost", "report", "--by", "job", fmt="json").stdout)
    (mine,) = [r for r in report["rows"] if r["job"] == job]
    assert mine["lost_usd"] == got["goodput_lost_usd"] and mine["cost_usd"] == got["cost_usd"]


def test_a_job_is_priced_in_its_nodes_region(gcp):
    """A job's COST SO FAR is its node-hours at its nodes' price in their own region (it took us-central1's)."""
    gcp.jobs.agent.simulated_run_s = 10 * HOUR
    assert cli("--region", "us-east5", "cluster", "up", "e", "--machine-type", "a3-megagpu-8g", "--nodes", "1",
               "--zone", "us-east5-a", "--no-placement", "--yes").exit_code == 0
    submitted = cli("job", "submit", "--cluster", "e", "--image", "busybox")
    assert submitted.exit_code == 0, submitted.output
    job = submitted.stdout.splitlines()[0]
    wait_for(lambda: shown(job)["state"] == "RUNNING", timeout=60, what="the job running")
    gcp.clock.advance(HOUR)
    gcp.clock.freeze()
    got = shown(job)
    price = {region: json.loads(cli("catalog", "show", "a3-megagpu-8g", "--region", region, fmt="json").stdout)
             ["price_per_hour"] for region in ("us-east5", "us-central1")}
    assert price["us-east5"] != price["us-central1"]  # the snapshot's two regions differ for this machine
    # node_hours is shown to 1/1000 h: that much of an hour's price, and a cent of rounding
    assert got["cost_usd"] == pytest.approx(got["node_hours"] * price["us-east5"], abs=0.0005 * price["us-east5"] + 0.01)
