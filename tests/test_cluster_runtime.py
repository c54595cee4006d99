"""Runs that end without a laptop, and what they cost: `cluster up --max-run-duration` puts Compute
Engine's own cap on the nodes (the emulator ends them on its clock), and `cluster status` / `cluster
list` show UPTIME and COST SO FAR from each node's last start and the catalog's price."""

from __future__ import annotations

import json
import time

import pytest
from click.testing import CliRunner
from helpers import PROJECT, clients, make_plan, wait_for

from gcpgpu import times
from gcpgpu.cli import main
from gcpgpu.cluster import cost
from gcpgpu.cluster.apply import Cluster
from gcpgpu.cluster.observe import observe_nodes

ZONE = "us-central1-a"


def cli(*argv: str):
    return CliRunner().invoke(main, ["--project", PROJECT, *argv])


def test_up_with_max_run_duration_and_the_emulator_ends_the_nodes_at_that_time(gcp):
    gcp.faults.preempt_grace_s = 0.0
    up = cli("cluster", "up", "c", "--machine-type", "a2-highgpu-1g", "--nodes", "2", "--zone", ZONE,
             "--max-run-duration", "10m", "--yes")
    assert up.exit_code == 0, up.output
    vm = clients(gcp).compute("InstancesClient").get(project=PROJECT, zone=ZONE, instance="c-0")
    assert (vm.scheduling.max_run_duration.seconds, vm.scheduling.instance_termination_action) == (600, "STOP")
    status = json.loads(cli("--format", "json", "cluster", "status", "c").stdout)
    assert all(n["ends_at"] for n in status["nodes"])  # resourceStatus.scheduling.terminationTimestamp

    gcp.clock.advance(601)  # no agent, no laptop: Compute Engine's own clock ends them
    wait_for(lambda: {n.status for n in observe_nodes(clients(gcp), PROJECT, "c")} == {"TERMINATED"},
             what="both nodes stopped by their maxRunDuration")
    status = json.loads(cli("--format", "json", "cluster", "status", "c").stdout)
    assert [p for p in status["problems"] if "--max-run-duration ended" in p and "cluster up c" in p], status
    ops = clients(gcp).compute("ZoneOperationsClient").list(request={
        "project": PROJECT, "zone": ZONE, "filter": 'operationType="compute.instances.stop"'})
    assert sorted((o.target_link.rsplit("/", 1)[-1], o.user) for o in ops) == [("c-0", "system"), ("c-1", "system")]


def test_status_and_list_show_uptime_and_cost_so_far(gcp):
    nodes = Cluster(clients(gcp), PROJECT).up(make_plan(nodes=2, machine_type="a2-ultragpu-1g", zones=[ZONE]))
    two_hours_ago = time.time() - 7200
    for n in nodes:
        gcp.compute.backdate(PROJECT, n.zone, n.name, two_hours_ago)
    price = 5.0688  # a2-ultragpu-1g on-demand in us-central1: A100 80GB + 12 vCPUs + 170 GiB + 375 GiB Local SSD

    listed = json.loads(cli("--format", "json", "cluster", "list").stdout)
    row = next(r for r in listed if r["cluster"] == "c")
    assert row["uptime_s"] == pytest.approx(7200, abs=30)
    assert row["node_hours"] == pytest.approx(4.0, abs=0.02)
    assert row["cost_usd"] == pytest.approx(2 * 2 * price, abs=0.1)

    table = cli("cluster", "list")
    assert table.exit_code == 0, table.output
    assert "UPTIME" in table.output and "COST SO FAR" in table.output
    assert "2h" in table.output and f"${2 * 2 * price:,.2f}"[:-1] in table.output

    status = cli("cluster", "status", "c")
    assert status.exit_code == 0, status.output
    assert "COST SO FAR" in status.output
    assert "cost so far $20.2" in status.output and "(Cloud Billing Catalog, us-central1, read " in status.output
    per_node = json.loads(cli("--format", "json", "cluster", "status", "c").stdout)
    assert [n["cost_usd"] for n in per_node["nodes"]] == pytest.approx([2 * price, 2 * price], abs=0.05)
    assert per_node["cost_usd"] == pytest.approx(4 * price, abs=0.1)


