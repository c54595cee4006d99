"""cluster up semantics real GCP has (issue 14): reservations with their own placement policy,
growing and shrinking, topology-aware ranks, flex-start queueing, IAP ssh. All through the CLI
against the emulator."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from helpers import PROJECT, leftovers, wait_for

from gcpgpu.cli import main
from gcpgpu.gcp.clients import Clients


@pytest.fixture
def cli(gcp, monkeypatch):
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", PROJECT)
    runner = CliRunner()

    def run(*args: str, code: int = 0):
        result = runner.invoke(main, list(args))
        assert result.exit_code == code, result.output
        return result

    return run


def _user_reservation(gcp, name: str, zone: str, count: int, machine_type: str, policy: str | None) -> None:
    """A reservation bought outside gcpgpu, optionally with its own compact placement policy."""
    from google.cloud import compute_v1

    clients = Clients(emulator=gcp.address)
    region = zone.rsplit("-", 1)[0]
    res = compute_v1.Reservation(name=name, specific_reservation_required=True,
                                 specific_reservation=compute_v1.AllocationSpecificSKUReservation(
        count=count, instance_properties=compute_v1.AllocationSpecificSKUAllocationReservedInstanceProperties(
            machine_type=machine_type)))
    if policy:
        clients.compute("ResourcePoliciesClient").insert(
            project=PROJECT, region=region, resource_policy_resource=compute_v1.ResourcePolicy(
                name=policy, group_placement_policy=compute_v1.ResourcePolicyGroupPlacementPolicy(
                    collocation="COLLOCATED"))).result()
        res.resource_policies = {"placement": f"projects/{PROJECT}/regions/{region}/resourcePolicies/{policy}"}
    clients.compute("ReservationsClient").insert(project=PROJECT, zone=zone, reservation_resource=res).result()


# ---------------------------------------------------------------------------------- item 2
def test_reservation_with_its_own_placement_policy_is_used_and_no_second_policy_made(gcp, cli):
    _user_reservation(gcp, "sold", "us-central1-b", 2, "a3-highgpu-8g", policy="sold-compact")
    up = cli("cluster", "up", "r", "--machine-type", "a3-highgpu-8g", "--nodes", "2", "--region", "us-central1",
             "--reservation", "sold", "--yes")
    assert "carries placement policy sold-compact" in up.output
    policies = {p["name"] for p in gcp.compute.list(PROJECT, "regions/us-central1/resourcePolicies")}
    assert policies == {"sold-compact"}  # no r-placement beside it
    for node in ("r-0", "r-1"):
        inst = gcp.compute.get(PROJECT, "zones/us-central1-b/instances", node)
        assert [p.rsplit("/", 1)[-1] for p in inst["resourcePolicies"]] == ["sold-compact"]
    res = gcp.compute.get(PROJECT, "zones/us-central1-b/reservations", "sold")
    assert res["specificReservation"]["inUseCount"] == "2"
    cli("cluster", "down", "r", "--yes")
    assert leftovers(gcp) == {"reservations": ["sold"], "resourcePolicies": ["sold-compact"]}


def test_emulator_refuses_a_second_placement_policy_on_a_reservation_that_has_one(gcp, monkeypatch):
    from gcpgpu.cluster import apply
    from gcpgpu.cluster.apply import Cluster
    from gcpgpu.cluster.plan import plan
    from gcpgpu.cluster.spec import ClusterSpec

    _user_reservation(gcp, "sold", "us-central1-a", 2, "a3-highgpu-8g", policy="sold-compact")
    p = plan(ClusterSpec(name="r", machine_type="a3-highgpu-8g", nodes=2, reservation="sold",
                         zones=["us-central1-a"]).validate(), PROJECT)
    c = Cluster(Clients(emulator=gcp.address), PROJECT)
    monkeypatch.setattr(apply, "_adopt_reservation", lambda s, plan, obs: None)  # the old behaviour: attach our own too
    with pytest.raises(Exception, match="cannot name another placement policy"):
        c.up(p)
    assert leftovers(gcp) == {"reservations": ["sold"], "resourcePolicies": ["sold-compact"]}


def test_reservation_without_a_policy_still_gets_ours(gcp, cli):
    _user_reservation(gcp, "plain", "us-central1-a", 2, "a3-highgpu-8g", policy=None)
    cli("cluster", "up", "p", "--machine-type", "a3-highgpu-8g", "--nodes", "2", "--zone", "us-central1-a",
        "--reservation", "plain", "--yes")
    inst = gcp.compute.get(PROJECT, "zones/us-central1-a/instances", "p-0")
    assert [x.rsplit("/", 1)[-1] for x in inst["resourcePolicies"]] == ["p-placement"]


# ---------------------------------------------------------------------------------- item 4
def test_cluster_grows_2_to_4_and_shrinks_back_in_one_placement_policy(gcp, cli):
    args = ("cluster", "up", "g", "--machine-type", "a3-highgpu-8g", "--zone", "us-central1-a", "--yes")
    cli(*args, "--nodes", "2")
    cli(*args, "--nodes", "4")
    insts = {i["name"]: i for i in gcp.compute.list(PROJECT, "zones/us-central1-a/instances")}
    assert sorted(insts) == ["g-0", "g-1", "g-2", "g-3"]
    assert {i["labels"]["gcpgpu-rank"] for i in insts.values()} == {"0", "1", "2", "3"}
    assert all([x.rsplit("/", 1)[-1] for x in i["resourcePolicies"]] == ["g-placement"] for i in insts.values())
    assert len(gcp.compute.list(PROJECT, "regions/us-central1/resourcePolicies")) == 1

    shrunk = cli("--format", "json", "cluster", "down", "g", "--nodes", "2", "--yes")
    assert '"g-2"' in shrunk.stdout and '"g-3"' in shrunk.stdout
    left = sorted(i["name"] for i in gcp.compute.list(PROJECT, "zones/us-central1-a/instances")
                  if i.get("_gone_at") is None)
    assert left == ["g-0", "g-1"]
    assert "resourcePolicies" in leftovers(gcp) and "firewalls" in leftovers(gcp)
    status = cli("cluster", "status", "g")
    assert "2 VM(s), no vmCount" in status.output
    assert "problem:" not in status.output  # the kept nodes say the new size: g-2, g-3 are not "missing"
    cli(*args, "--nodes", "3")  # a replaced or added node joins the same policy
    cli("cluster", "down", "g", "--yes")
    assert leftovers(gcp) == {}


def test_a_policy_with_a_vm_count_cannot_take_more_nodes_in_the_emulator(gcp):
    """What the old plan (vmCount = first --nodes) ran into on growing: the API refuses the extra VMs."""
    from gcpgpu.cluster.apply import Cluster
    from gcpgpu.cluster.plan import plan
    from gcpgpu.cluster.spec import ClusterSpec

    c = Cluster(Clients(emulator=gcp.address), PROJECT)

    def old_plan(nodes: int):
        p = plan(ClusterSpec(name="g", machine_type="a3-highgpu-8g", nodes=nodes,
                             zones=["us-central1-a"]).validate(), PROJECT)
        p.policy["groupPlacementPolicy"]["vmCount"] = 2
        return p

    c.up(old_plan(2))
    with pytest.raises(Exception, match="vmCount 2"):
        c.up(old_plan(4))


def test_plan_states_placement_limits_and_down_nodes_is_checked(gcp, cli):
    out = cli("cluster", "plan", "l", "--machine-type", "a3-megagpu-8g", "--nodes", "4", "--region", "us-central1")
    import re

    # The piped table folds its DETAILS cells at 120 columns: words may sit on continuation lines.
    assert re.search(r"no\s+vmCount", out.stdout) and re.search(r"at\s+most\s+1500\s+a3-mega\s+VMs\s+per\s+policy", out.stdout)
    bad = cli("cluster", "down", "l", "--nodes", "0", "--yes", code=2)
    assert "--nodes 0" in bad.output
    assert len(gcp.requests) == 0


# ---------------------------------------------------------------------------------- item 9
def test_ranks_follow_sub_blocks_when_the_emulator_spreads_a_cluster_over_two(gcp, cli):
    gcp.faults.subblock_hosts = 2  # 4 nodes need two sub-blocks; the emulator deals them round-robin
    cli("cluster", "up", "t", "--machine-type", "a3-megagpu-8g", "--nodes", "4", "--zone", "us-central1-a", "--yes")
    insts = {i["name"]: i for i in gcp.compute.list(PROJECT, "zones/us-central1-a/instances")}
    sub = {n: i["resourceStatus"]["physicalHostTopology"]["subblock"] for n, i in insts.items()}
    assert sub["t-0"] == sub["t-2"] != sub["t-1"] == sub["t-3"], {n: (s, insts[n]["resourceStatus"]) for n, s in sub.items()}
    ranks = {n: int(i["labels"]["gcpgpu-rank"]) for n, i in insts.items()}
    by_rank = [n for n, _ in sorted(ranks.items(), key=lambda kv: kv[1])]
    assert by_rank[0] == "t-0"
    assert sub[by_rank[0]] == sub[by_rank[1]] and sub[by_rank[2]] == sub[by_rank[3]]
    status = cli("--format", "json", "cluster", "status", "t")
    import json

    rows = json.loads(status.stdout)["nodes"]
    assert [r["name"] for r in rows] == by_rank
    assert [r["subblock"] for r in rows] == [sub[n] for n in by_rank]
    table = cli("cluster", "status", "t")
    assert "SUB-BLOCK" in table.stdout
    assert "problem:" not in table.output
    # A re-run of up (which repairs labels) keeps fabric ranks: they are a valid set, just not name order.
    cli("cluster", "up", "t", "--machine-type", "a3-megagpu-8g", "--nodes", "4", "--zone", "us-central1-a", "--yes")
    again = {i["name"]: int(i["labels"]["gcpgpu-rank"]) for i in gcp.compute.list(PROJECT, "zones/us-central1-a/instances")}
    assert again == ranks
    # Shrinking keeps ranks 0-1: the two nodes of one sub-block, whatever their names.
    cli("cluster", "down", "t", "--nodes", "2", "--yes")
    kept = sorted(i["name"] for i in gcp.compute.list(PROJECT, "zones/us-central1-a/instances"))
    assert kept == sorted(by_rank[:2]) and sub[kept[0]] == sub[kept[1]]
    assert "problem:" not in cli("cluster", "status", "t").output


def test_repair_keeps_a_valid_rank_set_and_fills_gaps_without_duplicates():
    from gcpgpu.cluster.plan import plan
    from gcpgpu.cluster.ranks import repair_ranks
    from gcpgpu.cluster.spec import ClusterSpec

    p = plan(ClusterSpec(name="c", machine_type="a3-highgpu-8g", nodes=4, zones=["us-central1-a"]).validate(), PROJECT)
    fabric = {"c-0": "0", "c-1": "2", "c-2": "1", "c-3": "3"}
    assert repair_ranks(p, fabric) == {"c-0": 0, "c-1": 2, "c-2": 1, "c-3": 3}
    # c-1 lost its label: it takes its own number only if free (2 is free once c-1 lost it; 1 is c-2's).
    assert repair_ranks(p, {**fabric, "c-1": None}) == {"c-0": 0, "c-1": 2, "c-2": 1, "c-3": 3}
    # Two claim rank 1: the node named for it keeps it, the other gets its own free number.
    assert repair_ranks(p, {"c-0": "1", "c-1": "1", "c-2": "2", "c-3": "3"}) == {"c-0": 0, "c-1": 1, "c-2": 2, "c-3": 3}
    # Out of range, garbage and a duplicate whose own number is taken: lowest free ranks, all distinct.
    got = repair_ranks(p, {"c-0": "9", "c-1": "x", "c-2": "0", "c-3": "0"})
    assert sorted(got.values()) == [0, 1, 2, 3] and got["c-2"] == 0


def test_up_warns_when_a_cluster_spans_blocks_and_a2_reports_no_topology(gcp, cli):
    gcp.faults.subblock_hosts, gcp.faults.block_subblocks = 1, 2
    up = cli("cluster", "up", "w", "--machine-type", "a3-highgpu-8g", "--nodes", "3", "--zone", "us-central1-a",
             "--yes")
    assert "spans 2 blocks" in up.output
    a2 = cli("cluster", "up", "n", "--machine-type", "a2-highgpu-8g", "--nodes", "2", "--zone", "us-central1-a",
             "--yes")
    assert "spans" not in a2.output
    assert "resourceStatus" not in gcp.compute.get(PROJECT, "zones/us-central1-a/instances", "n-0")


# ---------------------------------------------------------------------------------- item 3
def _run_in_thread(fn):
    import threading

    box: dict = {}
    t = threading.Thread(target=lambda: box.setdefault("result", fn()), daemon=True)
    t.start()
    return t, box


def test_flex_start_waits_for_capacity_shows_it_and_comes_up(gcp, cli):
    gcp.faults.set_capacity("us-central1-a", "a3-highgpu-8g", 0)
    t, box = _run_in_thread(lambda: cli("cluster", "up", "f", "--machine-type", "a3-highgpu-8g", "--nodes", "2",
                                        "--zone", "us-central1-a", "--flex-start", "4h", "--flex-wait", "30m",
                                        "--yes"))

    def pending() -> list[dict]:
        return [i for i in gcp.compute.list(PROJECT, "zones/us-central1-a/instances") if i["status"] == "PENDING"]

    wait_for(lambda: len(pending()) == 2)
    inst = pending()[0]
    assert inst["scheduling"]["provisioningModel"] == "FLEX_START"
    assert inst["scheduling"]["instanceTerminationAction"] == "DELETE"
    assert inst["scheduling"]["maxRunDuration"] == {"seconds": "14400"}
    assert inst["reservationAffinity"] == {"consumeReservationType": "NO_RESERVATION"}
    assert inst["labels"]["gcpgpu-attempt"] and "attempt=" in inst["description"]  # a failed up removes exactly these
    # The documented queueing path: one instances.insert per VM, not a bulkInsert.
    assert gcp.requests.all(method="POST", contains="/instances/bulkInsert") == []
    assert len(gcp.requests.all(method="POST", contains="/zones/us-central1-a/instances")) == 2
    assert t.is_alive()  # still waiting

    def polls_after_inserts() -> int:  # up's wait loop has looked at its PENDING nodes (and said so)
        reqs = gcp.requests.all()
        last = max(i for i, r in enumerate(reqs) if r.method == "POST" and r.path.endswith("/us-central1-a/instances"))
        return sum(1 for r in reqs[last + 1:] if r.method == "GET" and "aggregated/instances" in r.path)

    wait_for(lambda: polls_after_inserts() >= 1)
    gcp.faults.set_capacity("us-central1-a", "a3-highgpu-8g", 2)
    t.join(120)
    assert not t.is_alive()
    out = box["result"].output
    assert "waiting for capacity: 2/2 flex-start VM(s) PENDING in us-central1-a" in out
    assert "f-1" in out and "RUNNING" in out
    cli("cluster", "down", "f", "--yes")
    assert leftovers(gcp) == {}


def test_flex_start_window_that_ends_unfilled_fails_over_and_leaves_nothing(gcp, cli):
    from gcpgpu import catalog

    for zone in catalog.zones_offering("a3-highgpu-8g", "us-central1"):
        gcp.faults.set_capacity(zone, "a3-highgpu-8g", 0)
    # --flex-wait 0: only if capacity is there now; each zone answers at once with a stockout.
    out = cli("cluster", "up", "x", "--machine-type", "a3-highgpu-8g", "--nodes", "2", "--region", "us-central1",
              "--flex-start", "2h", "--flex-wait", "0", "--yes", code=1)
    assert "no capacity" in out.output
    assert leftovers(gcp) == {}
    bad = cli("cluster", "plan", "x", "--machine-type", "a3-highgpu-8g", "--flex-start", "2h", "--flex-wait", "3h",
              "--region", "us-central1", code=2)
    assert "--flex-wait" in bad.output


def test_emulator_expires_a_queued_flex_start_vm(gcp):
    from gcpgpu.cluster.plan import plan
    from gcpgpu.cluster.spec import ClusterSpec

    gcp.faults.set_capacity("us-central1-a", "a2-highgpu-8g", 0)
    p = plan(ClusterSpec(name="e", machine_type="a2-highgpu-8g", provisioning="flex-start", max_run_duration=3600,
                         flex_wait=90, zones=["us-central1-a"]).validate(), PROJECT)
    gcp.compute.insert_instance(PROJECT, "us-central1-a", p.flex_insert_body("e-0", "us-central1-a"))
    assert gcp.compute.get(PROJECT, "zones/us-central1-a/instances", "e-0")["status"] == "PENDING"
    gcp.compute.clock.advance(91)  # the 90 s window ends with no capacity: GCP deletes the VM
    assert gcp.compute.list(PROJECT, "zones/us-central1-a/instances") == []


# ---------------------------------------------------------------------------------- item 10
def test_cluster_ssh_goes_through_iap_with_the_command_quoted_once(gcp, cli, monkeypatch):
    import shlex

    from gcpgpu.cluster import ssh

    calls: list[list[str]] = []
    # As against Google Cloud: against the emulator ssh refuses (tests/test_cli_first_hour.py).
    monkeypatch.setattr(ssh, "emulated_target", lambda emulator, environ: None)
    monkeypatch.setattr(ssh.shutil, "which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(ssh.subprocess, "call", lambda argv: calls.append(argv) or 3)
    cli("cluster", "up", "s", "--machine-type", "a2-highgpu-1g", "--nodes", "2", "--zone", "us-central1-a",
        "--iap-ssh", "--yes")
    fw = gcp.compute.get(PROJECT, "global/firewalls", "s-iap-ssh")
    assert fw["sourceRanges"] == ["35.235.240.0/20"]
    assert fw["allowed"] == [{"IPProtocol": "tcp", "ports": ["22"]}]
    assert fw["targetTags"] == ["gcpgpu-s"]

    tricky = ["bash", "-c", 'echo "$HOME"; ls \'a b\'']
    out = cli("cluster", "ssh", "s", "--node", "1", "--", *tricky, code=3)  # gcloud's exit status is ours
    argv = calls[-1]
    assert argv[:7] == ["gcloud", "compute", "ssh", "s-1", "--zone=us-central1-a", f"--project={PROJECT}",
                        "--tunnel-through-iap"]
    assert shlex.split(argv[7].removeprefix("--command=")) == tricky
    assert "no gcpgpu firewall rule" not in out.output
    cli("cluster", "ssh", "s", code=3)
    assert calls[-1][3] == "s-0" and len(calls[-1]) == 7  # an interactive shell on rank 0

    cli("cluster", "down", "s", "--yes")
    assert leftovers(gcp) == {}  # the IAP rule goes with the cluster


def test_ssh_rule_is_opt_in_and_ssh_warns_without_it(gcp, cli, monkeypatch):
    from gcpgpu.cluster import ssh

    monkeypatch.setattr(ssh, "emulated_target", lambda emulator, environ: None)  # as against Google Cloud
    monkeypatch.setattr(ssh.shutil, "which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(ssh.subprocess, "call", lambda argv: 0)
    plan = cli("cluster", "plan", "o", "--machine-type", "a2-highgpu-1g", "--region", "us-central1", "--iap-ssh")
    assert "35.235.240.0/20" in plan.stdout and "tcp:22" in plan.stdout
    cli("cluster", "up", "o", "--machine-type", "a2-highgpu-1g", "--zone", "us-central1-a", "--yes")
    assert [f["name"] for f in gcp.compute.list(PROJECT, "global/firewalls") if f["name"].startswith("o-")] == \
        ["o-internal"]
    out = cli("cluster", "ssh", "o")
    assert "no gcpgpu firewall rule for IAP" in out.output
    bad = cli("cluster", "ssh", "o", "--node", "5", code=2)
    assert "--node 5" in bad.output
    # Re-running up with --iap-ssh adds just the rule.
    cli("cluster", "up", "o", "--machine-type", "a2-highgpu-1g", "--zone", "us-central1-a", "--iap-ssh", "--yes")
    assert gcp.compute.get(PROJECT, "global/firewalls", "o-iap-ssh")["sourceRanges"] == ["35.235.240.0/20"]


def test_up_explains_that_a_policy_made_with_a_vm_count_cannot_grow(gcp):
    from gcpgpu.cluster.apply import Cluster
    from gcpgpu.cluster.plan import plan
    from gcpgpu.cluster.spec import ClusterSpec
    from gcpgpu.errors import CloudError

    c = Cluster(Clients(emulator=gcp.address), PROJECT)

    def make(nodes: int):
        return plan(ClusterSpec(name="v", machine_type="a2-highgpu-8g", nodes=nodes,
                                zones=["us-central1-a"]).validate(), PROJECT)

    old = make(2)
    old.policy["groupPlacementPolicy"]["vmCount"] = 2  # as gcpgpu made policies before
    c.up(old)
    with pytest.raises(CloudError, match="made with vmCount 2 and policies cannot change"):
        c.up(make(3))
    assert len(gcp.compute.list(PROJECT, "zones/us-central1-a/instances")) == 2  # nothing was added
