"""Following a cluster job and recovering it when a node is lost (`job submit --cluster NAME --recover N`).

The loop, as SkyPilot's managed jobs run it on their controller (here the submitting process follows):

    watch the job's state (guest attributes) and its nodes' status (one aggregatedList per poll)
    -> SUCCEEDED or CANCELLED: done; FAILED with every node RUNNING: the job's own failure, not recovered
    -> a node not RUNNING (preempted, host error, deleted):
       1. why: the zone's system operations (compute.instances.preempted / hostError) for that node
       2. stop the job on the nodes that are left (their trainers save a checkpoint on SIGTERM)
       3. bring the cluster back to its size: delete the lost nodes, then the same `up` as
          `gcpgpu cluster up` (same zone first; on a stockout the whole cluster moves to the spec's
          next zones, each tried with `up`'s own failover and clean-up)
       4. put the same job back on the nodes as attempt N+1, with the trainer's --resume: it starts
          from the newest complete checkpoint in its --output-dir (or --ckpt-dir)
    -> after N recoveries: stop with one line naming the lost node and the cause.

A recovery (steps 2-4) is one attempt that holds the cluster's lease, as `cluster up` does: a
`cluster up` or `down` run meanwhile waits for it, and a recovery that stalled past its lease while
another run took the cluster over stops at its next step without touching anything.

Each recovery is recorded in the job's record on its nodes (history: attempt, when, node, zone,
cause, last step logged), so `job status` from any machine tells the story; steps redone are read
from the job's log (the trainer says where it resumed).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any, NoReturn

from gcpgpu.cluster.apply import NoCapacity, up
from gcpgpu.cluster.kinds import NODES
from gcpgpu.cluster.lease import LeaseLost, this_node
from gcpgpu.cluster.names import node_name
from gcpgpu.cluster.observe import observe_nodes, ranked_nodes
from gcpgpu.cluster.session import Reporter, Session
from gcpgpu.errors import CloudError
from gcpgpu.gcp import clock
from gcpgpu.gcp.clients import Clients
from gcpgpu.jobs import ids
from gcpgpu.jobs import logs as job_logs
from gcpgpu.jobs.state import ACTIVE, CANCELLED, FAILED, RECOVERING, RUNNING, SUCCEEDED, JobState, is_final
from gcpgpu.jobs.steplines import trainer_values
from gcpgpu.trainer.argv import log_every

from . import ahead, journal, nodes, store
from .deliver import deliver, resume_note, resumed
from .loss import RUN_LIMIT, loss_causes
from .record import HistoryEntry, JobRecord, stamp

SPOT_DEFAULT = 3  # recoveries for a cluster of Spot or flex-start nodes, unless --recover says otherwise
STOP_TIMEOUT_S = 300.0  # survivors' agents stop their containers with a 60 s grace


class GaveUp(CloudError):
    """The follower gives the job up (a loss past --recover, the cluster's own cap, a cluster that did
    not come back): the job's record says FAILED with this line."""


def default_recover(clients: Clients, project: str, cluster: str) -> int:
    """3 for a cluster of Spot or flex-start nodes (losing them is routine), else 0."""
    return SPOT_DEFAULT if any(n.provisioning in ("SPOT", "FLEX_START")
                               for n in observe_nodes(clients, project, cluster)) else 0


