"""A run that stalls past its lease never undoes newer work (issue 23, item 2).

`down` and `up` are real gcpgpu processes stopped with SIGSTOP at a phase, as Ctrl-Z or a sleeping
laptop stops them, while another run takes the cluster over; SIGCONT then lets them go on. A
recovery is stalled in-process the same way: its lease renewer stops and time passes while
another run works.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import PROJECT, clients, leftovers, make_plan

from gcpgpu.cluster import lease as lease_mod
from gcpgpu.cluster.apply import Cluster
from gcpgpu.cluster.lease import LeaseLost
from gcpgpu.cluster.observe import observe

REPO = Path(__file__).resolve().parent.parent
TTL = 6.0  # longer than any one lease write takes here, even under load

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGSTOP"), reason="needs POSIX job control")


@pytest.fixture(autouse=True)
def short_lease(monkeypatch):
    monkeypatch.setenv("GCPGPU_LEASE_TTL", str(TTL))
    monkeypatch.setattr(lease_mod, "POLL_SECONDS", 0.1)


def gcpgpu(gcp, *argv: str) -> subprocess.Popen:
    env = {**os.environ, "GCPGPU_EMULATOR": gcp.address, "GCPGPU_LEASE_TTL": str(TTL),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    return subprocess.Popen([sys.executable, "-c", "from gcpgpu.cli import main; main()", "--project", PROJECT,
                             *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)


def stop_at(proc: subprocess.Popen, text: str, timeout: float = 60.0, after_s: float = 0.0) -> list[str]:
    """Read the run's progress lines until one contains `text`, then (`after_s` later) SIGSTOP it; the lines read."""
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    assert proc.stderr is not None
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        seen.append(line)
        if text in line:
            time.sleep(after_s)
            os.kill(proc.pid, signal.SIGSTOP)
            return seen
    proc.kill()
    raise AssertionError(f"the run never printed {text!r}: {''.join(seen)}")


def resume(proc: subprocess.Popen) -> tuple[int, str]:
    os.kill(proc.pid, signal.SIGCONT)
    _out, err = proc.communicate(timeout=120)
    return proc.returncode, err


def test_a_down_stalled_past_its_lease_leaves_a_newer_up_alone(gcp):
    """The probe's case: down stopped at its first instance DELETE, up of the same cluster meanwhile,
    then down resumes. Before the fence it went on to delete the new cluster's firewall rules."""
    Cluster(clients(gcp), PROJECT).up(make_plan(nodes=2))
    # The stop lands while down waits for its node deletions (sent right after the line, 1.5 s each):
    # between two steps, as Ctrl-Z or a sleeping laptop would find it. (A stop between a request's lease
    # check and its sending is the window no client-side fence closes: see README, fencing.)
    gcp.faults.operation_seconds = 1.5
    down = gcpgpu(gcp, "cluster", "down", "c", "--yes")
    stop_at(down, "Deleting 2 node(s)", after_s=0.5)
    time.sleep(TTL + 1.5)  # past the stopped run's lease, and its deletions done
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
    """up stopped before its bulkInsert, a down meanwhile: the resumed up must neither create nodes
    nor roll anything back, and what the down removed stays removed."""
    gcp.faults.operation_seconds = 0.5
    up = gcpgpu(gcp, "cluster", "up", "c", "--machine-type", "a2-highgpu-1g", "--nodes", "2",
                "--zone", "us-central1-a", "--yes")
    stop_at(up, "Creating 2 x a2-highgpu-1g")
    time.sleep(TTL + 1.0)
    gcp.faults.operation_seconds = None
    Cluster(clients(gcp), PROJECT).down("c")
    assert leftovers(gcp) == {}
    inserts_before = len(gcp.requests.all(method="POST", contains="/instances/bulkInsert"))

    rc, err = resume(up)
    assert rc == 1, err
    assert "lost the lease of cluster c" in err and "Removing what this attempt created" not in err, err
    time.sleep(1.0)  # anything the resumed run might still send would have arrived
    assert leftovers(gcp) == {}
    assert len(gcp.requests.all(method="POST", contains="/instances/bulkInsert")) <= max(inserts_before, 1)


def test_a_recovery_stalled_past_its_lease_does_not_rebuild_a_cluster_taken_down_meanwhile(gcp):
    """A recovery that stalls between deciding and deleting the lost node, while the user takes the
    cluster down: it stops at its next step instead of re-creating the cluster."""
    from gcpgpu.cluster.session import Reporter
    from gcpgpu.jobs import cluster as cluster_jobs
    from gcpgpu.jobs import recover
    from gcpgpu.jobs.spec import JobSpec, validate

    nodes = Cluster(clients(gcp), PROJECT).up(make_plan(nodes=2))
    job = validate(JobSpec(target="cluster", cluster="c", image="busybox", command=["sleep", "30"]),
                   project=PROJECT, region="us-central1", zone=None)
    jid, _ = cluster_jobs.submit(clients(gcp), PROJECT, job, "c")
    follower: list[recover.Follower] = []

    class Stall(Reporter):
        def step(self, key: str, text: str) -> None:
            if key == "delete":  # about to delete the lost node: the process stalls here
                follower[0].session.lease._stop.set()  # a stopped process renews nothing
                time.sleep(TTL + 1.0)
                Cluster(clients(gcp), PROJECT).down("c")  # the user, meanwhile

    f = recover.Follower(clients(gcp), PROJECT, jid, 3, Stall(), poll_s=0.2)
    follower.append(f)
    assert gcp.compute.lose_instance(PROJECT, nodes[1].zone, "c-1", "host_error", 0.0)  # the lost node
    state = cluster_jobs.status(clients(gcp), PROJECT, jid)
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
    real_swap, real_time = lease._swap, lease_mod.time.time
    later = {"by": 0.0}

    def renew_then_stall(change):
        out = real_swap(change)
        if not later["by"]:  # the first renewal is written ... then the process stops for two minutes,
            lease_mod.Lease(clients(gcp), PROJECT, "c", holder="newer", op="up")._swap(lambda current: None)
            later["by"] = 120.0  # ... while a newer run took the lease over, finished and released it
        return out

    monkeypatch.setattr(lease, "_swap", renew_then_stall)
    monkeypatch.setattr(lease_mod.time, "time", lambda: real_time() + later["by"])
    lease.expires = real_time() - 1  # due for a renewal at its next step
    with pytest.raises(LeaseLost, match="lost the lease of cluster c"):
        lease.check()
