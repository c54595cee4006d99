"""Nodes lost without a recovery, and why a node was lost (issue 23, item 8)."""

from __future__ import annotations

import json

from click.testing import CliRunner
from helpers import PROJECT, clients, make_plan

from gcpgpu.cli import main
from gcpgpu.cluster.apply import Cluster
from gcpgpu.jobs import ids
from gcpgpu.jobs.cluster import recover


def cli(*argv: str):
    return CliRunner().invoke(main, ["--project", PROJECT, *argv])


def test_a_terminated_node_shows_in_status_and_up_starts_it_again(gcp):
    nodes = Cluster(clients(gcp), PROJECT).up(make_plan(nodes=2, machine_type="a2-highgpu-1g"))
    assert gcp.compute.lose_instance(PROJECT, nodes[1].zone, "c-1", "host_error", 0.0)

    status = json.loads(cli("--format", "json", "cluster", "status", "c").stdout)
    assert [(n["name"], n["status"]) for n in status["nodes"]] == [("c-0", "RUNNING"), ("c-1", "TERMINATED")]
    assert any("c-1 is TERMINATED" in p and "gcpgpu cluster up c" in p for p in status["problems"]), status

    again = cli("cluster", "up", "c", "--machine-type", "a2-highgpu-1g", "--nodes", "2", "--zone", nodes[1].zone,
                "--yes")
    assert again.exit_code == 0, again.output
    status = json.loads(cli("--format", "json", "cluster", "status", "c").stdout)
    assert [(n["name"], n["status"], n["rank"]) for n in status["nodes"]] == [("c-0", "RUNNING", 0),
                                                                             ("c-1", "RUNNING", 1)]
    assert status["problems"] == []


def test_a_host_error_after_an_earlier_preemption_of_the_same_node_is_called_a_host_error(gcp):
    nodes = Cluster(clients(gcp), PROJECT).up(make_plan(nodes=2, machine_type="a2-highgpu-1g"))
    zone = nodes[1].zone
    assert gcp.compute.lose_instance(PROJECT, zone, "c-1", "preempt", 0.0)
    clients(gcp).compute("InstancesClient").start(project=PROJECT, zone=zone, instance="c-1").result()
    assert gcp.compute.lose_instance(PROJECT, zone, "c-1", "host_error", 0.0)

    follower = recover.Follower(clients(gcp), PROJECT, ids.parse("cluster:c:job-1"), 1)
    causes = follower._causes([{"node": "c-1", "zone": zone, "node_status": "TERMINATED"}])
    assert causes == {"c-1": "host error"}


def test_job_follow_keeps_the_recover_count_submit_was_given(gcp):
    """submit --recover 2, the submitting process gone, then 'job follow' elsewhere: it said 'up to 3
    recoveries' (the Spot default), not the 2 the job was submitted with."""
    from gcpgpu.jobs.cluster import backend
    from gcpgpu.jobs.cluster.placement import Asked
    from gcpgpu.jobs.spec import JobSpec, validate

    gcp.jobs.agent.simulated_run_s = 0.5
    up = cli("cluster", "up", "k", "--machine-type", "a2-highgpu-1g", "--nodes", "2", "--zone", "us-central1-a",
             "--spot", "--yes")
    assert up.exit_code == 0, up.output
    job = validate(JobSpec(target="cluster", cluster="k", image="busybox", command=["true"]), project=PROJECT,
                   region="us-central1", zone=None)
    jid = backend.submit(clients(gcp), PROJECT, job, Asked(recover=2)).jid
    followed = cli("job", "follow", str(jid))
    assert followed.exit_code == 0, followed.output
    assert "up to 2 recoveries" in followed.output and "up to 3" not in followed.output


