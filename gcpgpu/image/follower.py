"""The image a cluster's follower runs from (gcpgpu/node/agent.py: a detached job's following and recovery,
the cluster's autostop), and the one a Slurm cluster's nodes run Slurm from: the whole rule, in one place.

The follower is gcpgpu's own code, so it runs from a gcpgpu training image (image/name.py), and each
node names it in its metadata (AGENT_KEY), where its startup script reads it:
  - `cluster up --autostop` or `--scheduler slurm`, and `cluster autostop`: the gcpgpu image `container
    build` last pushed for the cluster's region and GPUDirect flavour, found as image/default.py finds
    a job's (follower_image: this machine's record, else Artifact Registry's newest FLAVOR-* tag; a plan
    or --dry-run reads only the record); a spec file's agent_image stands (fill_follower_image).
  - `job submit --detach` (detached_follower): none when the job's own image is gcpgpu's (it runs the
    follower); else the image every node already runs its follower from, when they share one (an
    autostop's: shared_follower); else follower_image. The job's record keeps it as agent_image.
  - a detached job put on a node (agent_image, jobs/cluster/deliver.py): the job's image when it is gcpgpu's,
    else what the node already runs its follower from, else the record's.
The stale tag (image/name.py stale_image: :latest, which nothing pushes) is never chosen while anything
else is known: only nodes and jobs an older gcpgpu wrote without a follower image carry it.
"""

from __future__ import annotations

from typing import Any

from gcpgpu.errors import UsageProblem

from .default import newest_in_registry, remembered
from .name import AGENT_KEY, image_path, is_gcpgpu_image, stale_image

# The key a node names its follower's image by goes with the rule that fills it (jobs/cluster/deliver.py writes both).
__all__ = ["AGENT_KEY", "agent_image", "detached_follower", "fill_follower_image", "follower_image", "shared_follower"]


def follower_image(settings: Any, region: str, machine_type: str, *, dry_run: bool, say: Any,
                   what: str = "autostop") -> str:
    """The image the nodes' follower runs from: the gcpgpu image `container build` last pushed for the
    cluster's region and GPUDirect flavour (this machine's record, else Artifact Registry's newest
    FLAVOR-* tag); a plan or --dry-run reads only the record (no request). `what` needs the follower
    (autostop, --detach): the one line that says none is built names it."""
    from gcpgpu import catalog

    flavor = catalog.get_machine_type(machine_type).gpudirect
    project = settings.project
    found = remembered(emulated=settings.emulator, project=project, region=region, flavor=flavor)
    where = image_path(project, region)
    if found is None and dry_run:
        runs = "Slurm daemons" if what == "--scheduler slurm" else "follower"
        say(f"{what}: the nodes' {runs} will run the newest {flavor}-* image in {where} (looked up then)")
        return f"{where}:{flavor}-*"
    found = found or newest_in_registry(settings.clients, project, region, flavor)
    if not found:
        raise UsageProblem(f"{what} runs on the nodes from gcpgpu's image, and {where} has no {flavor}-* image: "
                           f"run 'gcpgpu container build --region {region} --machine-type {machine_type}' first")
    return found


def fill_follower_image(settings: Any, spec: Any, *, dry_run: bool, say: Any) -> None:
    """Give a ClusterSpec with autostop the image its follower runs from, and a Slurm cluster's the image its
    nodes run Slurm from (gcpgpu's image carries Slurm); a spec file's agent_image stands."""
    if (spec.autostop is not None or spec.scheduler or spec.max_spend is not None) and not spec.agent_image:
        what = "autostop" if spec.autostop is not None else "--max-spend" if spec.max_spend is not None \
            else "--scheduler slurm"
        spec.agent_image = follower_image(settings, str(spec.region), spec.machine_type, dry_run=dry_run, say=say,
                                          what=what)


def shared_follower(nodes: list[Any], project: str) -> str | None:
    """The image every one of `nodes` already runs its follower from, when they share one that is not
    the stale tag; else None."""
    had = {n.metadata.get(AGENT_KEY) for n in nodes}
    if len(had) != 1 or not nodes:
        return None
    kept = had.pop()
    return kept if kept and kept != stale_image(nodes[0].region, project) else None


def detached_follower(settings: Any, image: str | None, nodes: list[Any], *, dry_run: bool,
                      say: Any) -> str | None:
    """`job submit --detach`: the image the job's nodes run their follower from. None when the job's own
    image is gcpgpu's (it runs the follower); the nodes' own when every node already runs its follower
    from one image (the autostop's); else looked up as autostop's is (follower_image): none built is
    one line, --dry-run asks nothing."""
    if is_gcpgpu_image(image, nodes[0].region, settings.project):
        return None
    return shared_follower(nodes, settings.project) or follower_image(
        settings, nodes[0].region, nodes[0].machine_type, dry_run=dry_run, say=say, what="--detach's follower")


def agent_image(job_image: str | None, region: str, project: str, *fallbacks: str | None) -> str:
    """The image a node's follower runs from: the job's, when it is a gcpgpu training image, else the
    first of `fallbacks` (what the node already runs its follower from; what `job submit --detach`
    resolved, kept in the job's record) that is not the stale tag."""
    stale = stale_image(region, project)
    if is_gcpgpu_image(job_image, region, project):
        return str(job_image)
    return next((f for f in fallbacks if f and f != stale), stale)