class Follower:
    """Follows one cluster job to its end, recovering it from lost nodes up to `recover` times."""

    def __init__(self, clients: Clients, project: str, jid: ids.JobId, recover: int, reporter: Reporter | None = None,
                 poll_s: float = 15.0, on_state: Callable[[JobState], None] | None = None) -> None:
        self.clients = clients
        self.project = project
        self.jid = jid
        self.recover = recover
        self.report = reporter or Reporter()
        self.poll_s = poll_s
        self.on_state = on_state or (lambda _s: None)
        self.session: Session | None = None  # the current recovery's attempt (it holds the cluster's lease)
        # Called once per poll: raises to stop following (a cloud-side follower that lost its leadership).
        self.leading: Callable[[], None] = lambda: None
        self.guard: Any = None  # restart.Guard while run() runs

    def run(self) -> JobState:
        """The job's end, as its record says it (this follower writes it); GaveUp (a CloudError, the job
        written FAILED) when it lost a node once more than it may recover. A job whose record already
        holds its end is not followed again."""
        from .restart import Guard

        self.guard = Guard(self)  # retries, stall detection, webhooks (the job's stored settings)
        try:
            ended = self.guard.ended()
            if ended is not None:
                return ended
            return self.guard.final(self._run(), lambda h: steps_redone(self.clients, self.project, self.jid, h))
        except GaveUp as e:
            self.guard.tell(FAILED, self.guard.attempt or 0, error=str(e), webhook={"cause": str(e)})
            raise
        finally:  # queued webhooks get a bounded moment to go out; none after Ctrl-C (or the node going)
            self.guard.close(0 if sys.exc_info()[0] is KeyboardInterrupt else 30)

    def _run(self) -> JobState:
        while True:
            self.leading()
            pending = journal.read(self.clients, self.project, self.jid.cluster or "")
            if pending is not None and pending.id == self.jid.job:
                self.resume(pending)  # a follower died mid-recovery: finish it from what the cloud shows
                continue
            state = nodes.status(self.clients, self.project, self.jid)
            self.guard.changed(state)
            if state.state in (SUCCEEDED, CANCELLED):
                return state
            lost = [r for r in state.per_node if r["node_status"] != "RUNNING"] + self._gone(state)
            if (mine := this_node()) in {r["node"] for r in lost}:
                # This follower's own VM is going (a preemption's notice): a follower on a node that stays
                # recovers the loss, and tells it; this one would be stopped half-way, its webhooks unsent.
                raise LeaseLost(f"node {mine} is going: a follower on another node takes the job over")
            if state.state == FAILED and not lost:
                # The job's own failure: run again only what --max-restarts-on-errors says is worth it.
                if self.guard.retry_failure(state):
                    continue
                if any(r["state"] in ACTIVE for r in state.per_node):
                    # The ranks left run on (or wait in a collective for the dead one) until stopped: now.
                    self._stop_survivors()
                    state = nodes.status(self.clients, self.project, self.jid)
                return state
            if lost:
                used = state.recoveries
                causes = self._causes(lost)
                what = ", ".join(f"{r['node']} ({causes[r['node']]})" for r in lost)
                if any(causes[r["node"]] == RUN_LIMIT for r in lost):
                    # The cluster's own --max-run-duration: what the user asked for, not a loss to undo
                    # (a recovery would give the nodes a fresh full run).
                    self._stop_survivors()
                    raise GaveUp(f"job {self.jid} stopped: node {what}; not recovered: the cap is the "
                                 f"cluster's own; its checkpoints stay in {state.output_dir or 'its --ckpt-dir'}")
                if used >= self.recover:
                    self._stop_survivors()
                    limit = "recovery is off (--recover 0)" if self.recover == 0 else \
                        f"after {used} recover{'y' if used == 1 else 'ies'} (--recover {self.recover})"
                    raise GaveUp(f"job {self.jid} lost node {what}; {limit}: giving up; its checkpoints stay in "
                                 f"{state.output_dir or 'its --ckpt-dir'}")
                self.recover_once(state, lost, causes)
                continue
            if (capped := self.guard.cap.check(state)) is not None:  # --max-spend reached: stopped, CANCELLED
                return capped
            if state.state == RUNNING and (soon := ahead.due(state.per_node)) is not None:
                return self._stop_ahead(state, soon)
            if state.state == RUNNING and (acted := self.guard.check_stall(state)):
                if acted == "failed":
                    return nodes.status(self.clients, self.project, self.jid)
                continue
            clock.sleep(self.poll_s)

    def _stop_ahead(self, state: JobState, soon: ahead.Ahead) -> JobState:
        """A node's known end is near (ahead.py): warn, and stop the job so its trainers save a
        checkpoint on SIGTERM while every node is still up; the job ends CANCELLED with that cause."""
        where = state.output_dir or "its --ckpt-dir"
        self.report.step("ahead", f"Job {self.jid}: {soon.line()}: stopping the job now so its trainers "
                                  f"checkpoint (SIGTERM) to {where}")
        self._stop_survivors()
        self.guard.tell(CANCELLED, state.attempt, cause="stopped ahead", node=soon.node,
                        error=f"stopped ahead: {soon.line()}; its checkpoint is in {where}: submit it again "
                              "with --resume once the nodes are back (or on other capacity)")
        return nodes.status(self.clients, self.project, self.jid)

    def _gone(self, state: JobState) -> list[dict]:
        """Ranks of the job whose node no longer exists (a VM whose termination action is DELETE)."""
        present = {r["rank"] for r in state.per_node}
        zone = state.per_node[0]["zone"] if state.per_node else ""
        return [{"node": node_name(self.jid.cluster or "", rank), "rank": rank, "node_status": "DELETED",
                 "zone": zone, "state": FAILED} for rank in range(state.nnodes) if rank not in present]

    # -- one recovery ---------------------------------------------------------------------------
    def recover_once(self, state: JobState, lost: list[dict], causes: dict[str, str]) -> None:
        """One recovery, as one attempt holding the cluster's lease: every mutating step (stopping the
        survivors, deleting the lost nodes, `up`, re-delivering the job) first proves it still holds it.
        The job is RECOVERING in its record from the moment the loss is seen."""
        if self.guard is not None:  # None when recover_once runs outside run()
            names = [r["node"] for r in lost]
            self.guard.tell(RECOVERING, state.attempt + 1, node=", ".join(names),
                            cause=", ".join(sorted({causes[n] for n in names})))
        self.session = Session(self.clients, self.project, self.report)
        with self.session.holding(self.jid.cluster or "", "recover", wait_for_lease=True):
            # Another follower may have recovered this loss while this one waited for the lease.
            record = nodes.record_of(self.clients, self.project, self.jid)
            if record.attempt != state.attempt or \
                    journal.read(self.clients, self.project, self.jid.cluster or "") is not None:
                return
            self._recover(self.session, record, state, lost, causes)

    def resume(self, pending: JobRecord) -> None:
        """Finish a recovery another follower wrote down and did not finish (journal.py)."""
        self.session = Session(self.clients, self.project, self.report)
        with self.session.holding(self.jid.cluster or "", "recover", wait_for_lease=True):
            found = journal.read(self.clients, self.project, self.jid.cluster or "")
            if found is None or found.id != self.jid.job:
                return  # finished by another follower meanwhile
            self.report.step("resume", f"Finishing recovery {len(found.history or [])} of job {self.jid} "
                                       f"(attempt {found.attempt}), which its last follower left unfinished")
            self._complete(self.session, found)

    def _recover(self, s: Session, record: JobRecord, state: JobState, lost: list[dict], causes: dict[str, str]) -> None:
        names = [r["node"] for r in lost]
        attempt = state.attempt + 1
        self.report.step("recover", f"Recovery {state.recoveries + 1}/{self.recover} of job {self.jid}: lost "
                                    + ", ".join(f"{n} ({causes[n]})" for n in names))
        cause = ", ".join(sorted({causes[n] for n in names}))
        self._stop_survivors(s)
        last_step = self.last_step()
        if self.guard is not None:  # the webhook's RECOVERING says where the job stopped (told once, by who wrote it)
            self.guard.told(RECOVERING, node=", ".join(names), cause=cause, last_step=last_step, attempt=attempt)
        zone = lost[0]["zone"]
        found = {n.name: n.id for n in observe_nodes(self.clients, self.project, self.jid.cluster or "")}
        # The lost VMs by id: a follower that finishes this recovery deletes those, never their replacements.
        self._resubmit(s, record, {"lost": names, "zone": zone, "cause": cause, "last_step": last_step,
                                   "pull_s": _pulled(state)},
                       {"zone": zone, "lost": names, "lost_ids": [found[n] for n in names if n in found]})

    def restart(self, state: JobState, cause: str, node: str | None, extra: dict | None = None) -> None:
        """Run the job again on the same nodes from its last checkpoint (a retry after its own failure or
        a stall), as one attempt holding the cluster's lease, as a recovery does (and written down the
        same way, so a follower that dies half-way leaves it for the next one to finish)."""
        self.session = Session(self.clients, self.project, self.report)
        with self.session.holding(self.jid.cluster or "", "retry", wait_for_lease=True):
            s = self.session
            record = nodes.record_of(self.clients, self.project, self.jid)
            self._stop_survivors(s)
            held = ranked_nodes(self.clients, self.project, self.jid.cluster or "")[: int(record.nnodes or 0)]
            zone = held[0].zone if held else ""
            self._resubmit(s, record, {"kind": "retry", "lost": [], "node": node, "zone": zone, "cause": cause,
                                       "last_step": self.last_step(), "pull_s": _pulled(state), **(extra or {})},
                           {"zone": zone, "lost": [], "lost_ids": []})

    def _resubmit(self, s: Session, record: JobRecord, entry: dict, how: dict) -> None:
        """Write down the job's next attempt (resuming from its last checkpoint; `entry`, why, in its
        history; `how`, the VMs to replace) in the journal, then bring the cluster to size and deliver it."""
        attempt = record.attempt + 1
        history: list[HistoryEntry] = [*(record.history or []), {  # type: ignore[list-item]
            "attempt": attempt, "at": stamp(), **entry, "log_every": log_every(record.args or [])}]
        pending = resumed(record, attempt).but(  # from its last checkpoint
            history=history, recover=self.recover, recovering={**how, "spec": self._cluster_spec_raw()})
        journal.put(self.clients, self.project, self.jid.cluster or "", pending, s.check_lease)
        store.amend(self.clients, self.project, self.jid, attempt, history=history)
        self._complete(s, pending)

    def _complete(self, s: Session, pending: JobRecord) -> None:
        """From the written-down recovery on: bring the cluster back to size, put the next attempt on it,
        and strike the recovery from the journal. Each step is safe to run again after a follower died."""
        how = dict(pending.recovering or {})
        record = pending.but(recovering=None)
        want = int(record.nnodes or 0)
        held = ranked_nodes(self.clients, self.project, self.jid.cluster or "")[:want]
        whole = len(held) == want and all(n.status == "RUNNING" for n in held) \
            and not {n.id for n in held} & set(how.get("lost_ids") or [])
        if not whole:
            try:
                self._rebuild(s, self._spec_now(how.get("spec")), how["lost"], how["zone"], how.get("lost_ids"))
            except NoCapacity as e:  # nowhere to bring the nodes back: the job ends FAILED, not RECOVERING for ever
                self._give_up(s, f"job {self.jid} lost node {', '.join(how['lost'])} and no zone of cluster "
                                 f"{self.jid.cluster} has capacity to bring it back ({e}); its checkpoints stay "
                                 f"in {record.output_dir or 'its --ckpt-dir'}: submit it again with --resume "
                                 "once there is capacity")
            held = ranked_nodes(self.clients, self.project, self.jid.cluster or "")[:want]
        if len(held) < want or any(n.status != "RUNNING" for n in held):
            self._give_up(s, f"cluster {self.jid.cluster} did not come back to {want} RUNNING node(s); "
                             f"see 'gcpgpu cluster status {self.jid.cluster}'")
        self.report.step("resubmit", f"Resubmitting {self.jid} as attempt {record.attempt} on {len(held)} node(s)"
                                     + resume_note(record))
        put = deliver(self.clients, self.project, record, held, s.check_lease)
        if record.history:  # when the attempt was put on its nodes: where goodput's recovery ends. Stamped
            # before the nodes were told (the nodes may start and report RUNNING before deliver returns).
            history = [*record.history[:-1], {**record.history[-1], "delivered": put.submitted or stamp()}]
            store.amend(self.clients, self.project, self.jid, record.attempt, s.check_lease, history=history)
        journal.put(self.clients, self.project, self.jid.cluster or "", None, s.check_lease)

    def _give_up(self, s: Session, why: str) -> NoReturn:
        """End a recovery that cannot finish: strike it from the journal (no later follower takes it up
        again) and raise GaveUp, which run() writes as the job's end (FAILED, with `why`)."""
        journal.put(self.clients, self.project, self.jid.cluster or "", None, s.check_lease)
        raise GaveUp(why)

    def _causes(self, lost: list[dict]) -> dict[str, str]:
        return loss_causes(self.clients, self.project, self.jid.cluster or "", lost)

    def _stop_survivors(self, s: Session | None = None) -> None:
        """Cancel the job on the nodes still RUNNING and wait until their agents report it stopped
        (fenced by the recovery's lease when `s` is given)."""
        try:
            nodes.cancel(self.clients, self.project, self.jid, only_running=True,
                         fence=s.check_lease if s is not None else nodes.unfenced)
        except CloudError:
            return  # nothing of the job is left on the cluster
        deadline = clock.monotonic() + STOP_TIMEOUT_S
        with self.report.waiting("stopping the job on the nodes that are left") as update:
            while clock.monotonic() < deadline:
                rows = nodes.status(self.clients, self.project, self.jid).per_node
                busy = [r["node"] for r in rows if r["node_status"] == "RUNNING" and not is_final(r["state"])]
                if not busy:
                    return
                update(f"waiting for {', '.join(busy)} to stop the job")
                clock.sleep(min(self.poll_s, 2.0))
        raise GaveUp(f"job {self.jid}: node(s) did not stop it within {STOP_TIMEOUT_S:.0f}s; cancel it with "
                     f"'gcpgpu job cancel {self.jid}'")

    def _cluster_spec_raw(self) -> str:
        """The spec the cluster was brought up with, as its nodes carry it (metadata gcpgpu-spec)."""
        for node in observe_nodes(self.clients, self.project, self.jid.cluster or ""):
            raw = node.metadata.get("gcpgpu-spec")
            if raw:
                return raw
        raise GaveUp(f"cluster {self.jid.cluster}'s nodes do not carry their spec (made by an older gcpgpu): "
                     f"bring it back with 'gcpgpu cluster up {self.jid.cluster} ...' and resubmit with --resume")

    def _spec_now(self, written: str | None) -> Any:
        """The spec to bring the cluster back to: what its nodes carry now (an autostop set since the
        recovery began is in it, not in what the recovery wrote down), else what it wrote down (every
        node was gone)."""
        try:
            return self._cluster_spec()
        except CloudError:
            if not written:
                raise
            return self._cluster_spec(written)

    def _cluster_spec(self, raw: str | None = None) -> Any:
        """The cluster's spec: `raw` (what a recovery wrote down) or what its nodes carry."""
        from gcpgpu.cluster.spec import ClusterSpec

        known = set(ClusterSpec.__dataclass_fields__)  # a newer or older gcpgpu's extra keys are left out
        return ClusterSpec(**{k: v for k, v in json.loads(raw or self._cluster_spec_raw()).items() if k in known})

    def _rebuild(self, s: Session, spec: Any, lost: list[str], zone: str, lost_ids: list[str] | None = None) -> None:
        """Delete the lost nodes and bring the cluster back to size: same zone first, then the spec's next zones."""
        from gcpgpu.cluster.plan import plan

        gone = [n for n in observe_nodes(self.clients, self.project, spec.name)
                if n.name in lost and (lost_ids is None or n.id in lost_ids)]
        if gone:
            self.report.step("delete", f"Deleting lost node(s) {', '.join(n.name for n in gone)}")
            s.delete(NODES, [(n.zone, n.name) for n in gone])
        zones = list(spec.zones)
        later = zones[zones.index(zone) + 1:] if zone in zones else []
        try:
            up(s, plan(spec, self.project))
            return
        except NoCapacity:
            if not later:
                raise
        # The zone has no capacity left for the lost nodes: the whole cluster moves (compact placement
        # keeps a cluster in one zone); its checkpoints are in Cloud Storage, not on the nodes.
        rest = observe_nodes(self.clients, self.project, spec.name)
        self.report.step("move", f"{zone} has no capacity: moving cluster {spec.name} to {', '.join(later)}")
        s.delete(NODES, [(n.zone, n.name) for n in rest])
        spec.zones = later
        up(s, plan(spec, self.project))

    # -- what the log says -------------------------------------------------------------------------
    def last_step(self) -> int | None:
        """The last step the trainer logged (rank 0's step lines), or None if it logged none."""
        steps = [got[0] for text in self._messages() if (got := trainer_values(text)) is not None]
        return max(steps) if steps else None

    def _messages(self) -> list[str]:
        flt = nodes.log_filter(self.project, self.jid)
        return [job_logs.message(e) for e in job_logs.entries(self.clients, self.project, flt)]


def _pulled(state: JobState) -> float:
    """Node-seconds the attempt that ends now spent pulling its image (goodput's image_pull keeps it)."""
    return round(sum(float(r.get("pull_s") or 0) for r in state.per_node), 3)


def steps_redone(clients: Clients, project: str, jid: ids.JobId, history: list[dict]) -> list[dict]:
    """The history with `resumed_at` and `steps_redone` filled in from the job's log, where it says so:
    goodput.redone_of, the count `job status`'s retry table and goodput's redone part read too.

    Attempt k's trainer logs where it resumed ("resumed from ... at step S", or a fresh start at 0);
    the steps redone are at least those the lost attempt had logged past S, and at most those plus
    the steps it may have run after its last step line (it logs every `--log-every` steps):
    `steps_redone` is the first, `steps_redone_max` the second.
    """
    if not history:
        return history
    from gcpgpu.jobs import goodput

    redos = goodput.redone_of(history, goodput.entries(clients, project, nodes.log_filter(project, jid)))
    return [{**entry, "resumed_at": r.resumed_at, "steps_redone": r.steps, "steps_redone_max": r.steps_max}
            for entry, r in zip(history, redos, strict=True)]
