"""`cluster ssh`: step onto a node through IAP TCP forwarding (`gcloud compute ssh --tunnel-through-iap`).

Nodes have no external IP by default; IAP TCP forwarding reaches them on their internal address
once a firewall rule lets IAP's range (plan.IAP_RANGE) reach port 22 (`cluster up --iap-ssh`).
A command after `--` runs on the node as the user typed it: its words are shell-quoted once
(`shlex.join`) into gcloud's `--command`, which the node's login shell reads.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess

from gcpgpu.errors import CloudError, UsageProblem
from gcpgpu.gcp.clients import Clients

from .observe import observe
from .plan import IAP_RANGE


def gcloud_argv(clients: Clients, project: str, cluster: str, rank: int, command: list[str]) -> tuple[list[str], str | None]:
    """The gcloud command line for node `rank` of `cluster`, and a warning when no IAP rule exists."""
    obs = observe(clients, project, cluster)
    if not obs.nodes:
        raise CloudError(f"no cluster named {cluster} with nodes in project {project} (see 'gcpgpu cluster list')")
    node = next((n for n in obs.nodes if n.rank == rank), None)
    if node is None:
        ranks = ", ".join(str(n.rank) for n in obs.nodes)
        raise UsageProblem(f"--node {rank}: cluster {cluster} has ranks {ranks}")
    argv = ["gcloud", "compute", "ssh", node.name, f"--zone={node.zone}", f"--project={project}",
            "--tunnel-through-iap"]
    if command:
        argv.append(f"--command={shlex.join(command)}")
    warning = None
    if f"{cluster}-iap-ssh" not in obs.firewalls:
        warning = (f"cluster {cluster} has no gcpgpu firewall rule for IAP ({IAP_RANGE} to port 22); unless you "
                   f"have your own, run 'gcpgpu cluster up {cluster} ... --iap-ssh' to add it")
    return argv, warning


def run(argv: list[str]) -> int:
    """Hand the terminal to gcloud; its exit status becomes ours."""
    if shutil.which(argv[0]) is None:
        raise UsageProblem("gcloud is not installed: see https://cloud.google.com/sdk/docs/install")
    return subprocess.call(argv)
