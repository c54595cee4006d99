"""Node 0's queue agent: hands queued jobs to sbatch and writes back what Slurm says of them.

`job submit` on a Slurm cluster writes the job into the cluster's job records (project metadata:
jobs/cluster/store.py, jobs/cluster/slurm.py) with `submit` (the job as the nodes run it) and returns.
Each round this agent, beside slurmctld on node 0:
- sbatches every record that has `submit` and no `slurm_id` (its partition is its priority, -N its nodes,
  --exclusive: a job has whole nodes, --requeue: preempted or lost, it starts again), then drops `submit`;
- scancels every job whose record asks (`cancel`);
- reads `scontrol show job` once and writes each job's state (PENDING, RUNNING, SUCCEEDED, FAILED,
  CANCELLED), why it waits (in words), its place in the queue and its nodes into its record; a requeue is a
  new attempt, RECOVERING with its node and cause in the job's history until it runs again (requeue.py).
It also keeps the cluster whole (keeper.py): a lost node is marked DOWN, its jobs requeued, and the node
brought back. A job someone sbatch'ed on a node by hand (cluster ssh) gets a record of its own too, marked
`by_hand`, so `job list --cluster` shows it beside gcpgpu's (its state, nodes, place), and `job cancel` scancels it.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from gcpgpu.gcp.clients import Clients
from gcpgpu.jobs.cluster import slurm as backend
from gcpgpu.jobs.cluster import store
from gcpgpu.jobs.cluster.record import JobRecord, QueuePlace, stamp
from gcpgpu.jobs.state import CANCELLED, FAILED, PENDING, RUNNING, SUCCEEDED, is_final
from gcpgpu.resources import render

from .keeper import Keeper
from .requeue import attempt_began, in_words, requeued, why_requeued

TIERS = backend.TIERS  # conf.py's partitions
STATES = {"PENDING": PENDING, "CONFIGURING": PENDING, "REQUEUED": PENDING, "REQUEUE_HOLD": PENDING,
          "REQUEUE_FED": PENDING, "PREEMPTED": PENDING, "SUSPENDED": PENDING, "RESIZING": PENDING,
          "RUNNING": RUNNING, "COMPLETING": RUNNING, "STAGE_OUT": RUNNING, "SIGNALING": RUNNING,
          "COMPLETED": SUCCEEDED, "CANCELLED": CANCELLED, "FAILED": FAILED, "TIMEOUT": FAILED,
          "NODE_FAIL": FAILED, "OUT_OF_MEMORY": FAILED, "BOOT_FAIL": FAILED, "DEADLINE": FAILED}


def parse_jobs(text: str) -> dict[str, dict[str, str]]:
    """`scontrol show job -o`: Slurm job id -> its fields (one line per job, KEY=VALUE words)."""
    out = {}
    for line in text.splitlines():
        fields = dict(word.split("=", 1) for word in line.split() if "=" in word)
        if fields.get("JobId"):
            out[fields["JobId"]] = fields
    return out


def queue_places(jobs: dict[str, dict[str, str]]) -> dict[str, int]:
    """Slurm job id -> place among pending jobs: higher partitions first, then Slurm's priority, then age."""
    pending = [j for j in jobs.values() if STATES.get(j.get("JobState", "")) == PENDING]
    pending.sort(key=lambda j: (-TIERS.get(j.get("Partition", ""), 0), -int(j.get("Priority", "0") or 0),
                                int(j["JobId"])))
    return {j["JobId"]: i + 1 for i, j in enumerate(pending)}


def seen_fields(job: dict[str, str], place: int | None, replacing: bool = False, drained: tuple[str, ...] = ()) -> dict:
    """What a record says of a Slurm job as scontrol shows it now (why it waits in words: requeue.in_words)."""
    state = STATES.get(job.get("JobState", ""), PENDING)
    reason = job.get("Reason", "None")
    fields: dict = {"state": state, "attempt": int(job.get("Restarts", "0") or 0),
                    "reason": in_words(reason, replacing, drained) if state == PENDING else None,
                    "slurm_nodes": job.get("NodeList") if job.get("NodeList") not in (None, "(null)") else None}
    if place is not None:
        fields["position"] = place
    if state == FAILED:
        fields["error"] = f"Slurm job {job['JobId']} ended {job.get('JobState')} (exit code {job.get('ExitCode')})"
    return fields


