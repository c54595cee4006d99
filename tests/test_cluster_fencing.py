"""A run that stalls past its lease never undoes newer work (issue 23, item 2).

`down` and `up` are real gcpgpu processes stopped with SIGSTOP while they wait on an operation, as
Ctrl-Z or a sleeping laptop stops them, while another run takes the cluster over; SIGCONT then lets them
go on. A recovery is stalled in-process the same way: its lease renewer stops while another run works.
No test waits a lease out: the leases run on the emulator's clock (gcpgpu.gcp.clock), which the test sets
past them, and a process is stopped once the emulator has its request, never after a guessed delay.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers import PROJECT, clients, leftovers, make_plan, wait_for

from gcpgpu.cluster import lease as lease_mod
from gcpgpu.cluster.apply import Cluster
from gcpgpu.cluster.lease import LeaseLost
from gcpgpu.cluster.observe import observe

REPO = Path(__file__).resolve().parent.parent
# An operation that outlasts anything a test waits for: a run stopped while waiting on one is surely
# stopped between two steps, and it ends only when the test sets the clock past it (and past the lease).
SLOW_OP_S = 600.0
PAST_IT = SLOW_OP_S + lease_mod.TTL_SECONDS

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGSTOP"), reason="needs POSIX job control")


@pytest.fixture(autouse=True)
def prompt_lease(monkeypatch):
    monkeypatch.setattr(lease_mod, "POLL_SECONDS", 0.1)


def gcpgpu(gcp, *argv: str) -> subprocess.Popen:
    env = {**os.environ, "GCPGPU_EMULATOR": gcp.address,
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    return subprocess.Popen([sys.executable, "-c", "from gcpgpu.cli import main; main()", "--project", PROJECT,
                             *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)


def stop_when(proc: subprocess.Popen, sent: Callable[[], bool], what: str) -> None:
    """SIGSTOP the run once the emulator has answered what `sent` looks for (the run then waits on its
    operation, which only the clock ends)."""
    def ready() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"the run ended before {what}: {proc.communicate()[1]}")
        return sent()

    wait_for(ready, timeout=120, what=what)
    os.kill(proc.pid, signal.SIGSTOP)


def resume(proc: subprocess.Popen) -> tuple[int, str]:
    os.kill(proc.pid, signal.SIGCONT)
    _out, err = proc.communicate(timeout=120)
    return proc.returncode, err


def test_a_down_stalled_past_its_lease_leaves_a_newer_up_alone(gcp):
    """The probe's case: down stopped at its first instance DELETE, up of the same cluster meanwhile,
    then down resumes. Before the fence it went on to delete the new cluster's firewall rules."""
    Cluster(clients(gcp), PROJECT).up(make_plan(nodes=2))
    # The stop lands while down waits for its node deletions: between two steps, as Ctrl-Z or a sleeping
    # laptop would find it. (A stop between a request's lease check and its sending is the window no
    # client-side fence closes: see README, fencing.)
    gcp.faults.operation_seconds = SLOW_OP_S
    down = gcpgpu(gcp, "cluster", "down", "c", "--yes")
    stop_when(down, lambda: len(gcp.requests.all(method="DELETE", contains="/instances/c-")) == 2,
              "down's two node DELETEs")
    gcp.clock.advance(PAST_IT)  # past the stopped run's lease, and its deletions done
    gcp.faults.operation_seconds = None
    nodes = Cluster(clients(gcp), PROJECT).up(make_plan(nodes=2))  # takes the expired lease over, rebuilds
    assert [n.status for n in nodes] == ["RUNNING", "RUNNING"]
    before = observe(clients(gcp), PROJECT, "c")

    rc, err = resume(down)
    assert rc == 1, err
    lines = [x for x in err.splitlines() if x.startswith("Error:")]
    assert len(lines) == 1 and "lost the lease of cluster c" in lines[0], err
    after = observe(clients(gcp), PROJECT, "c")
    assert [(n.name, n.status) for n in after.nodes] == [("c-0", "RUNNING"), ("c-1", "RUNNING")]
    assert after.names() == before.names()  # every firewall rule, subnet, network and the policy still there


