"""A job's state as gcpgpu reads it (a Vertex AI custom job or a job on a cluster's nodes), and which
states are final: the one place that says so.

`JobState` is the typed value `job status`, the followers (jobs/cluster/: follower, recover, restart), the
metrics' job span and the node agent read by attribute. `to_dict()` is what `job status --format
json` prints: the keys, in the order, that scripts reading it have always seen; `from_dict()` reads
that back. A cluster job's per-node rows and its history stay plain dicts: they are what the nodes'
agents report and what the job's record on its nodes holds (jobs/cluster/record.py), shown as they are.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

# Vertex AI's JobState names without their JOB_STATE_ prefix. A cluster job's are its record's
# (jobs/cluster/store.py): PENDING, RUNNING, RECOVERING (a node was lost: its follower brings the job back),
# RETRYING (the job failed and runs again from its checkpoint), STALLED (no progress: the follower acts),
# and one of SUCCEEDED, FAILED, CANCELLED once nothing remains to do; UNKNOWN where no agent has reported.
QUEUED = "QUEUED"
PENDING = "PENDING"
RUNNING = "RUNNING"
SUCCEEDED = "SUCCEEDED"
FAILED = "FAILED"
CANCELLING = "CANCELLING"
CANCELLED = "CANCELLED"
EXPIRED = "EXPIRED"
PARTIALLY_SUCCEEDED = "PARTIALLY_SUCCEEDED"
RECOVERING = "RECOVERING"
RETRYING = "RETRYING"
STALLED = "STALLED"
UNKNOWN = "UNKNOWN"

FINAL = frozenset({SUCCEEDED, FAILED, CANCELLED, EXPIRED, PARTIALLY_SUCCEEDED})  # a cluster job ends in the first three
ACTIVE = (PENDING, RUNNING)  # a node's agent still runs the job (or is about to)

# Where a state's `cause` came from decides where `job status --format json` has always shown it.
CAUSE_FOLLOWER = "follower"  # the follower's verdict, kept in the job's record (stalled, stopped ahead)
CAUSE_LOG = "log"  # the first error line of the job's log, read when the state is shown (jobs/detail.py)

_HEAD = ("id", "target", "name", "state", "created", "started", "ended", "error", "nodes", "machine_type", "submitter")
_VERTEX = ("strategy", "pools", "resource", "note")
_CLUSTER = ("cluster", "master", "image", "per_node", "nnodes", "attempt", "recover", "recoveries", "history",
            "restarts", "output_dir", "node", "priority", "position", "scheduler_id", "reason", "output")
_WHEN_SET = ("master", "restarts", "node", "priority", "position", "scheduler_id", "reason", "output")  # a cluster job's keys shown only when they have a value
_SPENT = ("uptime_s", "node_hours", "cost_usd", "uptime", "cost")
_REDONE = ("steps_redone", "steps_redone_max")
_DOLLARS = ("tokens", "usd_per_million_tokens", "goodput_lost_usd")  # shown only when known


def is_final(state: str | None) -> bool:
    """Whether a job in `state` has ended for good: as Vertex AI says, or as a cluster job's record says
    (written only when no recovery or retry remains; a node's own end is not the job's: jobs/cluster/view.py)."""
    return state in FINAL


@dataclass(frozen=True)
class Spent:
    """What a cluster job has run and cost so far (jobs/cluster/spent.py), as `job status` shows it."""

    uptime_s: int | None
    node_hours: float | None
    cost_usd: float | None
    uptime: str
    cost: str
    price_per_hour: float | None = None  # a node's, what goodput's lost node-time is priced at (not in the JSON)


@dataclass(frozen=True)
class JobState:
    id: str = ""
    target: str = ""  # vertex | cluster
    name: str | None = None
    state: str = UNKNOWN
    created: str | None = None  # RFC 3339
    started: str | None = None
    ended: str | None = None
    error: str | None = None
    nodes: int = 0  # Vertex: replicas; cluster: the nodes that hold the job
    machine_type: str | None = None
    submitter: str | None = None  # who submitted it (gcp/identity.py); "unknown" for a job from before
    # A Vertex AI custom job's
    strategy: str | None = None
    pools: list[dict] = field(default_factory=list)  # one row per worker pool
    shells: dict[str, str] = field(default_factory=dict)  # vertex --interactive: replica -> interactive-shell URI
    resource: str | None = None  # projects/P/locations/L/customJobs/ID
    note: str | None = None  # what the emulator did with it
    # A cluster job's
    cluster: str | None = None
    master: str | None = None  # ADDR:PORT of rank 0; None when no node holds the job any more
    image: str | None = None
    per_node: list[dict] = field(default_factory=list)  # the nodes' agents' reports, by rank
    nnodes: int = 0  # the nodes the job runs on when whole
    attempt: int = 0  # 0, then one more per recovery or retry
    recover: int | None = None  # recoveries allowed (submit --recover), when given
    recoveries: int = 0
    history: list[dict] = field(default_factory=list)  # each recovery or retry (the job's record)
    restarts: int | None = None  # retries; None when no node holds the job any more
    output_dir: str | None = None
    node: str | None = None  # RECOVERING, RETRYING, STALLED: the node(s) it is about
    cause: str | None = None  # why it ended, in a word or the program's own line
    cause_from: str | None = None  # CAUSE_FOLLOWER | CAUSE_LOG: where `cause` came from; None without one
    # Its attempts wait in a shared queue (its scheduler's: jobs/cluster/backend.py) from submission or a
    # requeue until their program starts: goodput's `queued`. Not in the JSON.
    waits_in_queue: bool = False
    # A Slurm cluster's job: its partition, place among the waiting, Slurm's id and why it waits (in words)
    priority: str | None = None
    position: int | None = None
    scheduler_id: str | None = None  # the job's id in its scheduler's queue (a Slurm job id)
    reason: str | None = None
    output: dict | None = None  # a job sbatch'ed by hand: its output file {"path", "node"} (not in Cloud Logging)
    # Added for `job status` (jobs/detail.py)
    spent: Spent | None = None
    steps_redone: int | None = None  # steps the recoveries ran again (at least, and at most)
    steps_redone_max: int | None = None
    goodput: dict | None = None  # {percent, productive_s, node_s, lost_s: {...}} (jobs/goodput.py)
    tokens: float | None = None  # tokens its steps trained, where its step lines say (steplines.tokens_trained)
    usd_per_million_tokens: float | None = None  # its cost so far per million of them
    goodput_lost_usd: dict | None = None  # each lost part of its goodput in dollars, at its node price

    @property
    def final(self) -> bool:
        return is_final(self.state)

    def to_dict(self) -> dict[str, Any]:
        """The state as `job status --format json` prints it: the keys its target has, in their order."""
        out = {key: getattr(self, key) for key in _HEAD}
        out["submitter"] = self.submitter or "unknown"  # a job from before gcpgpu kept who submitted it
        if self.target == "vertex":
            out.update((key, getattr(self, key)) for key in _VERTEX)
        elif self.target == "cluster":
            out.update((key, getattr(self, key)) for key in _CLUSTER
                       if key not in _WHEN_SET or getattr(self, key) is not None)
        if self.cause_from == CAUSE_FOLLOWER:
            out["cause"] = self.cause
        if self.spent is not None:
            out.update((key, getattr(self.spent, key)) for key in _SPENT)
        if self.steps_redone is not None:
            out.update((key, getattr(self, key)) for key in _REDONE)
        if self.cause_from == CAUSE_LOG:
            out["cause"] = self.cause
        if self.goodput is not None:
            out["goodput"] = self.goodput
        out.update((key, getattr(self, key)) for key in _DOLLARS if getattr(self, key) is not None)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> JobState:
        """A state from what to_dict() gave (keys it does not know are left out, missing ones take defaults)."""
        known = {f.name for f in fields(cls)} - {"spent", "cause_from", "waits_in_queue"}
        values = {k: v for k, v in data.items() if k in known}
        if "uptime_s" in data:
            values["spent"] = Spent(**{k: data.get(k) for k in _SPENT})
        if "cause" in data:
            keys = list(data)
            later = data.get("target") == "vertex" or any(k in data and keys.index(k) < keys.index("cause")
                                                          for k in (*_SPENT, *_REDONE))
            values["cause_from"] = CAUSE_LOG if later else CAUSE_FOLLOWER
        return cls(**values)

    def __getitem__(self, key: str) -> Any:
        """Read-only access by the JSON's key names, for scripts and tests written against the dict this replaced."""
        return self.to_dict()[key]
