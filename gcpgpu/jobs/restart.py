"""The follower's guard over a cluster job's own failures: retries, stalls and webhooks.

recover.Follower follows the job and recovers it from lost nodes; this guard, built from the
settings stored in the job's record (jobs/policy.py), decides the rest:

    FAILED on nodes that are all still there -> retryable (--max-restarts-on-errors N, and the exit
        code among --retry-on-exit-codes when given) and retries left: RETRYING, run again from the
        last checkpoint (Follower.restart); else FAILED as it is
    RUNNING with no progress for --stall-timeout -> STALLED: capture stacks, stop the job, name the
        suspect node; a retry left: restart (cause "stalled"); else the job ends FAILED, cause "stalled"
    every change of state -> one message to each --notify URL (jobs/notify.py)

Retries and recoveries are counted apart: each retry is a history entry of kind "retry".
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable
from typing import Any

from gcpgpu.errors import CloudError
from gcpgpu.gcp.operations import batch

from . import cluster as cluster_jobs
from . import notify, policy, stall
from .state import FAILED, RUNNING, JobState, is_final

STALLED = "stalled"


def restarts_used(history: list[dict]) -> int:
    return sum(1 for h in history if h.get("kind") == "retry")


class Guard:
    def __init__(self, follower: Any) -> None:
        self.f = follower
        record = cluster_jobs.record_of(follower.clients, follower.project, follower.jid)
        self.policy: dict = record.get("policy") or {}
        self.max = int(self.policy.get("max_restarts_on_errors") or 0)
        self.notifier = notify.Notifier(self.policy.get("notify") or [], job=str(follower.jid),
                                        name=record.get("name"), cluster=follower.jid.cluster)
        timeout = self.policy.get("stall_timeout")
        self.watch = stall.Watch(follower.clients, follower.project, follower.jid, float(timeout),
                                 bool(record.get("bundled_trainer"))) if timeout else None
        self.attempt: int | None = None
        self.verdict: dict | None = None

    # -- webhooks ------------------------------------------------------------------------------
    def event(self, name: str, **details: Any) -> None:
        self.notifier.send(name, **details)

    def changed(self, state: JobState) -> None:
        if self.watch is not None and state.attempt != self.attempt:
            self.watch.reset()  # a new attempt: its own clock, its own steps
        self.attempt = state.attempt
        if state.state == RUNNING:
            self.event(RUNNING, attempt=state.attempt)

    def final(self, state: JobState, redone: Callable[[list[dict]], list[dict]] | None = None) -> JobState:
        """The job's end as the follower returns it; tells the webhooks (FAILED with its cause)."""
        if is_final(state.state) and self.notifier.urls:
            history = state.history
            steps = None
            if history and redone is not None:  # only now does the log say where each attempt resumed
                with contextlib.suppress(CloudError):
                    counted = [h["steps_redone"] for h in redone(history) if h["steps_redone"] is not None]
                    steps = sum(counted) if counted else None
            self.event(state.state, attempt=state.attempt, cause=state.cause or state.error,
                       recoveries=state.recoveries, restarts=restarts_used(history), steps_redone=steps)
        return state

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
        self.event("RETRYING", node=row["node"], cause=cause, attempt=state.attempt + 1)
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
        self.event("STALLED", node=suspect, cause=f"no progress for {timeout}s", attempt=state.attempt)
        captured = stall.capture(self.f.clients, self.f.project, self.f.jid)
        for node, what in sorted(captured.items()):
            self.f.report.step("capture", f"{node}: {what}")
        used = restarts_used(state.history)
        if used < self.max:
            self.f.report.step("retry", f"Retry {used + 1}/{self.max} of job {self.f.jid}: stalled on {suspect}")
            self.event("RETRYING", node=suspect, cause=STALLED, attempt=state.attempt + 1)
            self.f.restart(state, STALLED, suspect,
                           {"capture": "; ".join(f"{n}: {w}" for n, w in sorted(captured.items()))})
            return "retried"
        self.f._stop_survivors()
        mark(self.f, {"state": FAILED, "cause": STALLED, "node": suspect, "capture": captured,
                      "error": "stalled" + (f" again after {used} retr{'y' if used == 1 else 'ies'}" if used else "")
                               + f": no progress for {timeout}s; suspect node {suspect}"})
        return "failed"


def mark(follower: Any, verdict: dict) -> None:
    """Keep the follower's verdict on the job (FAILED, cause stalled) in its record on every node, so
    `job status` from anywhere says it, not the CANCELLED its nodes report after being stopped."""
    clients, project, jid = follower.clients, follower.project, follower.jid
    record = cluster_jobs.record_of(clients, project, jid)
    record["verdict"] = {**verdict, "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}

    def put(pair: tuple[Any, dict]) -> Any:
        node, _job = pair
        return cluster_jobs._set_metadata(clients, project, node,
                                          {**node.metadata, "gcpgpu-job": json.dumps(record, sort_keys=True)},
                                          cluster_jobs.unfenced)

    batch(clients, project, put, cluster_jobs._job_nodes(clients, project, jid))
