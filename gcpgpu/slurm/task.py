"""One node's task of a gcpgpu job run by Slurm: `python -m gcpgpu.slurm.task JOB.json` (from the batch script).

Ranks and rendezvous come from Slurm's allocation: NODE_RANK = SLURM_NODEID, NNODES = SLURM_NNODES, the
master the allocation's first node, the port from the Slurm job id (in the emulator, where clusters share
one host, a port the queue agent found free). A requeued job (SLURM_RESTART_COUNT > 0: preempted by a higher priority, or a node lost)
resumes: GCPGPU_RESUME=1 and GCPGPU_RESTART=N, as gcpgpu's own recovery sets them, and the bundled
trainer gets --resume (its newest complete checkpoint; a fresh start if there is none).

In the emulator the task runs the bundled trainer on this machine's CPU (torchrun, one process per node,
as the emulator's job agent does); any other command is refused in one line, since only the job agent's
sandbox may run a user's command here. On Google Cloud it would run the job's container as the node's
job agent does (templates/job_agent.sh.j2): not built yet, said in one line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from gcpgpu.trainer.argv import MODULE as TRAINER_MODULE
from gcpgpu.trainer.argv import trainer_args

PORT_BASE = 29500


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


def command(job: dict, environ: dict[str, str]) -> tuple[list[str], dict[str, str]] | str:
    """(argv, environment) of this node's process, or the one line saying why it cannot run here."""
    restarts = int(environ.get("SLURM_RESTART_COUNT", "0") or 0)
    env = {str(k): str(v) for k, v in (job.get("env") or {}).items()}
    env.update(rendezvous(environ, bool(job.get("emulated"))))
    if job.get("emulated") and job.get("master_port"):
        env["MASTER_PORT"] = str(job["master_port"])  # the queue agent's pick: clusters share the emulator's host
    if restarts:
        env.update(GCPGPU_RESUME="1", GCPGPU_RESTART=str(restarts))
    if not job.get("emulated"):
        return ("gcpgpu slurm task: running a job's container under Slurm on Google Cloud is not built yet; "
                "use 'gcpgpu cluster ssh' and sbatch")
    own = trainer_args(str(job.get("image") or ""), list(job.get("command") or []), list(job.get("args") or []))
    if own is None:
        return ("gcpgpu emulator: its Slurm runs the bundled trainer only; a command of your own runs in the "
                "job agent's sandbox, on a cluster without --scheduler slurm")
    if restarts and "--resume" not in own and "--no-resume" not in own:
        own.append("--resume")
    env["GCPGPU_TRAINER_ALLOW_CPU"] = "1"
    argv = [sys.executable, "-m", "torch.distributed.run", "--nnodes", env["NNODES"], "--node-rank", env["NODE_RANK"],
            "--nproc-per-node", "1", "--master-addr", env["MASTER_ADDR"], "--master-port", env["MASTER_PORT"],
            "-m", TRAINER_MODULE, *own]
    return argv, env


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m gcpgpu.slurm.task JOB.json", file=sys.stderr)
        return 2
    with open(args[0]) as f:
        job = json.load(f)
    got = command(job, dict(os.environ))
    if isinstance(got, str):
        print(got, file=sys.stderr, flush=True)
        return 1
    run, env = got
    print(f"gcpgpu slurm task: job {job.get('id')} rank {env['NODE_RANK']} of {env['NNODES']} "
          f"(Slurm job {os.environ.get('SLURM_JOB_ID')}, restart {os.environ.get('SLURM_RESTART_COUNT', '0')})",
          flush=True)
    os.execvpe(run[0], run, {**os.environ, **env})
    return 1  # not reached


if __name__ == "__main__":
    sys.exit(main())
