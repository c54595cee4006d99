"""A cluster job's own failures and stalls: retried from its checkpoint, recorded, and told to webhooks.

The jobs are users' own commands (small shell scripts, run for real by the emulator in its sandbox)
that exit with a code, or go silent, on their first attempt; a retry sees GCPGPU_RESUME=1 and
GCPGPU_RESTART=N, as a recovery's does.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import threading
from types import SimpleNamespace

import pytest
from click.testing import CliRunner
from helpers import wait_for, webhook_server

from gcpgpu.cli import main

GLOBAL = ["--project", "test-proj", "--region", "us-central1"]
needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None,
                                 reason="bubblewrap (bwrap) is not installed: the emulator cannot run users' commands")


def cli(*argv: str, fmt: str | None = None):
    return CliRunner().invoke(main, [*GLOBAL, *(["--format", fmt] if fmt else []), *argv])


def status(job_id: str) -> dict:
    return json.loads(cli("job", "status", job_id, fmt="json").stdout)


@pytest.fixture
def cluster(gcp):
    up = cli("cluster", "up", "c", "--machine-type", "a2-highgpu-1g", "--nodes", "2", "--zone", "us-central1-a",
             "--yes")
    assert up.exit_code == 0, up.output
    return gcp


# First attempt exits with $CODE; a retry says what it was given and succeeds.
FLAKY = "sh -c 'if [ -z \"$GCPGPU_RESTART\" ]; then echo failing; exit {code}; fi; " \
        "echo restart=$GCPGPU_RESTART resume=$GCPGPU_RESUME'"


@pytest.fixture
def webhook(monkeypatch):
    from gcpgpu.jobs import notify

    monkeypatch.setattr(notify, "BACKOFF_S", 0.05)
    with webhook_server(fail_first=True, query="?token=s3cret") as served:
        yield served


@needs_bwrap
def test_a_retryable_exit_code_is_retried_from_the_checkpoint_and_told(cluster, webhook):
    url, hook = webhook
    result = cli("job", "submit", "--cluster", "c", "--image", "busybox", "--command", FLAKY.format(code=3),
                 "--max-restarts-on-errors", "2", "--retry-on-exit-codes", "3,75", "--env", "API_TOKEN=hunter2",
                 "--notify", url)
    assert result.exit_code == 0, result.output
    job_id = result.stdout.splitlines()[0]
    assert "Retry 1/2" in result.output and "exit code 3" in result.output
    state = status(job_id)
    assert state["state"] == "SUCCEEDED" and state["attempt"] == 1 and state["restarts"] == 1
    assert state["recoveries"] == 0
    (entry,) = state["history"]
    assert entry["kind"] == "retry" and entry["cause"] == "exit code 3" and entry["node"] in ("c-0", "c-1")
    logs = cli("job", "logs", job_id).output
    assert "restart=1 resume=1" in logs  # the retry was told to resume from its checkpoint
    table = cli("job", "status", job_id).output
    assert "Recoveries and retries" in table and "exit code 3" in table and "retry" in table

    # The webhook got every change once, in order, despite failing the first delivery.
    events = [m["event"] for m in hook.got]
    assert events == ["RUNNING", "RETRYING", "RUNNING", "SUCCEEDED"], events
    retrying = hook.got[1]
    assert retrying["cause"] == "exit code 3" and retrying["node"] == entry["node"] and retrying["job"] == job_id
    sent = json.dumps(hook.got)
    assert "hunter2" not in sent and "s3cret" not in sent and "API_TOKEN" not in sent


@needs_bwrap
def test_an_exit_code_not_listed_is_not_retried(cluster):
    result = cli("job", "submit", "--cluster", "c", "--image", "busybox", "--command", FLAKY.format(code=4),
                 "--max-restarts-on-errors", "2", "--retry-on-exit-codes", "3")
    assert result.exit_code == 1, result.output
    state = status(result.stdout.splitlines()[0])
    assert state["state"] == "FAILED" and state["attempt"] == 0 and state["history"] == []
    assert {r["exit_code"] for r in state["per_node"]} == {4}


@needs_bwrap
def test_any_nonzero_exit_is_retried_without_codes_until_retries_run_out(cluster):
    always = "sh -c 'echo attempt ${GCPGPU_RESTART:-0}; exit 7'"
    result = cli("job", "submit", "--cluster", "c", "--image", "busybox", "--command", always,
                 "--max-restarts-on-errors", "1")
    assert result.exit_code == 1, result.output
    assert "no retry left (1/1 used)" in result.output
    state = status(result.stdout.splitlines()[0])
    assert state["state"] == "FAILED" and state["attempt"] == 1
    assert [h["cause"] for h in state["history"]] == ["exit code 7"]


# Rank 0 writes two lines a second apart, rank 1 nothing of its own; then both hang.
SILENT = ("sh -c 'echo restart=${GCPGPU_RESTART:-0} resume=${GCPGPU_RESUME:-0}; "
          "if [ \"$NODE_RANK\" = 0 ]; then sleep 1; echo still here; fi; sleep 600'")


@needs_bwrap
def test_a_stalled_job_is_restarted_then_fails_with_cause_stalled(cluster, webhook):
    url, hook = webhook
    result = cli("job", "submit", "--cluster", "c", "--image", "busybox", "--command", SILENT,
                 "--stall-timeout", "5s", "--max-restarts-on-errors", "1", "--notify", url)
    assert result.exit_code == 1, result.output
    job_id = result.stdout.splitlines()[0]
    assert "stalled: no progress for 5s; suspect node c-1" in result.output
    assert result.output.strip().splitlines()[-1].startswith(f"Error: job {job_id} ended FAILED: stalled")

    state = status(job_id)
    assert state["state"] == "FAILED" and state["cause"] == "stalled" and state["attempt"] == 1
    (entry,) = state["history"]
    assert entry["kind"] == "retry" and entry["cause"] == "stalled" and entry["node"] == "c-1"
    assert "py-spy" in entry["capture"]  # stacks, or the line saying the image has no py-spy
    logs = cli("job", "logs", job_id).output
    assert "restart=1 resume=1" in logs
    # Nothing of the job is left running on the nodes.
    assert all(r["state"] in ("CANCELLED", "FAILED") for r in state["per_node"])
    listed = {j["id"]: j for j in json.loads(cli("job", "list", "--clusters", fmt="json").stdout)}
    assert listed[job_id]["state"] == "FAILED"
    events = [m["event"] for m in hook.got]
    assert events == ["RUNNING", "STALLED", "RETRYING", "RUNNING", "STALLED", "FAILED"], events
    assert hook.got[-1]["cause"].startswith("stalled")


def test_the_suspect_is_the_node_whose_step_lags(monkeypatch):
    from gcpgpu.jobs import logs as job_logs
    from gcpgpu.jobs.cluster import stall

    def line(node: str, n: int, text: str) -> dict:
        return {"insertId": f"{node}-{n}", "timestamp": f"2026-11-25T04:00:{n:02d}Z",
                "jsonPayload": {"instance": {"name": node}, "message": text}}

    lines = [line("c-0", 1, "step      4 | loss 2.0 | lr 1e-3"), line("c-1", 2, "step      4 | loss 2.0 | lr 1e-3"),
             line("c-0", 3, "step      5 | loss 1.9 | lr 1e-3"), line("c-1", 4, "loading batch")]
    monkeypatch.setattr(job_logs, "entries", lambda *a, **k: iter(lines))
    now = [0.0]
    watch = stall.Watch(None, "p", SimpleNamespace(job="j"), 10, trainer=True, clock=lambda: now[0])
    assert watch.poll(["c-0", "c-1"]) is None  # steps were made just now
    now[0] = 9.0
    assert watch.poll(["c-0", "c-1"]) is None
    now[0] = 11.0
    assert watch.poll(["c-0", "c-1"]) == "c-1"  # c-1 never got past step 4
    # A user's command: any line is progress; the first silent node is named.
    quiet = stall.Watch(None, "p", SimpleNamespace(job="j"), 10, trainer=False, clock=lambda: now[0])
    now[0] = 20.0
    assert quiet.poll(["c-0", "c-1", "c-2"]) is None
    now[0] = 31.0
    assert quiet.poll(["c-0", "c-1", "c-2"]) == "c-2"


def test_job_cost_counts_recreated_and_lost_nodes():
    from gcpgpu import times
    from gcpgpu.cluster import cost
    from gcpgpu.jobs.cluster import spent

    node = SimpleNamespace(machine_type="a2-highgpu-1g", provisioning="SPOT", region="us-central1", status="RUNNING", last_stop=None)
    nodes = [SimpleNamespace(**vars(node), name="c-0", last_start="2026-11-25T00:00:00Z", created=None),
             SimpleNamespace(**vars(node), name="c-1", last_start="2026-11-25T01:10:00Z", created=None)]
    state = {"cluster": "c", "created": "2026-11-25T00:00:00Z", "ended": None, "machine_type": "a2-highgpu-1g",
             "per_node": [{"node": "c-0"}, {"node": "c-1"}],
             "history": [{"kind": "recovery", "at": "2026-11-25T01:00:00Z", "lost": ["c-1"]},
                         {"kind": "retry", "at": "2026-11-25T01:30:00Z", "lost": []}]}
    now = times.parse_timestamp("2026-11-25T02:00:00Z")
    import gcpgpu.jobs.cluster.spent as mod

    original = mod.observe_nodes
    mod.observe_nodes = lambda *a: nodes
    try:
        got = spent.job_spent(None, "p", state, now=now)
    finally:
        mod.observe_nodes = original
    # c-0: 2 h; the lost c-1: 1 h until the recovery; the new c-1: 50 min. The 10 min between: not billed.
    assert got["uptime_s"] == 7200 and got["node_hours"] == round(2 + 1 + 50 / 60, 3)
    price = cost.node_price("a2-highgpu-1g", "SPOT")
    assert got["cost_usd"] == round(price * (2 + 1 + 50 / 60), 2)


def test_job_status_shows_uptime_and_cost_so_far(cluster):
    cluster.jobs.agent.simulated_run_s = 30.0
    submitted = cli("job", "submit", "--cluster", "c", "--image", "busybox")  # simulated: nothing runs
    assert submitted.exit_code == 0, submitted.output
    state = status(submitted.stdout.splitlines()[0])
    assert state["cost_usd"] is not None and state["node_hours"] >= 0 and state["uptime_s"] >= 0
    table = cli("job", "status", submitted.stdout.splitlines()[0]).output
    assert "COST SO FAR" in table and "$" in table


def test_notifier_gives_up_on_a_client_error_without_blocking(monkeypatch):
    from gcpgpu.jobs import notify

    calls = []
    monkeypatch.setattr(notify, "post", lambda url, body: calls.append(body["event"]) or None)
    n = notify.Notifier(["https://hooks.example.com/x"], job="cluster:c:j")
    n.send("RUNNING")
    n.close(5)
    assert calls == ["RUNNING"] and n.dropped == 1 and n.sent == []


@pytest.mark.parametrize("url", ["https://me:s3cr3t@hooks.example.com:8443/hook/s3cr3t?key=s3cr3t",
                                 "https://s3cr3t@hooks.example.com:8443/s3cr3t"])
def test_a_failed_delivery_names_only_the_scheme_and_host(monkeypatch, capsys, url):
    """The failure line reaches Cloud Logging for detached jobs and autostop: no user, token, path or query."""
    from gcpgpu.jobs import notify

    monkeypatch.setattr(notify, "post", lambda url, body: None)
    n = notify.Notifier([url], job="cluster:c:j")
    n.send("FAILED", cause="exit 1")
    n.close(5)
    assert capsys.readouterr().err.splitlines() == [
        "gcpgpu: could not deliver the FAILED notification to https://hooks.example.com:8443"]


def test_vertex_job_tells_the_webhook_while_followed(gcp, webhook):
    url, hook = webhook
    gcp.vertex.timings.update(queued_s=0.0, pending_s=0.2, simulated_run_s=3.0)  # RUNNING for a few polls
    result = cli("job", "submit", "--vertex", "--machine-type", "a3-highgpu-8g", "--image",
                 "us-docker.pkg.dev/test-proj/repo/someone-elses-trainer:1", "--notify", url)
    assert result.exit_code == 0, result.output  # --notify alone follows the job, as --wait would
    job_id = result.stdout.splitlines()[0]
    assert [(m["event"], m["job"]) for m in hook.got] == [("RUNNING", job_id), ("SUCCEEDED", job_id)]


def test_which_failures_are_retryable():
    from gcpgpu.jobs.policy import retryable

    row = {"node": "c-1", "exit_code": 75, "message": ""}
    assert retryable({"max_restarts_on_errors": 2}, [row]) == row  # any non-zero exit without codes
    assert retryable({"max_restarts_on_errors": 2, "retry_on_exit_codes": [3]}, [row]) is None
    assert retryable({"max_restarts_on_errors": 0}, [row]) is None
    capped = {**row, "message": "stopped after the job's timeout of 60s"}
    assert retryable({"max_restarts_on_errors": 2}, [capped]) is None  # --timeout is the user's own cap


def test_a_recovery_is_told_to_the_webhook(gcp, webhook):
    url, hook = webhook
    gcp.faults.preempt_grace_s = 0.2
    gcp.jobs.agent.simulated_run_s = 3600.0  # of the emulator's clock, set on as the job is told RUNNING
    assert cli("cluster", "up", "s", "--machine-type", "a2-highgpu-1g", "--nodes", "2", "--zone", "us-central1-a",
               "--spot", "--yes").exit_code == 0
    gcp.faults.preempt("s-1", after_s=10)

    def told(n: int) -> bool:
        return [m["event"] for m in hook.got].count("RUNNING") >= n

    def clock_on() -> None:  # the loss once RUNNING is told, the end once the recovered job's RUNNING is
        for n, seconds in ((1, 10), (2, 3600)):
            with contextlib.suppress(AssertionError):  # not told: the job's own times still end it
                wait_for(lambda n=n: told(n) or submitted.is_set(), timeout=120, what=f"RUNNING told {n} time(s)")
            if submitted.is_set():
                return
            gcp.clock.advance(seconds)

    submitted = threading.Event()
    ticker = threading.Thread(target=clock_on, daemon=True)
    ticker.start()
    result = cli("job", "submit", "--cluster", "s", "--image", "busybox", "--recover", "1", "--notify", url)
    submitted.set()
    ticker.join(30)  # nothing moves the clock once this test is over
    assert result.exit_code == 0, result.output
    events = [m["event"] for m in hook.got]
    assert events == ["RUNNING", "RECOVERING", "RUNNING", "SUCCEEDED"], events
    recovering = hook.got[1]
    assert recovering["node"] == "s-1" and recovering["cause"] == "preempted" and recovering["attempt"] == 1
    assert hook.got[-1]["recoveries"] == 1
