"""The follower's guard over a cluster job's own failures: retries, stalls, webhooks and its spend cap (spendcap.py).

recover.Follower follows the job and recovers it from lost nodes; this guard, built from the
settings stored in the job's record (jobs/policy.py), decides the rest:

    FAILED on nodes that are all still there -> retryable (--max-restarts-on-errors N, and the exit
        code among --retry-on-exit-codes when given) and retries left: RETRYING, run again from the
        last checkpoint (Follower.restart); else FAILED as it is
    RUNNING with no progress for --stall-timeout -> STALLED: capture stacks, stop the job, name the
        suspect node; a retry left: restart (cause "stalled"); else the job ends FAILED, cause "stalled"
    every change of state -> written in the job's record (store.py) and, by the follower that
        wrote it, one message to each --notify URL (jobs/notify.py): a follower that takes over from
        another tells nothing the record already says

Retries and recoveries are counted apart: each retry is a history entry of kind "retry".
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from gcpgpu.errors import CloudError
from gcpgpu.gcp import clock
from gcpgpu.jobs import goodput, notify, policy
from gcpgpu.jobs.state import FAILED, RETRYING, RUNNING, STALLED, JobState, is_final

from . import nodes, spendcap, stall, store

STALLED_CAUSE = "stalled"


def restarts_used(history: list[dict]) -> int:
    return sum(1 for h in history if h.get("kind") == "retry")


class Guard:
    def __init__(self, follower: Any) -> None:
        self.f = follower
        record = nodes.record_of(follower.clients, follower.project, follower.jid)
        self.base = record  # the job's record on its nodes: a job record is made from it where there is none
        self.policy: dict = dict(record.policy or {})
        self.max = int(self.policy.get("max_restarts_on_errors") or 0)
        self.notifier = notify.Notifier(self.policy.get("notify") or [], job=str(follower.jid),
                                        name=record.name, cluster=follower.jid.cluster)
        timeout = self.policy.get("stall_timeout")
        self.watch = stall.Watch(follower.clients, follower.project, follower.jid, float(timeout),
                                 bool(record.bundled_trainer)) if timeout else None
        self.cap = spendcap.Cap(self, self.policy)  # --max-spend
        self.attempt: int | None = None
        self.last: JobState | None = None  # what the nodes said last
        self._deferred: str | None = None  # a state this follower wrote whose webhook waits for its details

    # -- the job's record, and the webhooks ------------------------------------------------------
    def tell(self, state: str, attempt: int, webhook: dict | None = None, defer: bool = False, **fields: Any) -> bool:
        """Write the job's next state in its record; when this follower is the one that wrote it, show it
        (on_state) and tell the webhooks (`webhook`: the message's details besides the record's node and
        cause; `defer`: later, with told()). False when the record already said it."""
        f = self.f
        wrote = store.advance(f.clients, f.project, f.jid, state, attempt, base=self.base, **fields)
        if not wrote:
            return False
        shown = self.last or JobState(id=str(f.jid), target="cluster", cluster=f.jid.cluster)
        f.on_state(replace(shown, state=state, attempt=attempt, node=fields.get("node"), cause=fields.get("cause")))
        if defer:
            self._deferred = state
        else:
            details = {k: fields[k] for k in ("node", "cause") if fields.get(k) is not None}
            self.notifier.send(state, attempt=attempt, **{**details, **(webhook or {})})
        return True

    def told(self, state: str, **details: Any) -> None:
        """Send the webhook of `state` that tell(defer=True) kept back, now that `details` are known."""
        if self._deferred == state:
            self._deferred = None
            self.notifier.send(state, **details)

    def ended(self) -> JobState | None:
        """The job's end when its record already holds it (another follower wrote it), else None."""
        from .view import job_status

        seen = store.read(self.f.clients, self.f.project, self.f.jid.cluster or "").of(self.f.jid.job)
        if seen is None or not seen.final:
            return None
        return job_status(self.f.clients, self.f.project, self.f.jid)

    def changed(self, state: JobState) -> None:
        """What the nodes say now: RUNNING is written (and told) from their own `started`, so an attempt
        that ended between two looks was RUNNING all the same."""
        self.last = state
        if self.watch is not None and state.attempt != self.attempt:
            self.watch.reset()  # a new attempt: its own clock, its own steps
        self.attempt = state.attempt
        started = [r["started"] for r in state.per_node if r.get("started")]
        if state.state == RUNNING or started:
            self.tell(RUNNING, state.attempt, started=min(started) if started else None, recover=self.f.recover)

    def final(self, state: JobState, redone: Callable[[list[dict]], list[dict]] | None = None) -> JobState:
        """The job's end, written in its record (once: a verdict written before stands) and told to the
        webhooks with its cause; the job as views show it then."""
        from .view import job_status

        self.last = state
        wrote = False
        if is_final(state.state):
            history = state.history
            steps = None
            if history and redone is not None and self.notifier.urls:  # only now does the log say where each resumed
                with contextlib.suppress(CloudError):
                    counted = [h["steps_redone"] for h in redone(history) if h["steps_redone"] is not None]
                    steps = sum(counted) if counted else None
            wrote = self.tell(state.state, state.attempt, error=state.error, cause=state.cause,
                              webhook={"cause": state.cause or state.error, "recoveries": state.recoveries,
                                       "restarts": restarts_used(history), "steps_redone": steps})
        shown = job_status(self.f.clients, self.f.project, self.f.jid)
        if wrote:  # the job's goodput, written once, by the follower that wrote its end
            goodput.publish(self.f.clients, self.f.project, shown, clock.now(),
                            nodes.log_filter(self.f.project, self.f.jid))
        return shown

    def close(self, wait_s: float = 30.0) -> None:
        self.notifier.close(wait_s)

    # -- the job's own failure -----------------------------------------------------------------
    def retry_failure(self, state: JobState) -> bool:
        """Restart the job if its failure is retryable and a retry is left; True when it did."""
        failed = sorted((r for r in state.per_node if r["state"] == FAILED),
                        key=lambda r: (r.get("ended") or "", r["rank"]))
        row = policy.retryable(self.policy, failed)
        used = restarts_used(state.history)
        if row is None or used >= self.max:
            if row is not None:
                self.f.report.step("retry", f"Job {self.f.jid} failed (exit code {row['exit_code']} on "
                                            f"{row['node']}): no retry left ({used}/{self.max} used)")
            return False
        cause = f"exit code {row['exit_code']}"
        self.f.report.step("retry", f"Retry {used + 1}/{self.max} of job {self.f.jid}: {cause} on {row['node']}")
        self.tell(RETRYING, state.attempt + 1, node=row["node"], cause=cause)
        self.f.restart(state, cause, row["node"])
        return True

    # -- stalls ----------------------------------------------------------------------------------
    def check_stall(self, state: JobState) -> str | None:
        """None while the job makes progress; "retried" or "failed" once it has stalled."""
        if self.watch is None:
            return None
        nodes = [r["node"] for r in sorted(state.per_node, key=lambda r: r["rank"])]
        suspect = self.watch.poll(nodes)
        if suspect is None:
            return None
        timeout = int(self.watch.timeout_s)
        self.f.report.step("stall", f"Job {self.f.jid} stalled: no progress for {timeout}s; suspect node {suspect}")
        self.tell(STALLED, state.attempt, node=suspect, cause=f"no progress for {timeout}s")
        captured = stall.capture(self.f.clients, self.f.project, self.f.jid)
        for node, what in sorted(captured.items()):
            self.f.report.step("capture", f"{node}: {what}")
        used = restarts_used(state.history)
        if used < self.max:
            self.f.report.step("retry", f"Retry {used + 1}/{self.max} of job {self.f.jid}: stalled on {suspect}")
            self.tell(RETRYING, state.attempt + 1, node=suspect, cause=STALLED_CAUSE)
            self.f.restart(state, STALLED_CAUSE, suspect,
                           {"capture": "; ".join(f"{n}: {w}" for n, w in sorted(captured.items()))})
            return "retried"
        self.f._stop_survivors()
        self.tell(FAILED, state.attempt, cause=STALLED_CAUSE, node=suspect,
                  error="stalled" + (f" again after {used} retr{'y' if used == 1 else 'ies'}" if used else "")
                        + f": no progress for {timeout}s; suspect node {suspect}")
        return "failed"
