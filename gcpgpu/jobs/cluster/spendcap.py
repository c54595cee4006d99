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
"""

from __future__ import annotations

from typing import Any

from gcpgpu.jobs.state import CANCELLED, JobState

from . import nodes, spent, store
from .record import stamp

WARN_AT = 0.8
CAUSE = "max spend"
WARNING = "SPEND_WARNING"


class Cap:
    """The spend cap of the job a Guard (restart.py) follows; `usd` None: no cap."""

    def __init__(self, guard: Any, policy: dict) -> None:
        self.g = guard
        self.usd = float(policy["max_spend"]) if policy.get("max_spend") else None
        self.warned: bool | None = None  # read from the job's record on the first look
        self.unpriced_told = False

    def check(self, state: JobState) -> JobState | None:
        """None while the job is under its cap; the job as stopped once it reached it."""
        if self.usd is None:
            return None
        f = self.g.f
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
        where = state.output_dir or "its --ckpt-dir"
        f.report.step("spend", f"Job {f.jid} has cost ${usd:,.2f} of its --max-spend ${self.usd:,.2f}: stopping it "
                               f"so its trainers checkpoint (SIGTERM) to {where}")
        f._stop_survivors()
        self.g.tell(CANCELLED, state.attempt, cause=CAUSE,
                    error=f"stopped at its spend cap: ${usd:,.2f} of --max-spend ${self.usd:,.2f}; its checkpoint "
                          f"is in {where}: submit it again with --resume (and a higher cap) to go on",
                    webhook={"spent_usd": usd, "max_spend_usd": self.usd})
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
