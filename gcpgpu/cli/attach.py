"""`job attach JOB [--rank N] [-- CMD]`: a shell (or one command) inside a running job's container.

A cluster job (plain or Slurm): `sudo docker exec -i[t] gcpgpu-job-ID CMD` on the node that runs rank N,
over the same ssh as `cluster ssh` (IAP, gcpgpu's key), so it sees what the job sees: /workdir, the
mounts, NODE_RANK and the rest of the container's environment. A Vertex AI job: its interactive shells,
one web URI per replica, which Vertex AI gives a job submitted with `--interactive` (enableWebAccess).
"""

from __future__ import annotations

import sys

import click

from gcpgpu.errors import UsageProblem
from gcpgpu.settings import Settings


@click.command(context_settings={"ignore_unknown_options": True})
@click.argument("job_id", metavar="JOB")
@click.option("--rank", type=int, default=0, show_default=True, help="Which node's container (cluster jobs).")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@click.pass_obj
def attach(settings: Settings, job_id: str, rank: int, command: tuple[str, ...]) -> None:
    """A shell (or `-- CMD ...`) inside a running job's container on the node of --rank.

    Cluster jobs: `sudo docker exec` on that node through IAP (as `cluster ssh`). Vertex AI jobs: prints
    each replica's interactive-shell URI (submit with --interactive to have them).
    """
    from gcpgpu.jobs import ids

    jid = ids.parse(job_id)
    args = list(command[1:] if command[:1] == ("--",) else command)
    if rank < 0:
        raise UsageProblem(f"--rank {rank} must be a rank of 0 or more")
    if jid.target == "vertex":
        _vertex(settings, jid)
        return
    import subprocess

    from gcpgpu.cluster.nodessh import cluster_nodes, reach
    from gcpgpu.jobs.cluster.nodes import container_name
    from gcpgpu.jobs.detail import detail

    from .cluster.nodes import _emulator

    emulator = _emulator(settings)
    state = detail(settings.clients, settings.project, jid)
    if state.state != "RUNNING":
        raise UsageProblem(f"job {jid} is {state.state}, not RUNNING: there is no container to attach to")
    rows = {r.get("rank"): r for r in state.per_node}
    row = rows.get(rank)
    if row is None:
        ranks = ", ".join(str(r) for r in sorted(k for k in rows if isinstance(k, int)))
        raise UsageProblem(f"--rank {rank}: job {jid} runs on ranks {ranks or 'none'}")
    if row.get("state") != "RUNNING":
        raise UsageProblem(f"--rank {rank}: job {jid} is {row.get('state')} on {row.get('node')}, not RUNNING")
    node = next((n for n in cluster_nodes(settings.clients, settings.project, jid.cluster or "")
                 if n.name == row.get("node")), None)
    if node is None:
        raise UsageProblem(f"--rank {rank}: node {row.get('node')} of job {jid} is gone")
    tty = sys.stdin.isatty() and not args
    inside = ["sudo", "docker", "exec", "-i", *(["-t"] if tty else []), container_name(jid.job), *(args or ["bash"])]
    there = reach(settings.clients, settings.project, emulator)
    sys.exit(subprocess.call(there.argv(node, inside, tty=tty)))


def _vertex(settings: Settings, jid: object) -> None:
    from gcpgpu.jobs.vertex import web_access

    uris, state = web_access(settings.clients, settings.project, jid)
    if state != "RUNNING":
        raise UsageProblem(f"job {jid} is {state}, not RUNNING: there is no replica to attach to")
    if not uris:
        raise UsageProblem(f"job {jid} has no interactive shells: submit it with --interactive (Vertex AI's "
                           "enableWebAccess)")
    for replica, uri in sorted(uris.items()):
        click.echo(f"{replica}\t{uri}")
