"""A cluster job's spend cap (`job submit --max-spend USD`), enforced by whoever follows the job: after
--detach, the cluster's own follower (gcpgpu/node/agent.py), not the laptop.

Each poll the follower prices the job as `job status` does (spent.py: its nodes for its time, at the
node price COST SO FAR uses):

    cost >= 80 % of the cap   once: SPEND_WARNING to the job's --notify webhooks (spent_usd, max_spend_usd),
                              and `spend_warned` in the job's record, so a follower that takes over does not
                              tell it again
    cost >= the cap           the job is stopped as a recovery stops it (each node's agent sends SIGTERM: the
                              bundled trainer saves a checkpoint before it exits), and ends CANCELLED with
                              cause "max spend" and the figures in its record's error; the webhooks are told
                              CANCELLED with that cause

A job whose machine has no catalog price cannot be capped: it runs on, and the follower says so once.

The cluster's own cap (`cluster up --max-spend`: gcpgpu/cluster/spend.py) is judged here too while a job
runs: SPEND_WARNING once per run of the cluster at 80 % (marked in project metadata `gcpgpu-spend-<cluster>`,
which `cluster status` shows), and at the cap the job is stopped the same way, cause "cluster max spend";
the node's follower then stops the cluster (gcpgpu/node/agent.py's capped()).
"""

from __future__ import annotations

from typing import Any

from gcpgpu.gcp import clock
from gcpgpu.jobs.state import CANCELLED, JobState

from . import nodes, spent, store
from .record import stamp

WARN_AT = 0.8
NO_CAP_LOOK_S = 300.0  # how often a follower looks again for the cap of a cluster that had none (`up` re-run)
CAUSE = "max spend"
WARNING = "SPEND_WARNING"


class Cap:
    """The spend cap of the job a Guard (restart.py) follows; `usd` None: no cap."""

    def __init__(self, guard: Any, policy: dict) -> None:
        self.g = guard
        self.usd = float(policy["max_spend"]) if policy.get("max_spend") else None
        self.warned: bool | None = None  # read from the job's record on the first look
        self.unpriced_told = False
        self.capped_cluster = True  # until a look at the cluster's nodes finds no cap (cluster up --max-spend)
        self.next_look = 0.0

    def check(self, state: JobState) -> JobState | None:
        """None while the job (and its cluster) is under its cap; the job as stopped once one reached it."""
        f = self.g.f
        level, usd, cap = None, None, None
        if self.capped_cluster or clock.now() >= self.next_look:  # a cluster without a cap: looked at now and then
            level, usd, cap, _nodes = cluster_level(f.clients, f.project, f.jid.cluster or "",
                                                    lambda line: f.report.step("spend", line))
            self.capped_cluster, self.next_look = cap is not None, clock.now() + NO_CAP_LOOK_S
        if level == "stop" and cap is not None and usd is not None:
            return self._stop(state, CLUSTER_CAUSE, f"stopped as cluster {f.jid.cluster} reached its spend cap: "
                                                    f"${usd:,.2f} of its --max-spend ${float(cap['usd']):,.2f}",
                              usd, float(cap["usd"]))
        if self.usd is None:
            return None
        got = spent.job_spent(f.clients, f.project, state)
        usd = got["cost_usd"]
        if usd is None:
            if not self.unpriced_told:
                self.unpriced_told = True
                f.report.step("spend", f"Job {f.jid}: --max-spend ${self.usd:,.2f} cannot be enforced: the catalog "
                                       f"has no price for {state.machine_type}")
            return None
        if usd >= WARN_AT * self.usd:
            self._warn(state, usd)
        if usd < self.usd:
            return None
        return self._stop(state, CAUSE, f"stopped at its spend cap: ${usd:,.2f} of --max-spend ${self.usd:,.2f}",
                          usd, self.usd)

    def _stop(self, state: JobState, cause: str, why: str, usd: float, cap: float) -> JobState:
        """Stop the job so its trainers checkpoint (SIGTERM), and write its end: CANCELLED with `cause`."""
        f = self.g.f
        where = state.output_dir or "its --ckpt-dir"
        f.report.step("spend", f"Job {f.jid}: {why}: stopping it so its trainers checkpoint (SIGTERM) to {where}")
        f._stop_survivors()
        self.g.tell(CANCELLED, state.attempt, cause=cause,
                    error=f"{why}; its checkpoint is in {where}: submit it again with --resume (and a higher cap) "
                          "to go on", webhook={"spent_usd": usd, "max_spend_usd": cap})
        return nodes.status(f.clients, f.project, f.jid)

    def _warn(self, state: JobState, usd: float) -> None:
        f = self.g.f
        if self.warned is None:
            seen = store.read(f.clients, f.project, f.jid.cluster or "").of(f.jid.job)
            self.warned = bool(seen is not None and seen.spend_warned)
        if self.warned:
            return
        self.warned = True
        store.amend(f.clients, f.project, f.jid, state.attempt, spend_warned=stamp())
        f.report.step("spend", f"Job {f.jid} has cost ${usd:,.2f}, {100 * usd / self.usd:.0f}% of its --max-spend "
                               f"${self.usd:,.2f}")
        self.g.notifier.send(WARNING, attempt=state.attempt, spent_usd=usd, max_spend_usd=self.usd,
                             percent=round(100 * usd / self.usd, 1))


