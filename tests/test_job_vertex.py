"""`gcpgpu job` against the emulator's Vertex AI, with jobs it simulates (images it cannot run): no processes."""

from __future__ import annotations

import json

from click.testing import CliRunner

from gcpgpu.cli import main

GLOBAL = ["--project", "test-proj", "--region", "us-central1"]
OTHER_IMAGE = "us-docker.pkg.dev/test-proj/repo/someone-elses-trainer:1"


def cli(*argv: str, fmt: str | None = None):
    return CliRunner().invoke(main, [*GLOBAL, *(["--format", fmt] if fmt else []), *argv])


def submit(*extra: str, fmt: str | None = None):
    return cli("job", "submit", "--vertex", "--machine-type", "a3-highgpu-8g", "--image", OTHER_IMAGE, *extra,
               "--", "--epochs", "1", fmt=fmt)


def test_submit_prints_the_id_and_status_says_it_is_simulated(gcp):
    result = submit("--nodes", "2", "--name", "sim")
    assert result.exit_code == 0, result.output
    job_id = result.stdout.splitlines()[0]
    assert job_id.startswith("vertex:us-central1:")
    status = json.loads(cli("job", "status", job_id, fmt="json").stdout)
    assert status["name"] == "sim" and status["state"] in ("QUEUED", "PENDING", "RUNNING")
    assert status["note"].startswith("simulated by the gcpgpu emulator")
    assert [(p["pool"], p["replicas"], p["accelerators"]) for p in status["pools"]] == [
        ("workerpool0", 1, "8 x NVIDIA_H100_80GB"), ("workerpool1", 1, "8 x NVIDIA_H100_80GB")]
    table = cli("job", "status", job_id).output
    assert "workerpool1" in table and "a3-highgpu-8g" in table
    # The job was created through JobService (gRPC), once.
    assert len(gcp.requests.all(contains="CreateCustomJob")) == 1


def test_wait_follows_to_succeeded_and_logs_follow_ends(gcp):
    gcp.vertex.timings.update(queued_s=0.0, pending_s=0.2, simulated_run_s=0.5)
    result = submit("--wait", fmt="json")
    assert result.exit_code == 0, result.output
    final = json.loads(result.stdout)
    assert final["state"] == "SUCCEEDED"
    logs = cli("job", "logs", final["id"], "--follow")
    assert logs.exit_code == 0 and "[service] gcpgpu emulator: this job is simulated" in logs.output
    lines = cli("job", "logs", final["id"], fmt="json").stdout.splitlines()
    assert json.loads(lines[0])["task"] == "service"


def test_list_and_cancel(gcp):
    ids = [submit("--name", f"exp-{i}").stdout.splitlines()[0] for i in range(3)]
    listed = json.loads(cli("job", "list", "--vertex", fmt="json").stdout)
    assert [j["id"] for j in listed] == list(reversed(ids))
    result = cli("job", "cancel", ids[1], "--wait")
    assert result.exit_code == 0, result.output
    assert json.loads(cli("job", "status", ids[1], fmt="json").stdout)["state"] == "CANCELLED"
    cancelled = json.loads(cli("job", "list", "--vertex", "--state", "cancelled", fmt="json").stdout)
    assert [j["id"] for j in cancelled] == [ids[1]]
    again = cli("job", "cancel", ids[1])
    assert again.exit_code == 0  # already ended: said so, not an error


def test_unknown_job_is_a_cloud_error(gcp):
    result = cli("job", "status", "vertex:us-central1:123456")
    assert result.exit_code == 1
    assert result.output.strip() == ("Error: no job vertex:us-central1:123456 in project test-proj (see 'gcpgpu job "
                                     "list --vertex --region us-central1')")


def test_list_without_region_lists_cluster_jobs_only(gcp):
    result = CliRunner().invoke(main, ["--project", "test-proj", "job", "list"])
    assert result.exit_code == 0, result.output
    assert "no region set" in result.output and "No jobs in project" in result.output


def test_a_vertex_jobs_uptime_and_node_hours_count_from_when_its_replicas_ran(gcp):
    """Issue 51: a Vertex job's UPTIME and COST SO FAR were both '-'. Its uptime runs from its replicas' start;
    its cost stays unknown ('-'): Vertex AI bills training on SKUs of its own that the catalog lacks."""
    from helpers import wait_for

    from gcpgpu.times import parse_timestamp

    gcp.vertex.timings.update(queued_s=0.0, pending_s=0.0, simulated_run_s=600.0)  # of the emulator's clock
    job_id = submit("--nodes", "2").stdout.splitlines()[0]
    wait_for(lambda: json.loads(cli("job", "status", job_id, fmt="json").stdout)["state"] == "RUNNING",
             what="the job running")
    gcp.clock.advance(1800)  # it ends 600 s after it started, then half an hour passes
    status = json.loads(cli("job", "status", job_id, fmt="json").stdout)
    assert status["state"] == "SUCCEEDED", status
    ran = parse_timestamp(status["ended"]) - parse_timestamp(status["started"])
    assert status["uptime_s"] == round(ran) and 600 <= ran < 700, status
    assert status["node_hours"] == round(2 * ran / 3600, 3) and status["cost_usd"] is None
    table = cli("job", "status", job_id).stdout
    assert "UPTIME" in table and "10m" in table, table


def test_a_job_outside_a_shared_queue_shows_no_queue_rows(gcp):
    """A Vertex (or plain cluster) job's `job status` showed PRIORITY, PLACE, SCHEDULER ID and WHY IT WAITS as '-'."""
    job_id = submit().stdout.splitlines()[0]
    table = cli("job", "status", job_id).stdout
    assert "ID" in table and not any(row in table for row in ("PRIORITY", "PLACE", "SCHEDULER ID", "WHY IT WAITS"))
