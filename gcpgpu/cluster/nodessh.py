"""Plain OpenSSH to a cluster's nodes through IAP: the options every path shares (--all, ssh-config, attach).

Each node is reached as `ssh` reaches any host whose ProxyCommand opens IAP TCP forwarding to its port 22
(tunnel.py: `gcloud compute start-iap-tunnel NODE %p --listen-on-stdin` on Google Cloud, the emulator's
stand-in against it), logging in as login_user() with gcpgpu's key (keys.py), which `prepare` adds to the
project's `ssh-keys` first. A node's host key is pinned under its instance id (HostKeyAlias compute.ID,
gcloud's own alias) in a known-hosts file of its own, accepted the first time and checked after.
"""

from __future__ import annotations

import shlex
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from gcpgpu.errors import UsageProblem
from gcpgpu.gcp.clients import Clients

from . import keys
from .observe import Node, observe


@dataclass(frozen=True)
class Reach:
    """How this invocation reaches nodes: Google Cloud through gcloud, or an emulator's tunnel."""

    project: str
    tunnel: str | None  # HOST:PORT of the emulator's IAP stand-in; None on Google Cloud
    user: str
    key: Path

    @property
    def emulated(self) -> bool:
        return self.tunnel is not None

    def proxy_command(self, node: Node) -> str:
        """ssh's ProxyCommand to `node`'s port %p through IAP."""
        if self.tunnel is not None:
            return shlex.join([sys.executable, "-m", "gcpgpu.cluster.tunnel", self.tunnel, self.project, node.zone,
                               node.name]) + " %p"
        return shlex.join(["gcloud", "compute", "start-iap-tunnel", node.name]) + " %p " + shlex.join(
            ["--listen-on-stdin", f"--project={self.project}", f"--zone={node.zone}", "--verbosity=warning"])

    def host_alias(self, node: Node) -> str:
        """The name `node`'s host key is pinned under: gcloud's compute.ID; against an emulator, whose ids
        start over with each emulator, with the node's creation time too (a new node, a new key)."""
        if self.tunnel is None:
            return f"compute.{node.id}" if node.id else node.name
        return f"emulator.{node.id}.{''.join(c for c in node.created if c.isdigit())}"

    def options(self, node: Node) -> list[tuple[str, str]]:
        """The ssh options for `node`, as (keyword, value): what ssh-config writes and `-o` gives."""
        return [("HostName", node.name), ("User", self.user), ("IdentityFile", str(self.key)),
                ("IdentitiesOnly", "yes"), ("HostKeyAlias", self.host_alias(node)),
                ("UserKnownHostsFile", str(keys.known_hosts(self.emulated))), ("StrictHostKeyChecking", "accept-new"),
                ("CheckHostIP", "no"), ("ProxyCommand", self.proxy_command(node))]

    def argv(self, node: Node, command: list[str], tty: bool = False, batch: bool = False) -> list[str]:
        """`ssh` to `node` running `command` (a shell when empty); none of the user's ~/.ssh/config applies."""
        out = ["ssh", "-F", "/dev/null", "-o", "LogLevel=ERROR"]
        for keyword, value in self.options(node):
            out += ["-o", f"{keyword}={value}"]
        if batch:
            out += ["-o", "BatchMode=yes", "-T"]
        elif tty:
            out.append("-t")
        out.append(node.name)
        if command:
            out.append(shlex.join(command))  # the node's login shell reads it: quoted once
        return out


def reach(clients: Clients, project: str, emulator: str | None) -> Reach:
    """This invocation's Reach, with gcpgpu's key made and in the project's `ssh-keys` (one metadata write,
    the first time)."""
    if shutil.which("ssh") is None:
        raise UsageProblem("ssh is not installed: install OpenSSH's client (apt-get install openssh-client)")
    tunnel = None
    if emulator:
        from .tunnel import tunnel_address

        tunnel = tunnel_address(emulator)
    elif shutil.which("gcloud") is None:
        raise UsageProblem("gcloud is not installed (its IAP tunnel reaches the nodes): see "
                           "https://cloud.google.com/sdk/docs/install")
    user = keys.login_user()
    key = keys.ensure_key(emulated=tunnel is not None)
    keys.ensure_in_metadata(clients, project, keys.public_line(key, user))
    return Reach(project, tunnel, user, key)


def cluster_nodes(clients: Clients, project: str, cluster: str) -> list[Node]:
    """The cluster's ranked nodes, rank order; the cluster's one 'no such cluster' line when it has none."""
    nodes = sorted((n for n in observe(clients, project, cluster).nodes if n.rank is not None),
                   key=lambda n: n.rank or 0)
    if not nodes:
        from .unknown import missing

        raise missing(clients, project, cluster, " with nodes")
    return nodes


def pick(nodes: list[Node], spec: str, flag: str = "--nodes") -> list[Node]:
    """The nodes `spec` names by rank: `0,2-3`; one line naming the cluster's ranks when one is not there."""
    by_rank = {n.rank: n for n in nodes}
    wanted: list[int] = []
    for part in spec.split(","):
        lo, dash, hi = part.strip().partition("-")
        if not lo.isdigit() or (dash and not hi.isdigit()) or (dash and int(hi) < int(lo)):
            raise UsageProblem(f"{flag} {spec!r}: give ranks as 0,2-3 (numbers and ascending ranges)")
        wanted += list(range(int(lo), int(hi) + 1)) if dash else [int(lo)]
    missing = sorted({r for r in wanted if r not in by_rank})
    if missing:
        raise UsageProblem(f"{flag} {spec}: no rank {', '.join(map(str, missing))}; the cluster has ranks "
                           f"{span(sorted(r for r in by_rank if r is not None))}")
    return [by_rank[r] for r in sorted(set(wanted))]


def span(ranks: list[int]) -> str:
    """0-3,5: a sorted list of ranks, runs shortened."""
    out: list[str] = []
    for r in ranks:
        if out and out[-1].split("-")[-1] == str(r - 1):
            out[-1] = f"{out[-1].split('-')[0]}-{r}"
        else:
            out.append(str(r))
    return ",".join(out)
