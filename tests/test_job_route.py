"""jobs/route.py: every verb on a job by its id (status, cancel, logs, list) goes through one routing point."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from helpers import PROJECT

from gcpgpu.cli import main
from gcpgpu.errors import UsageProblem
from gcpgpu.jobs import ids, route
from gcpgpu.jobs.state import JobState

GLOBAL = ["--project", PROJECT, "--region", "us-central1"]


@pytest.mark.parametrize("command", ["status", "logs", "cancel", "follow"])
def test_a_job_of_an_unknown_target_is_one_line_and_exit_2(gcp, monkeypatch, command):
    """A job id that parses to a target no backend serves (a newer gcpgpu's, say) is refused by the
    routing point before any request, naming the targets there are."""
    monkeypatch.setattr(ids, "parse", lambda text: ids.JobId("slurm", cluster="c", job="train-abc123"))
    result = CliRunner().invoke(main, [*GLOBAL, "job", command, "slurm:c:train-abc123"])
    assert result.exit_code == 2, result.output
    line = result.output.strip()
    assert line.startswith("Error: ") and "\n" not in line, line
    assert "job target 'slurm'" in line and "vertex, cluster" in line, line
    assert len(gcp.requests) == 0


@pytest.mark.parametrize("command", [["status"], ["logs"], ["logs", "--follow"], ["cancel"], ["follow"]])
def test_a_job_that_does_not_exist_is_one_line_and_exit_1(gcp, command):
    """Issue 38: `job logs vertex:us-central1:42` (no such job) exited 0 with "No log entries ... yet". Every
    verb says in one line that there is no such job, on each target, and prints nothing on stdout."""
    up = CliRunner().invoke(main, [*GLOBAL, "cluster", "up", "c", "--machine-type", "a2-highgpu-1g", "--nodes", "1",
                                   "--zone", "us-central1-a", "--yes"])
    assert up.exit_code == 0, up.output
    for job_id, said in (("vertex:us-central1:42", "no job vertex:us-central1:42 in project"),
                         ("cluster:c:train-abc123", "job train-abc123 is not on cluster c"),
                         ("cluster:gone:train-abc123", "no cluster named gone")):
        result = CliRunner().invoke(main, [*GLOBAL, "job", command[0], job_id, *command[1:]])
        assert result.exit_code == 1, (job_id, result.output)
        line = result.stderr.strip()
        assert line.startswith("Error: ") and "\n" not in line and said in line, (job_id, line)
        assert result.stdout == ""


def test_each_verb_goes_to_the_backend_of_the_job_s_target(monkeypatch):
    """A target is one entry in BACKENDS: its verbs get the call, with the job's id as parsed."""
    seen: list[tuple[str, str]] = []

    def verb(name: str):
        def call(clients, project, jid):
            seen.append((name, str(jid)))
            return JobState(id=str(jid), target="cluster", state="RUNNING")
        return call

    fake = route.Backend(status=verb("status"), cancel=verb("cancel"),
                         log_filter=lambda project, jid: f"filter of {jid} in {project}",
                         list_jobs=lambda clients, project, region, state, limit: [{"id": "x", "state": state}])
    monkeypatch.setitem(route.BACKENDS, "cluster", lambda: fake)
    jid = ids.parse("cluster:c:train-abc123")
    assert route.status(None, "p", jid).state == "RUNNING"
    assert route.cancel(None, "p", jid).id == "cluster:c:train-abc123"
    assert route.log_filter("p", jid) == "filter of cluster:c:train-abc123 in p"
    assert route.list_jobs(None, "p", only="cluster", state="FAILED") == [{"id": "x", "state": "FAILED"}]
    assert seen == [("status", "cluster:c:train-abc123"), ("cancel", "cluster:c:train-abc123")]
    with pytest.raises(UsageProblem, match="no region set to list Vertex AI jobs"):
        route.list_jobs(None, "p", only="vertex")
    said: list[str] = []
    assert route.list_jobs(None, "p", say=said.append) == [{"id": "x", "state": None}]  # every target: Vertex needs a region
    assert said == ["note: no region set, so no Vertex AI jobs listed (pass --region REGION)"]
