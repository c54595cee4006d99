"""Working on the nodes: `cluster ssh` (one node, or --all / --nodes at once), `cluster forward`, `cluster ssh-config`."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

from gcpgpu.errors import UsageProblem
from gcpgpu.output import info
from gcpgpu.settings import Settings

if TYPE_CHECKING:
    from gcpgpu.cluster.observe import Node


def _check_name(name: str) -> None:
    from gcpgpu.cluster.names import check_cluster_name

    check_cluster_name(name)


def _emulator(settings: Settings) -> str | None:
    """The emulator the nodes are reached on (its HOST:PORT), or None for Google Cloud; one line when only
    gcloud is pointed at an emulator (the two would disagree about where the nodes are)."""
    from gcpgpu.cluster import ssh as node_ssh

    if node_ssh.emulated_target(settings.emulator, settings.environ) is None:
        return None
    if not settings.emulator:
        node_ssh.refuse_on_emulator(None, settings.environ)
    return settings.emulator


def _ranked(settings: Settings, name: str, rank: int) -> Node:
    from gcpgpu.cluster.nodessh import cluster_nodes, pick

    node = pick(cluster_nodes(settings.clients, settings.project, name), str(rank), "--node")[0]
    if node.status != "RUNNING":
        raise UsageProblem(f"--node {rank}: {node.name} is {node.status}, not RUNNING: start it with "
                           f"'gcpgpu cluster up {name} ...' first")
    return node


@click.command(context_settings={"ignore_unknown_options": True})
@click.argument("name")
@click.option("--node", "rank", type=int, default=None, help="The node's rank (default 0).")
@click.option("--all", "every", is_flag=True, help="Run the command on every RUNNING node at once.")
@click.option("--nodes", "which", metavar="RANKS", help="Run the command on these ranks at once: 0,2-3.")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@click.pass_obj
def ssh(settings: Settings, name: str, rank: int | None, every: bool, which: str | None,
        command: tuple[str, ...]) -> None:
    """A shell (or `-- CMD ...`) on a node through IAP TCP forwarding; nodes need no external IP.

    One node: `gcloud compute ssh NODE --tunnel-through-iap` on Google Cloud; OpenSSH through the
    emulator's tunnel against it. With --all or --nodes the command runs on those nodes in parallel (64
    at a time), each line prefixed with its rank, then a summary; it exits 1 naming each node that failed.
    The cluster needs a firewall rule that lets IAP's range reach port 22: bring it up with --iap-ssh.
    """
    from gcpgpu.cluster import ssh as node_ssh

    _check_name(name)
    args = list(command[1:] if command[:1] == ("--",) else command)
    if rank is not None and rank < 0:
        raise UsageProblem(f"--node {rank} must be a rank of 0 or more")
    if (every or which is not None) and rank is not None:
        raise UsageProblem("--node picks one node; --all and --nodes pick many: give one of them")
    if every and which is not None:
        raise UsageProblem("--all and --nodes RANKS both pick nodes: give one of them")
    if (every or which is not None) and not args:
        raise UsageProblem(f"{'--all' if every else '--nodes'} runs one command on many nodes: give it after "
                           "'--' (e.g. -- nvidia-smi -L)")
    emulator = _emulator(settings)
    if every or which is not None:
        _fan_out(settings, name, which, args, emulator)
        return
    if not emulator:
        argv, warning = node_ssh.gcloud_argv(settings.clients, settings.project, name, rank or 0, args)
        if warning:
            info(f"note: {warning}")
        sys.exit(node_ssh.run(argv))
    import subprocess

    from gcpgpu.cluster.nodessh import reach

    node = _ranked(settings, name, rank or 0)
    there = reach(settings.clients, settings.project, emulator)
    sys.exit(subprocess.call(there.argv(node, args, tty=sys.stdin.isatty() and not args)))


def _fan_out(settings: Settings, name: str, which: str | None, args: list[str], emulator: str | None) -> None:
    from gcpgpu.cluster.fanout import run_all, summary
    from gcpgpu.cluster.nodessh import cluster_nodes, pick, reach, span

    nodes = cluster_nodes(settings.clients, settings.project, name)
    chosen = pick(nodes, which, "--nodes") if which is not None else nodes
    down = [n for n in chosen if n.status != "RUNNING"]
    if which is not None and down:
        raise UsageProblem(f"--nodes {which}: " + ", ".join(f"rank {n.rank} ({n.name}) is {n.status}" for n in down)
                           + "; only RUNNING nodes run a command")
    running = [n for n in chosen if n.status == "RUNNING"]
    if not running:
        raise UsageProblem(f"--all: cluster {name} has no RUNNING node (" + ", ".join(
            f"{n.name} {n.status}" for n in chosen) + f"); start it with 'gcpgpu cluster up {name} ...'")
    if down:
        info(f"note: ranks {span([n.rank or 0 for n in down])} are not RUNNING; running on the other "
             f"{len(running)}")
    there = reach(settings.clients, settings.project, emulator)
    line, ok = summary(run_all(there, running, args))
    info(line)
    if not ok:
        sys.exit(1)


@click.command()
@click.argument("name")
@click.argument("ports", metavar="PORT[:LOCAL]")
@click.option("--node", "rank", type=int, default=0, show_default=True, help="The node's rank.")
@click.pass_obj
def forward(settings: Settings, name: str, ports: str, rank: int) -> None:
    """Forward a node's PORT to localhost:LOCAL (default: the same port) through IAP, until Ctrl-C.

    For TensorBoard, Jupyter or a debugger on a node: `gcpgpu cluster forward demo 6006` then browse
    http://localhost:6006. On Google Cloud it runs `gcloud compute start-iap-tunnel`; the cluster needs a
    firewall rule letting IAP's range (35.235.240.0/20) reach PORT.
    """
    from gcpgpu.cluster import forward as fwd

    _check_name(name)
    port, local = fwd.parse_ports(ports)
    if rank < 0:
        raise UsageProblem(f"--node {rank} must be a rank of 0 or more")
    emulator = _emulator(settings)
    listener = fwd.hold_local(local)  # before the cloud is asked: a busy port is the user's to change
    try:
        node = _ranked(settings, name, rank)
        where = f"http://localhost:{local}"
        if emulator:
            from gcpgpu.cluster.tunnel import tunnel_address

            tunnel = tunnel_address(emulator)
            click.echo(f"Forwarding localhost:{local} to {node.name}:{port} (rank {rank}) through IAP: browse "
                       f"{where}; Ctrl-C to stop")
            try:
                fwd.serve_emulated(listener, tunnel, settings.project, node, port)
            except KeyboardInterrupt:
                pass
            return
        listener.close()  # gcloud binds it itself
        click.echo(f"Forwarding localhost:{local} to {node.name}:{port} (rank {rank}) through IAP: browse "
                   f"{where}; Ctrl-C to stop")
        sys.exit(fwd.run_gcloud(fwd.gcloud_argv(settings.project, node, port, local)))
    finally:
        listener.close()


@click.command("ssh-config")
@click.argument("name")
@click.option("--write", is_flag=True, help="Put the entries in ~/.ssh/config (between markers; again replaces them).")
@click.pass_obj
def ssh_config(settings: Settings, name: str, write: bool) -> None:
    """One `Host NAME-RANK` entry per node, for plain ssh, scp and editors' remote modes.

    Prints them, or with --write keeps them in ~/.ssh/config between marker lines of their own: a second
    --write replaces them, `cluster down` removes them, nothing else in the file is touched.
    """
    from gcpgpu.cluster import sshconfig
    from gcpgpu.cluster.nodessh import cluster_nodes, reach

    _check_name(name)
    emulator = _emulator(settings)
    nodes = cluster_nodes(settings.clients, settings.project, name)
    body = sshconfig.entries(reach(settings.clients, settings.project, emulator), name, nodes)
    if not write:
        click.echo(body, nl=False)
        return
    changed = sshconfig.write(name, settings.project, body)
    hosts = f"{name}-{nodes[0].rank}" + (f" .. {name}-{nodes[-1].rank}" if len(nodes) > 1 else "")
    info(f"{'Wrote' if changed else 'Already in'} {sshconfig.config_path()}: {len(nodes)} hosts ({hosts}); "
         f"try: ssh {name}-{nodes[0].rank}")
