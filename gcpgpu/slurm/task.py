"""One node's task of a gcpgpu job run by Slurm: `python -m gcpgpu.slurm.task JOB.json` (from the batch script).

It runs the same job command a cluster's job agent runs for a job put on the node's metadata: the job's
container (image, command, the rendered NCCL environment, workdir, setup, mounts, secrets, --output-dir),
with its rank and rendezvous from Slurm's allocation instead of the metadata: NODE_RANK = SLURM_NODEID,
NNODES = SLURM_NNODES, the master the allocation's first node, the port from the Slurm job id. A requeued
job (SLURM_RESTART_COUNT > 0: preempted by a higher priority, or a node lost) resumes as gcpgpu's own
recovery resumes one (jobs/cluster/deliver.py's resumed: --resume for the bundled trainer, GCPGPU_RESUME=1
and GCPGPU_RESTART=N for a user's command), as attempt N.

In the emulator the node's container engine is the emulator's job agent, which GCPGPU_SLURM_ENGINE names
(gcpgpu/fakes/jobs/slurm_engine.py: the call goes over a socket, as `docker run` talks to its daemon), so
the job runs exactly as a cluster job without Slurm does there. On Google Cloud the task runs the node's
job agent script (templates/job_agent.sh.j2, rendered as `job submit` renders it for a node without
Slurm), which pulls and runs the job's container, mounts its buckets and output folders, and ends with
the container's exit code; Slurm's SIGTERM stops the container. The Slurm daemons run in gcpgpu's image
(host network, host pid, privileged: templates/startup.sh.j2), so the task enters the host's mount, UTS,
IPC and network namespaces first (nsenter --target 1, no fork: the pid namespace is the host's already,
and Slurm's signals reach the agent itself): the agent then sees the host's docker, gcsfuse, shared
mounts and local SSDs exactly as the job watcher's agent does. On a host that runs Slurm itself it
enters its own namespaces, a no-op. (Unverified on Google Cloud: no real node has run it.)
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

from gcpgpu.jobs.cluster.deliver import agent_script, resumed
from gcpgpu.jobs.cluster.record import JobRecord

PORT_BASE = 29500
ENTER_HOST = ["nsenter", "--target", "1", "--mount", "--uts", "--ipc", "--net", "--"]
ENGINE_ENV = "GCPGPU_SLURM_ENGINE"  # the emulator's container engine for its Slurm nodes


def rendezvous(environ: dict[str, str], emulated: bool) -> dict[str, str]:
    """NODE_RANK, NNODES, MASTER_ADDR and MASTER_PORT from Slurm's variables."""
    job_id = int(environ.get("SLURM_JOB_ID", "0") or 0)
    if emulated:
        master = "127.0.0.1"  # every emulated node is this machine
    else:
        hosts = subprocess.run(["scontrol", "show", "hostnames", environ.get("SLURM_JOB_NODELIST", "")],
                               capture_output=True, text=True, check=False, timeout=30).stdout.split()
        master = hosts[0] if hosts else "127.0.0.1"
    return {"NODE_RANK": environ.get("SLURM_NODEID", "0"), "NNODES": environ.get("SLURM_NNODES", "1"),
            "MASTER_ADDR": master, "MASTER_PORT": str(PORT_BASE + job_id % 1000)}


def attempt_of(job: JobRecord, environ: dict[str, str]) -> JobRecord:
    """The job record as this attempt runs it: the first as submitted, a requeued one resuming."""
    restarts = int(environ.get("SLURM_RESTART_COUNT", "0") or 0)
    return resumed(job, restarts) if restarts else job


def command(task: dict, environ: dict[str, str], call_file: str) -> tuple[list[str], dict | str] | str:
    """(argv, what it reads from `call_file`) of this node's task (`task`: the job file node 0's queue agent
    wrote: the job's node record, with `emulated` and `project`), or the one line saying why it cannot run
    here. On a node of Google Cloud: the node's job agent script for this attempt, rank and rendezvous, which
    runs the job's container (jobs/cluster/deliver.py's agent_script, as `job submit` puts it on a node
    without Slurm). In the emulator: the call the emulator's container engine reads."""
    job = JobRecord.from_json(task)
    if job is None:
        return "gcpgpu slurm task: the job file holds no job record"
    attempt = attempt_of(job, environ)
    if not task.get("emulated"):
        rdzv = rendezvous(environ, False)
        script = agent_script(attempt, int(rdzv["NODE_RANK"]), int(rdzv["NNODES"]), rdzv["MASTER_ADDR"],
                              int(rdzv["MASTER_PORT"]), as_task=True)
        return [*ENTER_HOST, "bash", call_file], script
    engine = environ.get(ENGINE_ENV)
    if not engine:
        return f"gcpgpu slurm task: {ENGINE_ENV} is not set: this node has no container engine to run the job"
    rdzv = rendezvous(environ, True)
    call = {"project": task.get("project"), "node": environ.get("SLURMD_NODENAME", ""),
            "rank": int(rdzv["NODE_RANK"]), "nnodes": int(rdzv["NNODES"]), "job": attempt.to_json()}
    return [*shlex.split(engine), call_file], json.dumps(call)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m gcpgpu.slurm.task JOB.json", file=sys.stderr)
        return 2
    with open(args[0]) as f:
        job = json.load(f)
    environ = dict(os.environ)
    node, restart = environ.get("SLURMD_NODENAME", "node"), environ.get("SLURM_RESTART_COUNT", "0") or "0"
    call_file = Path(args[0]).with_name(f"{Path(args[0]).stem}.{node}.{restart}.call")
    got = command(job, environ, str(call_file))
    if isinstance(got, str):
        print(got, file=sys.stderr, flush=True)
        return 1
    run, call = got
    call_file.write_text(str(call))
    print(f"gcpgpu slurm task: job {job.get('id')} rank {environ.get('SLURM_NODEID', '0')} of "
          f"{environ.get('SLURM_NNODES', '1')} on {node} (Slurm job {environ.get('SLURM_JOB_ID')}, restart {restart})",
          flush=True)
    os.execvp(run[0], run)
    return 1  # not reached


if __name__ == "__main__":
    sys.exit(main())