def hand_record(job: dict[str, str]) -> JobRecord:
    """The record of a job someone sbatch'ed on a node by hand (`cluster ssh`), so `job list` shows it too,
    marked as such (`by_hand`); it is written from what scontrol says, as gcpgpu's own are."""
    nodes = job.get("NumNodes", "1").split("-")[0]
    count = int(nodes) if nodes.isdigit() else None
    return JobRecord(id=f"slurm-{job['JobId']}", name=job.get("JobName"), scheduler=backend.NAME,
                     slurm_id=job["JobId"], by_hand=True, state=PENDING, attempt=0,
                     created=_utc(job.get("SubmitTime")), nnodes=count,
                     queue=QueuePlace(job.get("Partition"), count))


def _utc(local: str | None) -> str:
    """scontrol's times (the controller's local time, no zone) as the records' UTC stamps; now if unknown."""
    try:
        return stamp(time.mktime(time.strptime(local or "", "%Y-%m-%dT%H:%M:%S")))
    except ValueError:
        return stamp()


def _has(current: list[JobRecord], slurm_id: str) -> bool:
    return any(r.slurm_id == slurm_id for r in current)


class QueueAgent:
    """The agent's rounds; `run` in a thread of node 0's process."""

    def __init__(self, clients: Clients, project: str, cluster: str, jobs_dir: Path, conf: Path,
                 emulated: bool, say: Callable[[str], None], poll_s: float = 1.0) -> None:
        self.clients, self.project, self.cluster = clients, project, cluster
        self.jobs_dir = jobs_dir
        self.env = {"SLURM_CONF": str(conf)}
        self.emulated = emulated
        self.say = say
        self.poll_s = poll_s
        self.stop = threading.Event()
        self.skipped: set[str] = set()
        self.keeper = Keeper(clients, project, cluster, self._slurm, say)

    def run(self) -> None:
        while not self.stop.wait(self.poll_s):
            try:
                self.round()
            except Exception as e:  # the controller restarting, a metadata race: the next round looks again
                self.say(f"queue agent: {type(e).__name__}: {e}")

    def _slurm(self, *argv: str) -> subprocess.CompletedProcess:
        import os

        return subprocess.run(list(argv), capture_output=True, text=True, timeout=30, check=False,
                              env={**os.environ, **self.env})

    def round(self) -> None:
        self.keeper.round()
        seen = store.read(self.clients, self.project, self.cluster)
        for why in set(seen.skipped) - self.skipped:  # never sbatched, never a file: said once
            self.skipped.add(why)
            self.say(f"queue agent: skipping a job record: {why}")
        for rec in seen.records:
            if rec.submit is not None and not rec.slurm_id and not rec.final:
                self._sbatch(rec)
            elif rec.cancel and rec.slurm_id and not rec.final:
                self._slurm("scancel", rec.slurm_id)
        shown = self._slurm("scontrol", "show", "job", "-o")
        if shown.returncode != 0:
            return
        jobs = parse_jobs(shown.stdout)
        open_ids = {r.slurm_id for r in seen.records if r.slurm_id and not r.final}
        for slurm_id in [i for i in jobs if i in open_ids]:
            if self.keeper.requeue_failed(jobs[slurm_id]):
                del jobs[slurm_id]  # requeued: the next round reads it PENDING
        for job in jobs.values():
            if job.get("JobState") == "PENDING" and job.get("Reason") == "BeginTime" and job.get("Restarts", "0") != "0":
                # Slurm holds a requeued job back a while; a preempted or lost job resumes as soon as it can.
                self._slurm("scontrol", "update", f"JobId={job['JobId']}", "StartTime=now")
        places = queue_places(jobs)
        why = {r.slurm_id: why_requeued(r, jobs[r.slurm_id], jobs, self.keeper.losses, attempt_began(r))
               for r in seen.records if r.slurm_id in jobs and not r.final
               and int(jobs[r.slurm_id].get("Restarts", "0") or 0) > r.attempt}
        known = {r.slurm_id for r in seen.records if r.slurm_id} | {r.id for r in seen.records}
        # sbatch'ed on a node by hand (cluster ssh): not gcpgpu's (its jobs are named by their records' ids)
        by_hand = [j for i, j in jobs.items() if i not in known and j.get("JobName") not in known
                   and not is_final(STATES.get(j.get("JobState", ""), PENDING))]

        def change(current: list[JobRecord]) -> list[JobRecord] | None:
            added = [hand_record(j) for j in by_hand if not _has(current, j["JobId"])]
            merged = self._merged([*current, *added], jobs, places, why)
            return merged if merged is not None else [*current, *added] if added else None

        store.update(self.clients, self.project, self.cluster, change)

    def _sbatch(self, rec: JobRecord) -> None:
        assert rec.submit is not None
        job = {**rec.submit.to_json(), "emulated": self.emulated, "project": self.project}  # the task's file
        job_file = self.jobs_dir / f"{rec.id}.json"
        self.jobs_dir.mkdir(parents=True, exist_ok=True)
        job_file.write_text(json.dumps(job))
        script = self.jobs_dir / f"{rec.id}.sh"
        # On the emulator every node shares this folder; real nodes get the job through the script (sbcast).
        script.write_text(render("slurm_job.sh.j2", python=sys.executable, job_file=str(job_file),
                                 job_json="" if self.emulated else json.dumps(job)))
        queue = rec.queue or QueuePlace()
        done = self._slurm("sbatch", "--parsable", "-J", rec.id, "-p", str(queue.priority or "normal"),
                           "-N", str(queue.nodes or 1), "--exclusive", "--requeue", "--open-mode=append",
                           "-o", str(self.jobs_dir / f"{rec.id}.out"), str(script))
        slurm_id = done.stdout.strip().split(";")[0]
        if done.returncode != 0 or not re.fullmatch(r"\d+", slurm_id):
            self.say(f"sbatch of {rec.id} failed: {(done.stderr or done.stdout).strip()[:200]}")
            return
        self.say(f"job {rec.id} is Slurm job {slurm_id}")
        store.update(self.clients, self.project, self.cluster, store.change_one(
            rec.id, lambda r: r.but(submit=None, slurm_id=slurm_id, reason="its turn")))

    def _merged(self, current: list[JobRecord], jobs: dict[str, dict[str, str]], places: dict[str, int],
                why: dict) -> list[JobRecord] | None:
        changed = False
        out = []
        for r in current:
            job = jobs.get(r.slurm_id or "")
            if job is None or r.final:
                out.append(r)
                continue
            fields = seen_fields(job, places.get(job["JobId"]), bool(self.keeper.lost), tuple(self.keeper.drained))
            queue = QueuePlace(*((r.queue.priority, r.queue.nodes) if r.queue else (None, None)),
                               fields.pop("position", None))
            new = requeued(r, r.but(**fields, queue=queue), why.get(r.slurm_id), job.get("JobState") == "RUNNING")
            if r.by_hand and job.get("StdOut") and job.get("BatchHost") not in (None, "(null)"):
                new = new.but(slurm_output={"path": job["StdOut"], "node": job["BatchHost"]})
            if new.state != r.state or new.attempt != r.attempt:
                new = new.but(at=stamp())
                if new.state == RUNNING:
                    new = new.but(started=r.started or stamp())
                if new.final:
                    new = new.but(ended=stamp())
            if new != r:
                changed = True
            out.append(new)
        return out if changed else None
