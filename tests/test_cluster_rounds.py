"""`cluster up` waits only on the operations the dependencies need (issue 27): networks -> subnetworks and
firewalls -> bulkInsert. The lease's writes and the rank labels are never waited on."""

from __future__ import annotations

from helpers import PROJECT, clients, make_plan

from gcpgpu.cluster.apply import Cluster


def _waited_types(gcp) -> list[str]:
    """The operationType of every operation the run waited on, in order."""
    ops = {o["name"]: o["operationType"] for scope in gcp.compute.aggregated_operations(PROJECT).values()
           for o in scope}
    waited = [r.path.rsplit("/operations/", 1)[1].split("/")[0] for r in gcp.requests.all(contains="/operations/")
              if r.path.endswith("/wait")]
    return [ops.get(name, "?") for name in waited]


def test_a_new_cluster_waits_on_its_resources_only_and_labels_each_node_once_in_fabric_order(gcp):
    gcp.faults.subblock_hosts = 2  # 6 nodes in 3 sub-blocks, dealt round-robin: fabric order is not name order
    gcp.faults.operation_seconds = 0.2  # operations that are not DONE at once, so waits show in the log
    gcp.requests.clear()
    nodes = Cluster(clients(gcp), PROJECT).up(make_plan(nodes=6))

    waited = _waited_types(gcp)
    assert "setLabels" not in waited and "setMetadata" not in waited, waited
    assert waited.count("bulkInsert") == 1
    # One label per node, already the fabric order: no second pass relabelling them.
    assert len(gcp.requests.all(method="POST", contains="/setLabels")) == 6
    assert [n.rank for n in nodes] == list(range(6))
    assert all(n.labels["gcpgpu-rank"] == str(n.rank) for n in nodes)
    subs = [n.subblock for n in nodes]
    assert subs[0] == subs[1] != subs[2] == subs[3] != subs[4] == subs[5], subs
    assert nodes[0].name == "c-0"
    # The lease is gone at the end, though its release was not waited on.
    meta = gcp.compute.common_metadata(gcp.compute.project(PROJECT))
    assert not [i for i in meta["items"] if i["key"].startswith("gcpgpu-lease-")]


def test_a_label_send_that_fails_while_the_node_is_created_is_made_again_after_bulkinsert(gcp, monkeypatch):
    """The labels go out while bulkInsert runs; one refused then (as a VM not ready for it yet might be)
    is sent again once bulkInsert is done, and waited on."""
    from gcpgpu.cluster import bootlabels

    real = bootlabels.send_label
    calls: list[str] = []

    def flaky(session, node, labels):
        calls.append(node.name)
        if node.name == "c-1" and calls.count("c-1") == 1:
            raise RuntimeError("resource not ready")  # the first try for c-1 fails
        return real(session, node, labels)

    monkeypatch.setattr(bootlabels, "send_label", flaky)
    nodes = Cluster(clients(gcp), PROJECT).up(make_plan(nodes=3))
    assert calls.count("c-1") == 2
    assert [n.labels.get("gcpgpu-rank") for n in nodes] == ["0", "1", "2"]