# -- the cluster's own cap (cluster up --max-spend: gcpgpu/cluster/spend.py) ---------------------------------
MARK_PREFIX = "gcpgpu-spend-"  # project metadata: what the cluster's leader did about its cap, this run
CLUSTER_CAUSE = "cluster max spend"
CAPPED = "SPEND_CAPPED"
NOTIFY_WAIT_S = 30.0


def marks(clients: Any, project: str, cluster: str) -> dict[str, Any]:
    """What the cluster's leaders wrote of its cap: {"since" (the run it is about), "warned", "stopped",
    "spent_usd", "max_spend_usd", "why"}; {} when nothing."""
    import json

    from .journal import items

    raw = next((i["value"] for i in items(clients, project)[1] if i["key"] == MARK_PREFIX + cluster), None)
    try:
        got = json.loads(raw) if raw else {}
    except ValueError:
        return {}
    return got if isinstance(got, dict) else {}


def mark(clients: Any, project: str, cluster: str, fence: Any = lambda: None, **fields: Any) -> None:
    """Add `fields` to the cluster's marks (a mark of an earlier run is replaced)."""
    import json

    from .journal import swap

    def change(current: str | None) -> str:
        try:
            old = json.loads(current) if current else {}
        except ValueError:
            old = {}
        if not isinstance(old, dict) or old.get("since") != fields.get("since"):
            old = {}
        return json.dumps({**old, **fields}, sort_keys=True)

    swap(clients, project, MARK_PREFIX + cluster, change, fence, f"cluster {cluster}'s spend cap")


def forget(clients: Any, project: str, cluster: str) -> None:
    from .journal import swap

    swap(clients, project, MARK_PREFIX + cluster, lambda _current: None)


def run_since(nodes: list[Any]) -> str | None:
    """The cluster's current run: its earliest node's start (what COST SO FAR counts from)."""
    from gcpgpu.cluster import cost

    starts = [r.started for r in (cost.node_run(n) for n in nodes) if r.started is not None]
    return stamp(min(starts)) if starts else None


def cluster_level(clients: Any, project: str, cluster: str, say: Any) -> tuple[str | None, float | None, dict | None,
                                                                                  list[Any]]:
    """How near the cluster is to its cap: ("warn" | "stop" | None, its cost so far, the cap, its nodes);
    the first time this run reaches 80 %, SPEND_WARNING goes to the cap's webhooks (once: marked)."""
    from gcpgpu.cluster import spend
    from gcpgpu.cluster.observe import observe_nodes
    from gcpgpu.jobs import notify

    nodes = observe_nodes(clients, project, cluster)
    cap = spend.of(nodes)
    level, usd = spend.level(nodes, cap)
    if level is None or cap is None or usd is None:
        return level, usd, cap, nodes
    since = run_since(nodes)
    seen = marks(clients, project, cluster)
    if seen.get("since") != since or not seen.get("warned"):
        mark(clients, project, cluster, since=since, warned=stamp(), spent_usd=usd, max_spend_usd=float(cap["usd"]))
        say(f"cluster {cluster} has cost ${usd:,.2f}, {100 * usd / float(cap['usd']):.0f}% of its --max-spend "
            f"${float(cap['usd']):,.2f}")
        notify.send([str(u) for u in cap.get("notify") or []], WARNING, wait_s=NOTIFY_WAIT_S, cluster=cluster,
                    spent_usd=usd, max_spend_usd=float(cap["usd"]), percent=round(100 * usd / float(cap["usd"]), 1))
    return level, usd, cap, nodes
