"""`cluster ssh`: step onto a node through IAP TCP forwarding (`gcloud compute ssh --tunnel-through-iap`).

Nodes have no external IP by default; IAP TCP forwarding reaches them on their internal address
once a firewall rule lets IAP's range (plan.IAP_RANGE) reach port 22 (`cluster up --iap-ssh`).
A command after `--` runs on the node as the user typed it: its words are shell-quoted once
(`shlex.join`) into gcloud's `--command`, which the node's login shell reads.

Against the emulator gcloud's IAP tunnel cannot reach the nodes (tunnel.py says why), and `gcloud compute
ssh` would still reach IAP (Google Cloud) with the same project id: there gcpgpu reaches each node's real
sshd with OpenSSH through the emulator's tunnel instead (nodessh.py). When only gcloud is pointed at an
emulator (gcpgpu is not), the two disagree about where the nodes are, so it refuses before any call.
"""

from __future__ import annotations

import ipaddress
import shlex
import shutil
import subprocess
from collections.abc import Mapping
from urllib.parse import urlsplit

from gcpgpu.errors import UsageProblem
from gcpgpu.gcp.clients import Clients

from .observe import observe
from .plan import IAP_RANGE


def _loopback(url: str) -> bool:
    host = urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def emulated_target(emulator: str | None, environ: Mapping[str, str]) -> str | None:
    """What points `cluster ssh` at an emulator, in words, or None when it would reach Google Cloud.

    gcpgpu's own --emulator/GCPGPU_EMULATOR, or gcloud's compute endpoint sent to a loopback address
    (what `eval "$(gcpgpu emulator gcloud-env)"` does), by environment or by the active configuration.
    """
    from gcpgpu.settings import active_gcloud_config, read_gcloud_properties

    if emulator:
        return f"the emulator at {emulator}"
    url = environ.get("CLOUDSDK_API_ENDPOINT_OVERRIDES_COMPUTE", "")
    if url and _loopback(url):
        return f"CLOUDSDK_API_ENDPOINT_OVERRIDES_COMPUTE={url} (an emulator)"
    url = read_gcloud_properties(environ).get("api_endpoint_overrides", "compute", fallback="")
    if url and _loopback(url):
        return f"gcloud's configuration {active_gcloud_config(environ)[1]}, which sends compute to {url} (an emulator),"
    return None


def refuse_on_emulator(emulator: str | None, environ: Mapping[str, str]) -> None:
    """One line, exit 2, before any call, when gcloud is pointed at an emulator: gcloud cannot reach its nodes."""
    target = emulated_target(emulator, environ)
    if target:
        raise UsageProblem(f"cluster ssh: {target} cannot be reached by gcloud's IAP tunnel, so nothing runs: no "
                           "gcloud, no ssh keys; point gcpgpu at the emulator (GCPGPU_EMULATOR=HOST:PORT) to reach its "
                           "nodes through its own tunnel")


def gcloud_argv(clients: Clients, project: str, cluster: str, rank: int, command: list[str]) -> tuple[list[str], str | None]:
    """The gcloud command line for node `rank` of `cluster`, and a warning when no IAP rule exists."""
    obs = observe(clients, project, cluster)
    if not obs.nodes:
        from .unknown import missing

        raise missing(clients, project, cluster, " with nodes")
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
