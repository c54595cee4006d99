"""`job submit` and autostop exclude each other (issue 36 item 4): both hold the cluster's lease, so a job
is never accepted by a cluster its autostop is stopping or deleting, and an autostop never deletes a job
that was accepted while it judged.

The leading follower's judgement (gcpgpu.node.agent.tick) runs here, in this process, and each test puts
the other command exactly between two of its steps, so the order is fixed, not timed. The nodes carry the
autostop setting without `gcpgpu-agent`, so no follower process of the emulator judges beside the test.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from helpers import PROJECT, clients

from gcpgpu.cli import main
from gcpgpu.cluster import autostop
from gcpgpu.cluster.lease import Lease
from gcpgpu.cluster.observe import observe_nodes
from gcpgpu.gcp import clock
from gcpgpu.jobs.cluster import deliver as cluster_jobs
from gcpgpu.node import agent

GLOBAL = ["--project", PROJECT, "--region", "us-central1"]


def cli(*argv: str):
    return CliRunner().invoke(main, [*GLOBAL, *argv])


@pytest.fixture
def idle_cluster(gcp):
    """Cluster `race` (one node), set to delete itself once idle for a minute, with no follower running."""
    from google.cloud import compute_v1

    gcp.jobs.agent.simulated_run_s = 3600.0  # a simulated job runs until the test's clock says otherwise
    up = cli("cluster", "up", "race", "--machine-type", "a2-highgpu-1g", "--nodes", "1", "--zone", "us-central1-a",
             "--no-placement", "--yes")
    assert up.exit_code == 0, up.output
    c = clients(gcp)
    (node,) = observe_nodes(c, PROJECT, "race")
    items = {**node.metadata, autostop.KEY: json.dumps(autostop.setting(60, True, None), sort_keys=True)}
    c.compute("InstancesClient").set_metadata(
        project=PROJECT, zone=node.zone, instance=node.name, metadata_resource=compute_v1.Metadata(
            fingerprint=node.metadata_fingerprint, items=[compute_v1.Items(key=k, value=v) for k, v in items.items()])
    ).result()
    return c, node.name


def judge(c, node: str, said: list[str]) -> str | None:
    """One judgement of the leading follower, on a cluster idle for far longer than its autostop."""
    idle = autostop.IdleClock()
    idle.idle_for(True)
    idle.since = clock.monotonic() - 3600  # seen idle for an hour
    leader = Lease(c, PROJECT, "race", "the-test", "lead")  # not held: letting go of it is a no-op
    return agent.tick(c, PROJECT, "race", node, idle, leader, said.append)


def test_a_submit_while_autostop_deletes_the_cluster_is_refused_in_one_line(gcp, idle_cluster, monkeypatch):
    c, node = idle_cluster
    submitted = []
    delete = autostop.down

    def submit_then_delete(*args, **kwargs):  # the judge holds the lease and found no job: a submit comes now
        before = len(gcp.requests.all(contains="setMetadata"))
        submitted.append(cli("job", "submit", "--cluster", "race", "--image", "busybox"))
        submitted.append(len(gcp.requests.all(contains="setMetadata")) - before)  # nothing put on the node
        return delete(*args, **kwargs)

    monkeypatch.setattr(autostop, "down", submit_then_delete)
    said: list[str] = []
    assert judge(c, node, said) == "gone", said
    result, written = submitted
    assert written == 0
    assert result.exit_code == 1, result.output
    assert "cluster:race:" not in result.stdout  # no job id for a job that cannot run
    (line,) = result.output.strip().splitlines()
    assert line.startswith("Error: cluster race is busy (autostop by ")
    assert "the job was not submitted" in line
    assert observe_nodes(c, PROJECT, "race") == []


def test_an_autostop_judged_while_a_submit_delivers_waits_and_then_finds_the_job(gcp, idle_cluster, monkeypatch):
    c, node = idle_cluster
    judged: list[str | None] = []
    said: list[str] = []
    deliver = cluster_jobs.deliver

    def judge_then_deliver(*args, **kwargs):  # the submit holds the lease and is about to deliver
        judged.append(judge(c, node, said))
        return deliver(*args, **kwargs)

    monkeypatch.setattr(cluster_jobs, "deliver", judge_then_deliver)
    result = cli("job", "submit", "--cluster", "race", "--image", "busybox")
    assert result.exit_code == 0, result.output
    job_id = result.stdout.strip()
    assert judged == [None]  # the judge met the submit's lease and let this round go
    assert any("cluster race is busy: job submit by " in line for line in said), said
    monkeypatch.setattr(cluster_jobs, "deliver", deliver)
    assert judge(c, node, said) is None  # the next round finds the job just accepted
    assert [n.status for n in observe_nodes(c, PROJECT, "race")] == ["RUNNING"]
    assert json.loads(cli("--format", "json", "job", "status", job_id).stdout)["state"] in ("PENDING", "RUNNING")


class Contended(BaseException):
    """Raised where a follower would try to take the cluster's lead (BaseException: its loop catches Exception)."""


@pytest.mark.parametrize("fate", ["deleted", "replaced"])
def test_a_follower_whose_vm_is_gone_does_not_take_the_lead_again(gcp, monkeypatch, fate):
    """The race an autostop down had under load: a deleted node's follower, still running until its VM's
    processes are killed, took the lead lease again right after the judge let go of every lease, and the
    lease outlived the cluster. Compute's word on its own VM (by instance id) now ends it first."""
    from gcpgpu.jobs.cluster import follower

    up = ("cluster", "up", "going", "--machine-type", "a2-highgpu-1g", "--nodes", "2", "--zone", "us-central1-a",
          "--no-placement", "--yes")
    assert cli(*up).exit_code == 0
    c = clients(gcp)
    first, second = sorted(observe_nodes(c, PROJECT, "going"), key=lambda n: n.name)

    def contend(_lead):
        raise Contended

    monkeypatch.setattr(follower, "lead", contend)
    said: list[str] = []
    with pytest.raises(Contended):  # a follower on a RUNNING node of its own id contends, as before
        agent.serve(c, PROJECT, "going", second.name, 0.01, said.append, node_id=second.id)
    c.compute("InstancesClient").delete(project=PROJECT, zone=second.zone, instance=second.name).result()
    if fate == "replaced":  # `up` again makes a new VM of the same name (a repair or a recovery does so)
        assert cli(*up).exit_code == 0
        (again,) = [n for n in observe_nodes(c, PROJECT, "going") if n.name == second.name]
        assert again.id != second.id and again.status == "RUNNING"
    assert agent.serve(c, PROJECT, "going", second.name, 0.01, said.append, node_id=second.id) == 0
    assert said[-1] == f"node {second.name} is gone: not leading any more"
    assert first.status == "RUNNING"