def test_a_cluster_half_built_by_ctrl_c_is_listed_as_incomplete_with_what_to_run(gcp):
    """Interrupted right before its bulkInsert: policy, networks, subnets and firewall rules, no node.
    'cluster list' said nothing of it; now it lists it and says what up or down would do."""
    import pytest

    from gcpgpu.cluster.session import Reporter

    class CtrlC(Reporter):
        def step(self, key: str, text: str) -> None:
            if key == "instances":
                raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        Cluster(clients(gcp), PROJECT, CtrlC()).up(make_plan(nodes=2))
    rows = json.loads(cli("--format", "json", "cluster", "list").stdout)
    assert [(r["cluster"], r["nodes"]) for r in rows] == [("c", 0)]
    assert rows[0]["status"].startswith("incomplete (0 nodes, 1 placement policy")
    assert "'gcpgpu cluster up c ...' finishes it" in rows[0]["status"]
    assert "'gcpgpu cluster down c' removes it" in rows[0]["status"]


def test_cluster_list_counts_a_node_relabelled_by_hand(gcp):
    Cluster(clients(gcp), PROJECT).up(make_plan(nodes=2, machine_type="a2-highgpu-1g"))
    inst = gcp.compute.get(PROJECT, "zones/us-central1-a/instances", "c-1")
    gcp.compute.set_labels(PROJECT, "us-central1-a", "c-1",
                           {"labels": {"team": "x"}, "labelFingerprint": inst["labelFingerprint"]})
    rows = json.loads(cli("--format", "json", "cluster", "list").stdout)
    assert [(r["cluster"], r["nodes"], r["gpus"]) for r in rows] == [("c", 2, 2)]


def test_a_follower_on_the_node_that_is_lost_leaves_the_recovery_to_one_on_a_node_that_stays(gcp, monkeypatch):
    """A node's follower that sees its own node go (a preemption's notice: STOPPING) does not start the
    recovery: it would be stopped half-way, the RECOVERING it wrote told to no webhook, and the follower that
    takes over would tell nothing the record already said. It gives the lead up; one on the other node
    recovers the job, and is the one that writes RECOVERING."""
    import pytest
    from helpers import wait_for

    from gcpgpu.cluster import lease as leases
    from gcpgpu.cluster.lease import LeaseLost
    from gcpgpu.jobs.cluster import backend, store
    from gcpgpu.jobs.cluster.placement import Asked
    from gcpgpu.jobs.spec import JobSpec, validate

    gcp.faults.preempt_grace_s = 600.0  # c-1 stays STOPPING while the followers look
    gcp.jobs.agent.simulated_run_s = 3600.0
    assert cli("cluster", "up", "p", "--machine-type", "a2-highgpu-1g", "--nodes", "2", "--zone", "us-central1-a",
               "--spot", "--yes").exit_code == 0
    job = validate(JobSpec(target="cluster", cluster="p", image="busybox"), project=PROJECT, region="us-central1",
                   zone=None)
    jid = backend.submit(clients(gcp), PROJECT, job, Asked(recover=2)).jid
    wait_for(lambda: recover.nodes.status(clients(gcp), PROJECT, jid).state == "RUNNING", what="the job running")
    gcp.faults.preempt("p-1")
    wait_for(lambda: gcp.compute.get(PROJECT, "zones/us-central1-a/instances", "p-1")["status"] == "STOPPING",
             what="p-1 STOPPING")

    def recorded() -> str | None:
        found = store.read(clients(gcp), PROJECT, "p").of(jid.job)
        return found.state if found else None


    class Recovering(Exception):
        """Where a follower has written RECOVERING and begins the recovery's own steps."""

    def stop_here(self, *args) -> None:
        raise Recovering

    monkeypatch.setattr(recover.Follower, "_recover", stop_here)
    monkeypatch.setattr(leases, "_NODE", {"name": "p-1", "zone": "us-central1-a", "id": "1"})
    with pytest.raises(LeaseLost, match="node p-1 is going"):
        recover.Follower(clients(gcp), PROJECT, jid, 2, poll_s=0.1).run()
    assert recorded() != "RECOVERING"
    monkeypatch.setattr(leases, "_NODE", {"name": "p-0", "zone": "us-central1-a", "id": "0"})
    with pytest.raises(Recovering):
        recover.Follower(clients(gcp), PROJECT, jid, 2, poll_s=0.1).run()
    assert recorded() == "RECOVERING"
