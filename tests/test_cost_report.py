"""`gcpgpu cost report`: the project's clusters (live and deleted) and jobs, summed from the COST SO FAR
figures each view showed; a deleted cluster leaves its cost record behind (jobs/ledger.py)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from helpers import PROJECT, wait_for

from gcpgpu.cli import main

GLOBAL = ["--project", PROJECT, "--region", "us-central1"]
UP = ["--machine-type", "a2-highgpu-1g", "--zone", "us-central1-a", "--yes"]
HOUR = 3600.0


def cli(*argv: str, fmt: str | None = None):
    return CliRunner().invoke(main, [*GLOBAL, *(["--format", fmt] if fmt else []), *argv])


def shown(*argv: str) -> dict:
    got = cli(*argv, fmt="json")
    assert got.exit_code == 0, got.output
    return json.loads(got.stdout)


def ended(job_id: str) -> dict | None:
    state = shown("job", "status", job_id)
    return state if state["state"] == "SUCCEEDED" else None


def test_a_cluster_s_cost_so_far_counts_on_the_cloud_s_clock(gcp):
    """COST SO FAR reads the time the cloud keeps (the emulator's, under test), as the VMs' own
    timestamps do: an hour on that clock is an hour's price."""
    assert cli("cluster", "up", "c", "--nodes", "2", *UP).exit_code == 0
    gcp.clock.advance(HOUR)
    status = shown("cluster", "status", "c")
    price = shown("catalog", "show", "a2-highgpu-1g")["price_per_hour"]  # the price the cloud's catalog gives
    assert status["node_hours"] == pytest.approx(2.0, abs=0.01)
    assert status["cost_usd"] == pytest.approx(2 * price, abs=0.02)


def test_cost_report_by_job_and_by_cluster_sum_what_status_showed(gcp):
    gcp.jobs.agent.simulated_run_s = 1800.0  # of the emulator's clock: it ends when the test sets it so
    gcp.vertex.timings.update(simulated_run_s=1800.0)
    assert cli("cluster", "up", "a", "--nodes", "2", *UP, "--label", "team=vision").exit_code == 0
    assert cli("cluster", "up", "b", "--nodes", "1", *UP).exit_code == 0
    on_a = cli("job", "submit", "--cluster", "a", "--image", "busybox", "--name", "sim")
    assert on_a.exit_code == 0, on_a.output
    a_job = on_a.stdout.splitlines()[0]
    vertex = cli("job", "submit", "--vertex", "--machine-type", "a2-highgpu-1g", "--image", "busybox",
                 "--name", "vx", "--label", "team=nlp")
    assert vertex.exit_code == 0, vertex.output
    v_job = vertex.stdout.splitlines()[0]
    wait_for(lambda: shown("job", "status", a_job)["state"] == "RUNNING", what="the cluster job running")
    gcp.clock.advance(HOUR)  # the jobs end (half an hour each); the clusters run on
    a_state = wait_for(lambda: ended(a_job), what="the cluster job's end")
    v_state = wait_for(lambda: ended(v_job), what="the Vertex job's end")
    gcp.clock.freeze()  # what each view shows now is what the report must add up
    a, b = shown("cluster", "status", "a"), shown("cluster", "status", "b")
    assert a["cost_usd"] > 0 and b["cost_usd"] > 0 and a_state["cost_usd"] > 0
    # b goes: its cost stays in the project's records.
    assert cli("cluster", "down", "b", "--yes").exit_code == 0
    kept = [i for i in gcp.compute.project_resource(PROJECT)["commonInstanceMetadata"]["items"]
            if i["key"] == "gcpgpu-costs"]
    (record,) = json.loads(kept[0]["value"])["clusters"]
    assert (record["cluster"], record["nodes"], record["machine_type"], record["why"]) == ("b", 1, "a2-highgpu-1g",
                                                                                          "cluster down")
    assert record["cost_usd"] == pytest.approx(b["cost_usd"], abs=0.01)

    by_cluster = shown("cost", "report", "--by", "cluster")
    rows = {r["cluster"]: r for r in by_cluster["rows"]}
    assert rows["a"]["cost_usd"] == pytest.approx(a["cost_usd"], abs=0.01 * a["node_hours"])
    assert rows["b"]["cost_usd"] == pytest.approx(b["cost_usd"], abs=0.01 * b["node_hours"])
    vx = rows["vertex:us-central1"]
    assert vx["node_hours"] == pytest.approx(v_state["node_hours"], abs=0.01)
    assert v_state["cost"] == "-" and vx["unpriced"] == 1  # Vertex AI's price is not the catalog's: not counted
    by_job = shown("cost", "report", "--by", "job")
    jobs = {r["job"]: r for r in by_job["rows"]}
    assert jobs[a_job]["cost_usd"] == pytest.approx(a_state["cost_usd"], abs=0.01 * a_state["node_hours"])
    assert jobs[a_job]["name"] == "sim" and jobs[a_job]["cluster"] == "a"
    assert jobs[v_job]["node_hours"] == pytest.approx(v_state["node_hours"], abs=0.01)
    idle = jobs["a (no job)"]  # the hour and a half no job used of a's two nodes
    assert idle["cost_usd"] == pytest.approx(a["cost_usd"] - a_state["cost_usd"], abs=0.02)
    assert jobs["b (no job)"]["cost_usd"] == pytest.approx(b["cost_usd"], abs=0.01)
    # Both add up to the same total: every dollar once.
    assert by_job["total"]["cost_usd"] == pytest.approx(by_cluster["total"]["cost_usd"], abs=0.02)
    assert by_cluster["total"]["cost_usd"] == pytest.approx(a["cost_usd"] + b["cost_usd"], abs=0.02)
    by_label = {r["label"]: r for r in shown("cost", "report", "--by", "label")["rows"]}
    assert by_label["team=vision"]["cost_usd"] == pytest.approx(a["cost_usd"], abs=0.02)
    assert by_label["team=nlp"]["node_hours"] == pytest.approx(v_state["node_hours"], abs=0.01)
    by_user = shown("cost", "report", "--by", "user")
    # Everything here was made by the emulator's one caller: its jobs and the clusters' idle time, each dollar once.
    assert [r["user"] for r in by_user["rows"]] == ["you@example.com"] and "who submitted it" in by_user["notes"][0]
    assert by_user["total"]["cost_usd"] == pytest.approx(by_cluster["total"]["cost_usd"], abs=0.02)
    table = cli("cost", "report", "--by", "cluster")
    assert table.exit_code == 0 and "NODE-HOURS" in table.output and f"${a['cost_usd']:,.2f}" in table.output
    # A window that ends before b went still holds it; nothing is older than a minute's window here.
    gcp.clock.advance(2 * 86400)
    recent = {r["cluster"] for r in shown("cost", "report", "--by", "cluster", "--since", "1d")["rows"]}
    assert recent == {"a"}  # b and the Vertex job ended two days ago
    # a's job ended then too, but a ran since: its jobs stay beside its "(no job)" time, adding up to a.
    recent_jobs = shown("cost", "report", "--by", "job", "--since", "1d")
    assert {r["job"] for r in recent_jobs["rows"]} == {a_job, "a (no job)"}
    assert recent_jobs["total"]["cost_usd"] == pytest.approx(
        shown("cost", "report", "--by", "cluster", "--since", "1d")["total"]["cost_usd"], abs=0.01)


@pytest.mark.parametrize(("args", "field"), [(["--by", "team"], "--by"), (["--since", "soon"], "--since"),
                                             (["--since", "-3d"], "--since"), (["--since", "0s"], "--since")])
def test_cost_report_refuses_bad_input_in_one_line_before_any_call(gcp, args, field):
    got = cli("cost", "report", *args)
    assert got.exit_code == 2, got.output
    (line,) = got.stderr.strip().splitlines()
    assert field in line
    assert gcp.requests.all() == []


def test_a_cost_that_cannot_be_read_never_holds_up_cluster_down(gcp, monkeypatch):
    from gcpgpu.costs import ledger
    from gcpgpu.errors import CloudError

    assert cli("cluster", "up", "c", "--nodes", "1", *UP).exit_code == 0

    def refused(*_a, **_k):
        raise CloudError("403 the caller may not read the job records")

    monkeypatch.setattr(ledger, "snapshot", refused)
    down = cli("cluster", "down", "c", "--yes")
    assert down.exit_code == 0, down.output
    assert "cost could not be read before it goes" in down.stderr and "Cluster c is gone" in down.stderr
    assert shown("cost", "report", "--by", "cluster")["rows"] == []
