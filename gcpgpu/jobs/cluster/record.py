"""JobRecord: the one definition of what gcpgpu stores about a cluster job, wherever it stores it.

A cluster job is written in three places, and each is a JobRecord (to_json / from_json):

    the node record      instance metadata `gcpgpu-job` on each of its nodes: what the node's job agent
                         runs (image, command, args, env, mounts, rendezvous), the attempt, and what its
                         follower reads (recover, follow, policy, detached, agent_image)
    the project record   one entry of project metadata `gcpgpu-jobs-<cluster>` (store.py): the job's life
                         as its leader writes it (state, attempt, at, started, ended, node, cause, error,
                         history) and, on a Slurm cluster, its place in the queue (queue, slurm_id, reason,
                         slurm_nodes, cancel, by_hand) with `submit`, the node record sbatch runs
    the pending attempt  project metadata `gcpgpu-recovery-<cluster>` (journal.py): a node record with
                         `recovering`, what a recovery still has to do

Every end reads and writes it through here: the laptop, each node's follower (gcpgpu/node/agent.py) and a
Slurm controller's queue agent (gcpgpu/slurm/queue.py). A node may run an older image than the laptop,
so the JSON keys are the ones gcpgpu has always written; a key this gcpgpu does not know (a newer one
wrote it) is kept in `extra` and written back as it was. Fields that are None are not written.

Every time a record holds (at, created, submitted, started, ended, a history entry's at and delivered)
is stamp()ed on gcpgpu.gcp.clock, the emulator's under test, so goodput subtracts times of one clock.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any, TypedDict

from gcpgpu.gcp import clock
from gcpgpu.jobs import ids
from gcpgpu.jobs.state import is_final

log = logging.getLogger(__name__)
AGENT = "agent"  # the scheduler of a cluster without one: gcpgpu's job agent on each node, one job at a time


def stamp(at: float | None = None) -> str:
    """RFC 3339 (UTC, whole seconds) of `at`, by default now on gcpgpu.gcp.clock: every time a record holds."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(clock.now() if at is None else at))


class HistoryEntry(TypedDict, total=False):
    """One recovery or retry, in a record's `history` (the follower writes it; views and goodput read it)."""

    attempt: int  # the attempt it started
    kind: str  # "retry" (the job's own failure or a stall); absent: a recovery from lost nodes
    at: str  # when the loss or failure was seen
    delivered: str  # when the next attempt reached its nodes (where goodput's recovery ends)
    lost: list[str]  # the nodes lost
    node: str | None  # a retry's failing or stalled node
    zone: str
    cause: str
    last_step: int | None  # the last step the attempt logged
    log_every: int  # its trainer's --log-every (how many steps may have run unlogged)
    pull_s: float  # node-seconds its nodes spent pulling the image
    capture: str  # a stall's stacks, as each node's agent answered


class Policy(TypedDict, total=False):
    """What the follower does besides recovering (jobs/policy.py checks it; `notify` stays on the nodes)."""

    max_restarts_on_errors: int
    retry_on_exit_codes: list[int]
    stall_timeout: int | None
    notify: list[str]
    max_spend: float  # USD: the follower stops the job at this cost (spendcap.py)


@dataclass(frozen=True)
class QueuePlace:
    """A Slurm cluster's queue fields of a job: its partition (priority), nodes, and place among the waiting."""

    priority: str | None = "normal"
    nodes: int | None = None
    position: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}

    @classmethod
    def from_json(cls, data: Any) -> QueuePlace:
        data = data if isinstance(data, dict) else {}
        return cls(priority=data.get("priority"), nodes=_int(data.get("nodes")), position=_int(data.get("position")))


