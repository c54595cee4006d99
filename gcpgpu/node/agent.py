"""The follower every node of a gcpgpu cluster runs: `python -m gcpgpu.node.agent --project P --cluster C --node N`.

A node runs it when its metadata says `gcpgpu-agent` (a job submitted with --detach, or a cluster
with --autostop): on a real node from the training image, which has gcpgpu, as the node's service
account (templates/startup.sh.j2); in the emulator as a local process that dies with its node.

Each round, the one node whose follower leads (jobs/cluster/follower.py: a lease in project metadata)
follows the cluster's job to its end, recovering it from lost nodes with the settings its record
carries, and while no job runs judges the cluster's autostop (cluster/autostop.py): idle means no
job running and every GPU under the idle floor `gcpgpu metrics` uses; before it stops or deletes the
cluster it tells the setting's webhooks AUTOSTOPPED (jobs/notify.py); and it judges the cluster's spend cap
(`cluster up --max-spend`, capped()). The others wait to take over.
It sits above cluster/, jobs/ and metrics/ because it uses all three.

Its leases name its node (cluster/lease.py's on_node), so once Compute says the node is going another
node's follower takes the lead at once; and when the node shuts down (a Spot preemption's notice
reaches its services as SIGTERM) it hands what it holds over before it goes.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from gcpgpu.cluster import autostop
from gcpgpu.cluster import lease as leases
from gcpgpu.cluster.lease import Lease, LeaseHeld, LeaseLost
from gcpgpu.cluster.observe import Node, observe_nodes
from gcpgpu.cluster.session import Reporter, Session
from gcpgpu.costs import ledger
from gcpgpu.gcp import clock
from gcpgpu.gcp.clients import Clients
from gcpgpu.jobs import notify
from gcpgpu.jobs.cluster import backend, follower
from gcpgpu.jobs.cluster.record import stamp
from gcpgpu.jobs.cluster.recover import GaveUp
from gcpgpu.node import service
from gcpgpu.times import format_duration

GPU_WINDOW_S = 180.0  # the newest GPU point within this window counts (Ops Agent writes once a minute)
NOTIFY_WAIT_S = 30.0  # how long AUTOSTOPPED may hold up the judge's own node (the sender's tries take ~15 s)


class Said(Reporter):
    def __init__(self, say: Callable[[str], None]) -> None:
        self.say = say

    def step(self, key: str, text: str) -> None:
        self.say(text)

    def note(self, text: str) -> None:
        self.say(text)


def job_running(clients: Clients, project: str, cluster: str) -> bool:
    """Whether a job runs on the cluster, is being recovered, or waits in its queue."""
    return backend.has_work(clients, project, cluster)


def gpus_busy(clients: Clients, project: str, cluster: str) -> bool:
    """Whether any node's GPUs were at or over the metrics' idle floor in their newest point
    (no point at all, as on a node without the Ops Agent, says nothing: not busy)."""
    from gcpgpu.metrics.query import Window, fetch
    from gcpgpu.metrics.sources import metrics_for
    from gcpgpu.metrics.target import resolve
    from gcpgpu.metrics.view import IDLE_GPU_PCT

    target = resolve(clients, project, "cluster", cluster)
    gpu = [m for m in metrics_for("cluster") if m.key == "gpu_util_pct"]
    now = clock.now()
    got = fetch(clients, target, gpu, Window(now - GPU_WINDOW_S, now, 60.0))
    for points in got.data.get("gpu_util_pct", {}).values():
        if points and max(points)[1] >= IDLE_GPU_PCT:  # (time, value): the newest point
            return True
    return False


def tell_autostopped(cluster: str, setting: dict, idle: autostop.IdleClock, nodes: list[Node],
                     say: Callable[[str], None]) -> notify.Notifier:
    """Queue AUTOSTOPPED for the setting's webhooks (none: nothing sent) on the job messages' sender:
    it returns at once and delivers, retrying, from its own thread; the caller closes it, waiting a
    bounded time, before its own node goes. The log names how many webhooks, never their URLs."""
    down = bool(setting.get("down"))
    urls = [str(u) for u in setting.get("notify") or []]
    told = notify.Notifier(urls, cluster=cluster)
    if urls:
        say(f"telling {len(urls)} webhook(s): AUTOSTOPPED")
        told.send("AUTOSTOPPED", action="delete" if down else "stop", idle_since=idle.idle_since(),
                  idle_s=int(setting["idle_s"]),
                  nodes=sorted(n.name for n in nodes if down or n.status == "RUNNING"))
    return told


def tick(clients: Clients, project: str, cluster: str, node: str, idle: autostop.IdleClock, leader: Lease,
         say: Callable[[str], None]) -> str | None:
    """One autostop judgement by the leader: 'gone' once it deleted the cluster (itself included),
    'stopped' once it stopped it, else None."""
    nodes = observe_nodes(clients, project, cluster)
    setting = autostop.of(nodes)
    if not setting or not any(n.status == "RUNNING" for n in nodes):
        idle.reset()
        return None
    busy = job_running(clients, project, cluster) or gpus_busy(clients, project, cluster)
    seconds = idle.idle_for(not busy)
    if seconds < int(setting["idle_s"]):
        return None
    what = "deleting" if setting.get("down") else "stopping"
    say(f"cluster {cluster} idle for {format_duration(int(seconds))} (autostop "
        f"{autostop.shown(setting)}): {what} it")
    s = Session(clients, project, Said(say))
    try:
        with s.holding(cluster, "autostop", wait_for_lease=False) as lease:
            if job_running(clients, project, cluster):  # a job came while this follower took the lease
                idle.reset()
                return None

            told = tell_autostopped(cluster, setting, idle, nodes, say)
            # As `cluster down`: what the cluster and its jobs cost is kept (costs/ledger.py) before their records go.
            spent = ledger.snapshot_or_none(clients, project, cluster, say) if setting.get("down") else None

            def let_go() -> None:  # the judge's own node goes last, and the leases may not outlive it
                told.close(NOTIFY_WAIT_S)  # AUTOSTOPPED goes out before the judge's node (and this process) does
                lease.release()
                if setting.get("down"):  # as `cluster down`: the lead, any recovery and the job records go too
                    ledger.keep_if_gone(clients, project, cluster, spent, "autostop", own=node)
                    follower.forget(clients, project, cluster)
                else:
                    leader.release()

            if setting.get("down"):
                from gcpgpu.metrics import dashboard

                try:
                    dashboard.delete(clients, project, cluster)
                except Exception as e:  # as `cluster down`: a dashboard never blocks the teardown
                    say(f"could not delete the dashboards of cluster {cluster}: {e}")
                autostop.down(s, cluster, node, say, let_go)
                return "gone"
            autostop.stop(s, cluster, node, let_go)
            return "stopped"
    except LeaseHeld as e:  # a `cluster up` or `down` is at work: judge again next round
        say(str(e))
        return None


def capped(clients: Clients, project: str, cluster: str, node: str, leader: Lease,
           say: Callable[[str], None]) -> str | None:
    """The cluster's spend cap (cluster/spend.py), judged by the leader while no job runs (the job's own
    follower stops a running job first: spendcap.py): SPEND_WARNING at 80 %; at the cap the cluster is
    stopped, as autostop stops it, once SPEND_CAPPED is told and the reason marked. 'stopped', else None."""
    from gcpgpu.jobs.cluster import spendcap

    level, usd, cap, nodes = spendcap.cluster_level(clients, project, cluster, say)
    if level != "stop" or cap is None or usd is None or job_running(clients, project, cluster):
        return None
    limit = float(cap["usd"])
    say(f"cluster {cluster} has cost ${usd:,.2f} of its --max-spend ${limit:,.2f}: stopping it")
    s = Session(clients, project, Said(say))
    try:
        with s.holding(cluster, "max spend", wait_for_lease=False) as lease:
            spendcap.mark(clients, project, cluster, s.check_lease, since=spendcap.run_since(nodes), stopped=stamp(),
                          spent_usd=usd, max_spend_usd=limit, why=f"cost ${usd:,.2f} of --max-spend ${limit:,.2f}")
            urls = [str(u) for u in cap.get("notify") or []]
            told = notify.Notifier(urls, cluster=cluster)
            if urls:
                say(f"telling {len(urls)} webhook(s): {spendcap.CAPPED}")
                told.send(spendcap.CAPPED, action="stop", spent_usd=usd, max_spend_usd=limit,
                          nodes=sorted(n.name for n in nodes if n.status == "RUNNING"))

            def let_go() -> None:  # as autostop's: the message out, the leases let go, before the judge's node stops
                told.close(NOTIFY_WAIT_S)
                lease.release()
                leader.release()

            autostop.stop(s, cluster, node, let_go)
            return "stopped"
    except LeaseHeld as e:  # a `cluster up` or `down` is at work: judge again next round
        say(str(e))
        return None


def serve(clients: Clients, project: str, cluster: str, node: str, poll_s: float,
          say: Callable[[str], None], node_id: str = "") -> int:
    """Lead when nobody does; follow the cluster's job; judge its autostop. Ends when the cluster is gone,
    or when Compute no longer has this node (instance `node_id`, when known) RUNNING."""
    lead = follower.leadership(clients, project, cluster, f"node {node}")
    try:
        return _serve(clients, project, cluster, node, poll_s, say, lead, node_id)
    finally:  # the node is going (SIGTERM) or the cluster is gone: the lead is another node's at once
        lead.release()


def going(nodes: list[Node], node: str, node_id: str) -> str | None:
    """Why this follower's own VM is going (deleted, replaced under its name, or not RUNNING), else None.
    A VM's services run on for a while after Compute began deleting or stopping it (its shutdown): a
    follower there must not take the lead again, least of all after an autostop's judge let go of every
    lease right before deleting the last node."""
    mine = next((n for n in nodes if n.name == node), None)
    if mine is None or (node_id and mine.id and mine.id != node_id):
        return "gone"
    return None if mine.status == "RUNNING" else mine.status


def _serve(clients: Clients, project: str, cluster: str, node: str, poll_s: float, say: Callable[[str], None],
           lead: Lease, node_id: str = "") -> int:
    done: set[str] = set()  # jobs this follower saw end (or gave up on)
    idle = autostop.IdleClock()
    while True:
        try:
            if lead.lost:  # another follower leads now: contend again, as a newcomer
                lead = follower.leadership(clients, project, cluster, f"node {node}")
            nodes = observe_nodes(clients, project, cluster)
            if not nodes:
                return 0
            if (why := going(nodes, node, node_id)) is not None:
                say(f"node {node} is {why.lower()}: not leading any more")
                return 0
            if follower.lead(lead):
                found = follower.current_job(clients, project, cluster)
                if found is not None and found[1].id not in done:
                    say(f"leading: following job {found[0]}")
                    f = follower.make(clients, project, found[0], found[1], reporter=Said(say), poll_s=poll_s,
                                      on_state=lambda st: say(f"job {st.id}: {st.state} (attempt {st.attempt})"))
                    f.leading = follower.guard(lead)
                    try:
                        final = f.run()
                        say(f"job {found[0]} ended {final.state}")
                    except GaveUp as e:  # written FAILED in the job's record
                        say(str(e))
                    done.add(found[1].id)
                    idle.reset()
                elif capped(clients, project, cluster, node, lead, say) is not None:
                    return 0
                elif tick(clients, project, cluster, node, idle, lead, say) is not None:
                    return 0
        except LeaseLost as e:
            say(str(e))
        except Exception as e:  # a passing error (the API, a race with a user's command): next round
            say(f"{type(e).__name__}: {e}")
        clock.sleep(poll_s)


def main(argv: list[str] | None = None) -> int:
    parser = service.parser("gcpgpu.node.agent", "The follower a gcpgpu cluster's node runs (one of them leads).")
    parser.add_argument("--poll", type=float, default=15.0, help="seconds between looks (default 15)")
    args = service.add_emulator(parser).parse_args(argv)
    clients, say = service.start(args, "follower", KeyboardInterrupt)
    mine = next((n for n in observe_nodes(clients, args.project, args.cluster) if n.name == args.node), None)
    if mine is not None:  # this VM (the one RUNNING now under this name): the leases taken here name it
        leases.on_node(mine.name, mine.zone, mine.id)
    try:
        return serve(clients, args.project, args.cluster, args.node, args.poll, say,
                     mine.id if mine is not None else "")
    except KeyboardInterrupt:
        say("the node is going: handed the lead over")
        return 0


if __name__ == "__main__":
    sys.exit(main())
