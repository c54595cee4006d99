"""`metrics tail` on a cluster over 64 nodes (issue 27): the slowest nodes, every straggler and every node
with a slow GPU, found with Cloud Monitoring's own reductions in a fixed number of calls; --all for every row."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from gcpgpu.cli import main
from gcpgpu.fakes.monitoring.testing import emulated_cluster
from gcpgpu.gcp.clients import Clients
from gcpgpu.metrics.tail import Tail

PROJECT = "metrics-test"


@pytest.fixture
def big(gcp, monkeypatch):
    """80 nodes: c-5 a straggler, c-10..c-18 a little slow (the slowest, yet no stragglers), and one GPU of
    c-40 slow while its node's mean stays above those nine."""
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", PROJECT)
    emulated_cluster(gcp, "c", 80)
    gcp.monitoring.straggler("c-5", factor=0.5)
    for n in range(10, 19):
        gcp.monitoring.straggler(f"c-{n}", factor=0.86)
    gcp.monitoring.straggler("c-40", factor=0.3, gpu=3)
    return gcp


def rows(*args: str) -> list[dict]:
    result = CliRunner().invoke(main, ["--format", "json", "metrics", "tail", "--cluster", "c", "--once", *args])
    assert result.exit_code == 0, result.output
    return [json.loads(line) for line in result.stdout.splitlines()]


def test_a_big_cluster_shows_its_slowest_nodes_every_straggler_and_the_node_with_a_slow_gpu(big):
    got = rows()
    nodes = {r["name"] for r in got if r["kind"] == "node"}
    assert "c-5" in nodes and "c-40" in nodes  # the straggler, and the node found by its worst GPU (REDUCE_MIN)
    assert len(nodes & {f"c-{n}" for n in range(10, 19)}) >= 7  # the slowest, with c-5 among the 8
    assert len(nodes) <= 10 and [r["kind"] for r in got][-1] == "total"
    assert next(r for r in got if r["name"] == "c-5")["straggler"]
    table = CliRunner().invoke(main, ["metrics", "tail", "--cluster", "c", "--once"])
    assert "(--all shows every row)" in table.stdout and f"{80 - len(nodes)} more" in table.stdout


def test_the_per_gpu_view_shows_the_slow_gpu_as_a_straggler_and_all_shows_every_row(big):
    got = rows("--gpus")
    gpus = [r for r in got if r["kind"] == "gpu"]
    slow = next(r for r in gpus if r["name"] == "c-40/gpu3")
    assert slow["straggler"] and not next(r for r in gpus if r["name"] == "c-40/gpu2")["straggler"]
    assert len(gpus) <= 10 * 8
    every = rows("--gpus", "--all")
    assert sum(r["kind"] == "node" for r in every) == 80 and sum(r["kind"] == "gpu" for r in every) == 640


@pytest.mark.parametrize("per_gpu", [False, True])
def test_calls_per_refresh_stay_fixed_from_80_to_160_nodes(gcp, per_gpu):
    calls = {}
    for nodes in (80, 160):
        gcp.reset()
        emulated_cluster(gcp, f"c{nodes}", nodes)
        session = Tail(Clients(emulator=gcp.address, project=PROJECT), PROJECT, "cluster", f"c{nodes}", per_gpu=per_gpu)
        session.refresh()
        gcp.requests.clear()
        session.refresh()
        calls[nodes] = len(gcp.requests.all(api="monitoring"))
    # 13 columns, the 4 NIC metrics + each node's worst GPU; with --gpus, the 7 per-GPU columns for the nodes shown.
    assert calls[80] == calls[160] == (25 if per_gpu else 18)


def test_the_cluster_is_found_without_reading_whole_vms(gcp, monkeypatch):
    """Discovery asks for the row's fields only: a whole VM is ~17 KB (its startup script), and 1,024 of them
    read by a --once made it ~2x the time of one at 8 nodes (issue 27)."""
    from gcpgpu.cluster import observe
    from gcpgpu.metrics.target import resolve

    asked: list[str | None] = []
    real = observe.list_nodes
    monkeypatch.setattr(observe, "list_nodes", lambda *a, **kw: asked.append(a[3] if len(a) > 3 else kw.get("fields"))
                        or real(*a, **kw))
    emulated_cluster(gcp, "c", 3)
    target = resolve(Clients(emulator=gcp.address, project=PROJECT), PROJECT, "cluster", "c")
    assert [m.name for m in target.members] == ["c-0", "c-1", "c-2"] and all(m.key for m in target.members)
    assert asked and asked[0] and "metadata" not in asked[0]