@dataclass(frozen=True)
class JobRecord:
    id: str
    name: str | None = None
    cluster: str | None = None
    scheduler: str = AGENT  # which backend runs it (jobs/cluster/backend.py): "agent" or "slurm"
    # -- what the nodes run (the node record)
    image: str | None = None
    command: list[str] | None = None
    args: list[str] | None = None
    env: dict[str, str] | None = None
    mounts: list[str] | None = None  # host paths the NCCL plugin needs
    user_mounts: list[dict] | None = None  # --mount and --workdir (jobs/usercode.py)
    gcs_buckets: list[str] | None = None
    node_dirs: list[str] | None = None
    output_dir: str | None = None
    bundled_trainer: bool | None = None
    timeout: int | None = None  # seconds, the user's --timeout
    machine_type: str | None = None
    gpus_per_node: int | None = None
    nnodes: int | None = None
    master_addr: str | None = None
    master_port: int | None = None
    rxdm: str | None = None  # TCPX/TCPXO: the receive-datapath manager's image
    # -- its attempt (0, then one more per recovery or retry) and when it came
    attempt: int = 0
    run: str | None = None  # what the nodes' agents run and report: the id, -rN for attempt N
    history: list[HistoryEntry] | None = None
    created: str | None = None
    submitted: str | None = None
    submitter: str | None = None  # who submitted it (gcp/identity.py); None: written before gcpgpu kept it
    # -- what its follower reads
    recover: int | None = None
    follow: dict | None = None  # the Follower's other settings
    policy: Policy | None = None
    detached: bool | None = None
    agent_image: str | None = None
    # -- its life, as its leader writes it (the project record)
    state: str | None = None
    at: str | None = None  # when the state was written
    started: str | None = None
    ended: str | None = None
    node: str | None = None  # RECOVERING, RETRYING, STALLED: the node(s) it is about
    cause: str | None = None
    error: str | None = None
    followed_until: float | None = None  # the submitter promised to lead by then (gcpgpu.gcp.clock)
    spend_warned: str | None = None  # when its follower told SPEND_WARNING (80 % of --max-spend: spendcap.py)
    # -- a recovery written down and not finished (journal.py): the VMs to replace and the spec
    recovering: dict | None = None
    # -- a Slurm cluster's queue (jobs/cluster/slurm.py, gcpgpu/slurm/queue.py)
    queue: QueuePlace | None = None
    submit: JobRecord | None = None  # the node record sbatch runs, until the controller's agent has
    slurm_id: str | None = None
    slurm_nodes: str | None = None
    reason: str | None = None  # why it waits
    cancel: bool | None = None  # asked to stop: the controller's agent scancels it
    by_hand: bool | None = None  # sbatch'ed on a node by hand, not by gcpgpu
    slurm_output: dict | None = None  # such a job's output file, where Slurm writes it: {"path", "node"}
    # Keys a newer gcpgpu wrote, kept as they were.
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def run_key(self) -> str:
        """What the nodes' agents run and report for this attempt (the id, or -rN)."""
        return self.run or self.id

    @property
    def final(self) -> bool:
        return is_final(self.state)

    def but(self, **changes: Any) -> JobRecord:
        """This record with `changes` (dataclasses.replace)."""
        return dataclasses.replace(self, **changes)

    def to_json(self) -> dict[str, Any]:
        """The record as it is stored: gcpgpu's keys, None left out, unknown keys kept."""
        out = dict(self.extra)
        for f in dataclasses.fields(self):
            if f.name == "extra":
                continue
            value = getattr(self, f.name)
            if value is None or (f.name == "scheduler" and value == AGENT):
                continue
            if isinstance(value, (QueuePlace, JobRecord)):
                value = value.to_json()
            out[f.name] = value
        return out

    @classmethod
    def parse(cls, raw: str | None) -> JobRecord | None:
        """A record from its stored text (a metadata value), or None: absent, unreadable, or no record."""
        try:
            return cls.from_json(json.loads(raw)) if raw else None
        except ValueError:
            return None

    @classmethod
    def from_json(cls, data: Any) -> JobRecord | None:
        """A record from what to_json gave, or from what any earlier gcpgpu wrote; None when `data` is not
        a record: no id, or an id (or run key) gcpgpu never makes (ids.is_job), which is refused here, where
        every reader reads, before it can reach a file name or a node's batch script."""
        if not isinstance(data, dict) or not data.get("id"):
            return None
        why = refused(data)
        if why is not None:
            log.warning("skipping a job record: %s", why)
            return None
        known = {f.name for f in dataclasses.fields(cls)} - {"extra"}
        values: dict[str, Any] = {k: v for k, v in data.items() if k in known}
        values["id"] = str(data["id"])
        values["attempt"] = _int(data.get("attempt")) or 0
        if "queue" in data:
            values["queue"] = QueuePlace.from_json(data["queue"])
            # Written before the record named its scheduler: only a Slurm cluster's jobs ever had a queue place.
            values.setdefault("scheduler", "slurm")
        values["scheduler"] = str(values.get("scheduler") or AGENT)
        if "submit" in data:
            values["submit"] = cls.from_json(data["submit"])
        for key in ("nnodes", "gpus_per_node", "master_port", "recover", "timeout"):
            if key in values:
                values[key] = _int(values[key])
        if values.get("slurm_id") is not None:
            values["slurm_id"] = str(values["slurm_id"])
        out = values.get("slurm_output")
        if out is not None and not (isinstance(out, dict) and isinstance(out.get("path"), str)
                                    and out["path"].isprintable() and ids.is_job(out.get("node"))):
            values["slurm_output"] = None  # printed by `job logs`: a file path and a node name, nothing else
        return cls(**values, extra={k: v for k, v in data.items() if k not in known})


def refused(data: dict) -> str | None:
    """Why the stored record `data` is not one gcpgpu wrote (its id or run key is not a job id), or None."""
    for key in ("id", "run"):
        value = data.get(key)
        if (key == "id" or value is not None) and not ids.is_job(value):
            return f"its {key} {ascii(value)[:80]} is not a job id gcpgpu makes"
    return None


def _int(value: Any) -> int | None:
    try:
        return None if value is None or isinstance(value, bool) else int(value)
    except (TypeError, ValueError):
        return None