def test_an_up_stalled_past_its_lease_creates_nothing_after_a_newer_down(gcp):
    """up stopped before its bulkInsert (waiting for its placement policy and Cloud NAT, both sent), a down
    meanwhile: the resumed up must neither create nodes nor roll anything back, and what the down removed
    stays removed."""
    gcp.faults.operation_seconds = SLOW_OP_S
    up = gcpgpu(gcp, "cluster", "up", "c", "--machine-type", "a2-highgpu-1g", "--nodes", "2",
                "--zone", "us-central1-a", "--yes")
    stop_when(up, lambda: all(gcp.requests.all(method="POST", contains=f"/regions/us-central1/{kind}")
                              for kind in ("resourcePolicies", "routers")), "up's placement policy and router")
    gcp.clock.advance(PAST_IT)
    gcp.faults.operation_seconds = None
    Cluster(clients(gcp), PROJECT).down("c")
    assert leftovers(gcp) == {}
    inserts_before = len(gcp.requests.all(method="POST", contains="/instances/bulkInsert"))

    rc, err = resume(up)  # it has exited: every request it made has been answered
    assert rc == 1, err
    assert "lost the lease of cluster c" in err and "Removing what this attempt created" not in err, err
    assert leftovers(gcp) == {}
    assert len(gcp.requests.all(method="POST", contains="/instances/bulkInsert")) <= max(inserts_before, 1)


def test_a_recovery_stalled_past_its_lease_does_not_rebuild_a_cluster_taken_down_meanwhile(gcp):
    """A recovery that stalls between deciding and deleting the lost node, while the user takes the
    cluster down: it stops at its next step instead of re-creating the cluster."""
    from gcpgpu.cluster.session import Reporter
    from gcpgpu.jobs.cluster import backend, recover
    from gcpgpu.jobs.cluster import nodes as job_nodes
    from gcpgpu.jobs.spec import JobSpec, validate

    nodes = Cluster(clients(gcp), PROJECT).up(make_plan(nodes=2))
    job = validate(JobSpec(target="cluster", cluster="c", image="busybox", command=["sleep", "30"]),
                   project=PROJECT, region="us-central1", zone=None)
    jid = backend.submit(clients(gcp), PROJECT, job).jid
    follower: list[recover.Follower] = []

    class Stall(Reporter):
        def step(self, key: str, text: str) -> None:
            if key == "delete":  # about to delete the lost node: the process stalls here
                lease = follower[0].session.lease
                lease._stop.set()  # a stopped process renews nothing
                gcp.clock.advance(lease.ttl + 1.0)  # ... while its lease lapses
                Cluster(clients(gcp), PROJECT).down("c")  # the user, meanwhile

    f = recover.Follower(clients(gcp), PROJECT, jid, 3, Stall(), poll_s=0.2)
    follower.append(f)
    assert gcp.compute.lose_instance(PROJECT, nodes[1].zone, "c-1", "host_error", 0.0)  # the lost node
    state = job_nodes.status(clients(gcp), PROJECT, jid)
    lost = [r for r in state["per_node"] if r["node_status"] != "RUNNING"]
    with pytest.raises(LeaseLost, match="lost the lease of cluster c"):
        f.recover_once(state, lost, {r["node"]: "preempted" for r in lost})
    assert leftovers(gcp) == {}  # down's work stands: no node, network or policy came back


def test_a_renewal_acknowledged_after_its_own_expiry_does_not_prove_the_lease(gcp, monkeypatch):
    """A run stalled between writing its renewal and seeing it acknowledged (the write's operation
    outlived the stop) must not take the acknowledgement for a lease it holds now: meanwhile another run
    took the cluster over and finished. Found by the SIGSTOP test when a lease write took longer than
    the lease lived."""
    lease = lease_mod.Lease(clients(gcp), PROJECT, "c", holder="stalled", op="down", ttl=60)
    lease.acquire()
    lease._stop.set()  # a stopped process renews nothing in the background
    real_swap = lease._swap
    stalled = []

    def renew_then_stall(change):
        out = real_swap(change)
        if not stalled:  # the first renewal is written ... then the process stops for two minutes,
            stalled.append(True)
            lease_mod.Lease(clients(gcp), PROJECT, "c", holder="newer", op="up")._swap(lambda current: None)
            gcp.clock.advance(120.0)  # ... while a newer run took the lease over, finished and released it
        return out

    monkeypatch.setattr(lease, "_swap", renew_then_stall)
    lease.expires = gcp.clock.now() - 1  # due for a renewal at its next step
    with pytest.raises(LeaseLost, match="lost the lease of cluster c"):
        lease.check()