def test_a_stopped_node_costs_its_last_run_and_has_no_uptime(gcp):
    nodes = Cluster(clients(gcp), PROJECT).up(make_plan(nodes=1, machine_type="a2-ultragpu-1g", zones=[ZONE]))
    gcp.compute.backdate(PROJECT, ZONE, nodes[0].name, time.time() - 3600)
    clients(gcp).compute("InstancesClient").stop(project=PROJECT, zone=ZONE, instance=nodes[0].name).result()
    wait_for(lambda: observe_nodes(clients(gcp), PROJECT, "c")[0].status == "TERMINATED", what="stopped")
    spent = cost.summary(observe_nodes(clients(gcp), PROJECT, "c"))
    assert spent["uptime_s"] is None  # nothing runs: '-' in the table
    assert spent["cost_usd"] == pytest.approx(5.0688, abs=0.05)  # the hour it ran


def test_no_catalog_price_shows_a_dash_not_zero():
    class Node:
        name, status, machine_type, provisioning, region = "x-0", "RUNNING", "n2-standard-8", "STANDARD", "us-central1"
        created = last_start = "2026-01-01T00:00:00.000-00:00"
        last_stop = ""

    run = cost.node_run(Node(), now=times.parse_timestamp(Node.last_start) + 3600)
    assert (run.seconds, run.cost) == (3600, None)
    assert cost.summary([Node()])["cost_usd"] is None
    assert cost.shown_cost(None) == "-" and cost.shown_uptime(None) == "-"
    flex = type("Flex", (Node,), {"provisioning": "FLEX_START", "machine_type": "a3-highgpu-8g"})
    assert cost.node_run(flex()).cost is None  # the bundled table has no flex-start price (the Billing Catalog has)


@pytest.mark.parametrize(("seconds", "text"), [(30, "30s"), (90, "1m30s"), (3600, "1h"), (11100, "3h05m"),
                                               (86400 * 2 + 3600 * 4, "2d4h")])
def test_durations_read_as_people_write_them(seconds, text):
    assert times.format_duration(seconds) == text


def test_a_follower_does_not_undo_the_clusters_own_run_cap(gcp):
    """Nodes stopped by their --max-run-duration are what the user asked for: a recovery would start
    them again with a fresh full run. The follower stops the job and says why instead."""
    from gcpgpu.errors import CloudError
    from gcpgpu.jobs.cluster import backend, recover
    from gcpgpu.jobs.spec import JobSpec, validate

    gcp.faults.preempt_grace_s = 0.0
    gcp.jobs.agent.simulated_run_s = 3600.0
    up = cli("cluster", "up", "c", "--machine-type", "a2-highgpu-1g", "--nodes", "2", "--zone", ZONE, "--spot",
             "--max-run-duration", "10m", "--yes")
    assert up.exit_code == 0, up.output
    job = validate(JobSpec(target="cluster", cluster="c", image="busybox", command=["sleep", "3600"]),
                   project=PROJECT, region="us-central1", zone=None)
    jid = backend.submit(clients(gcp), PROJECT, job).jid
    gcp.clock.advance(601)
    wait_for(lambda: {n.status for n in observe_nodes(clients(gcp), PROJECT, "c")} == {"TERMINATED"},
             what="both nodes stopped by their maxRunDuration")
    with pytest.raises(CloudError, match="max-run-duration ended.*not recovered"):
        recover.Follower(clients(gcp), PROJECT, jid, 3, poll_s=0.1).run()
    assert {n.status for n in observe_nodes(clients(gcp), PROJECT, "c")} == {"TERMINATED"}  # left stopped
