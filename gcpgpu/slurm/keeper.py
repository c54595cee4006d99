"""Node 0 keeps a Slurm cluster whole: a lost node is marked DOWN (Slurm requeues its jobs) and brought back,
and a node Slurm drained because a lost attempt's task outlived UnkillableStepTimeout ("Kill task failed")
is returned to service.

Each round of node 0's queue agent (queue.py) it reads the cluster's nodes from Compute. A node that is
not RUNNING (preempted, stopped, deleted, a host error) is marked DOWN in Slurm at once, so the jobs on
it are requeued rather than left to fail, and a job that failed on it anyway (its peer's collective
error can beat the DOWN by a moment) is requeued too. Then the cluster is brought back to its spec (the
`gcpgpu-spec` its nodes carry) by `cluster up`'s own code, under the cluster's lease: a stopped node is
started, a deleted one re-created under its name and rank; its slurmd registers again and Slurm
(ReturnToService=2) runs the requeued jobs there, which resume from their checkpoints. While node 0
itself is away, nobody does this: the queue waits on its state disk until a `cluster up` (or `cluster
repair`) makes node 0 again, which gets the disk back (gcpgpu/slurm/__init__.py says why).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from gcpgpu.cluster.observe import observe_nodes
from gcpgpu.gcp.clients import Clients

UP_EVERY_S = 10.0
# Why Slurm holds a node drained or down that gcpgpu returns to service: a task Slurm could not kill within
# UnkillableStepTimeout (a lost attempt's), and gcpgpu's own mark of a lost node.
OURS = ("Kill task failed", "Kill_task_failed", "gcpgpu")  # a cluster being brought back is not asked again before this


class Keeper:
    def __init__(self, clients: Clients, project: str, cluster: str, slurm: Callable[..., Any],
                 say: Callable[[str], None]) -> None:
        self.clients, self.project, self.cluster = clients, project, cluster
        self.slurm = slurm  # runs a Slurm command with the node's SLURM_CONF
        self.say = say
        self.lost: dict[str, float] = {}  # node name -> when it was first seen lost (this process's clock)
        # node name -> (when, why) of its last loss (gcpgpu.gcp.clock): kept after it is back, for the history
        # entry of a job Slurm requeued off it (requeue.py)
        self.losses: dict[str, tuple[float, str]] = {}
        self.drained: list[str] = []  # nodes Slurm holds drained for a reason not gcpgpu's (_return_drained)
        self._upped = float("-inf")

    def round(self) -> None:
        nodes = [n for n in observe_nodes(self.clients, self.project, self.cluster) if n.rank is not None]
        if not nodes:
            return
        expected = max((n.expected_nodes or 0) for n in nodes) or len(nodes)
        names = {n.name for n in nodes}
        gone = {n.name for n in nodes if n.status != "RUNNING"}
        gone |= {f"{self.cluster}-{r}" for r in range(expected)} - names
        new = sorted(gone - set(self.lost))
        if new:
            self.losses.update(self._causes(nodes, new))
        for name in new:
            self.lost[name] = time.time()
            self.say(f"node {name} is lost: marking it DOWN so Slurm requeues its jobs")
            self.slurm("scontrol", "update", f"NodeName={name}", "State=DOWN", "Reason=gcpgpu:node-lost")
        for name in [n for n in self.lost if n not in gone]:
            del self.lost[name]  # RUNNING again: its slurmd registers and Slurm returns it to service
        self._return_drained(names - gone)
        if gone and time.monotonic() - self._upped >= UP_EVERY_S:
            self._upped = time.monotonic()
            self._bring_back(nodes, sorted(gone))

    def _return_drained(self, up: set[str]) -> None:
        """Return to service the nodes (RUNNING VMs, their slurmd answering) that Slurm holds drained or down for
        gcpgpu's own reasons: a lost attempt's task it could not kill in time ("Kill task failed": the node went
        under it, or node 0 did) or gcpgpu's own mark (a loss, now over). Nothing else returns them (ReturnToService
        covers a node DOWN for not responding only), and the queue then waits for good. A node drained for any
        other reason (an administrator's) stays drained: `drained` names it, for why a job waits."""
        shown = self.slurm("sinfo", "-h", "-N", "-o", "%N|%T|%E")
        if getattr(shown, "returncode", 1) != 0:
            return
        drained = []
        for line in sorted(set(str(shown.stdout).splitlines())):
            name, _, rest = line.partition("|")
            state, _, reason = rest.partition("|")
            if not ("drain" in state or state.startswith("down")) or state.endswith("*"):
                continue  # in service, or its slurmd not answering (ReturnToService=2 brings it back)
            if name in up and reason.startswith(OURS):
                self.say(f"node {name} is {state} ({reason}): returning it to service")
                self.slurm("scontrol", "update", f"NodeName={name}", "State=RESUME")
            elif "drain" in state:
                drained.append(name)
        self.drained = drained

    def _causes(self, nodes: list, names: list[str]) -> dict[str, tuple[float, str]]:
        """Why each of `names` was lost, as a cluster without Slurm says it (jobs/cluster/loss.py)."""
        from gcpgpu.gcp import clock
        from gcpgpu.jobs.cluster.loss import loss_causes

        by_name = {n.name: n for n in nodes}
        zone = nodes[0].zone
        rows = [{"node": name, "zone": by_name[name].zone if name in by_name else zone,
                 "node_status": by_name[name].status if name in by_name else "DELETED"} for name in names]
        try:
            causes = loss_causes(self.clients, self.project, self.cluster, rows)
        except Exception as e:  # noqa: BLE001 - the cause is a nicety: the node is marked DOWN regardless
            self.say(f"why {', '.join(names)} went is unknown: {type(e).__name__}: {e}")
            causes = {}
        now = clock.now()
        return {name: (now, causes.get(name) or "node lost") for name in names}

    def requeue_failed(self, job: dict[str, str]) -> bool:
        """Requeue a Slurm job that FAILED on a node lost while it ran (True when asked)."""
        if job.get("JobState") not in ("FAILED", "NODE_FAIL") or not self.lost:
            return False
        hosts = self.slurm("scontrol", "show", "hostnames", job.get("NodeList", "")).stdout.split()
        if not set(hosts) & set(self.lost):
            return False
        self.say(f"Slurm job {job['JobId']} ended {job['JobState']} on lost node(s): requeued")
        self.slurm("scontrol", "requeue", job["JobId"])
        return True

    def _bring_back(self, nodes: list, gone: list[str]) -> None:
        from gcpgpu.cluster.apply import Cluster, up
        from gcpgpu.cluster.lease import LeaseHeld
        from gcpgpu.cluster.names import node_name
        from gcpgpu.cluster.plan import plan
        from gcpgpu.cluster.spec import ClusterSpec

        raw = next((n.metadata.get("gcpgpu-spec") for n in nodes if n.metadata.get("gcpgpu-spec")), None)
        if not raw:
            self.say("the nodes carry no cluster spec: bring the cluster back with 'gcpgpu cluster up'")
            return
        known = set(ClusterSpec.__dataclass_fields__)
        spec = ClusterSpec(**{k: v for k, v in json.loads(raw).items() if k in known}).validate()
        s = Cluster(self.clients, self.project).session()
        try:
            with s.holding(self.cluster, "up", False):
                # Read again under the lease: a `cluster down` that held it has deleted node 0 (this node)
                # too, and a cluster being taken down must never be brought back by its own last node.
                now = {n.name: n for n in observe_nodes(self.clients, self.project, self.cluster)}
                head = now.get(node_name(self.cluster, 0))
                if head is None or head.status != "RUNNING":
                    self.say(f"node 0 of cluster {self.cluster} is going: not bringing anything back")
                    return
                self.say(f"bringing cluster {self.cluster} back to {spec.nodes} node(s): {', '.join(gone)}")
                up(s, plan(spec, self.project))
        except LeaseHeld:
            self.say("the cluster is busy (another up, down or recovery): next round")
