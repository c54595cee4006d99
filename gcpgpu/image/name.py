"""The training image's name and where it lives: REGION-docker.pkg.dev/PROJECT/REPO/gcpgpu-trainer:TAG.

The one home for them on the tool's side: `container build` names what it pushes with them, `job
submit` and the nodes' follower find it with them. The emulator (gcpgpu/fakes) and the trainer's
stdlib-only argv reader keep their own copies: neither may import the tool.

Also the words the cluster room writes on its nodes about the follower's image (AGENT_KEY, the stale
tag): vocabulary it may import (tests/test_layering.py VOCABULARY), so this module imports nothing of
gcpgpu. Which image the follower runs is decided in image/follower.py.
"""

from __future__ import annotations

IMAGE_NAME = "gcpgpu-trainer"
DEFAULT_REPO = "gcpgpu"  # container build's default --repo
# A tag nothing pushes: only nodes and jobs an older gcpgpu wrote without a follower image carry it.
STALE_TAG = "latest"
# The instance metadata key a node runs its follower by (gcpgpu/node/agent.py); its value: the image it
# runs from (templates/startup.sh.j2 reads it).
AGENT_KEY = "gcpgpu-agent"


def repository(project: str, region: str, repo: str = DEFAULT_REPO) -> str:
    """REGION-docker.pkg.dev/PROJECT/REPO (a domain-scoped project's ':' becomes '/', as Docker needs)."""
    return f"{region}-docker.pkg.dev/{project.replace(':', '/')}/{repo}"


def image_path(project: str, region: str, repo: str = DEFAULT_REPO) -> str:
    """REGION-docker.pkg.dev/PROJECT/REPO/gcpgpu-trainer, without a tag."""
    return f"{repository(project, region, repo)}/{IMAGE_NAME}"


def image_uri(project: str, region: str, tag: str, repo: str = DEFAULT_REPO) -> str:
    """REGION-docker.pkg.dev/PROJECT/REPO/gcpgpu-trainer:TAG."""
    return f"{image_path(project, region, repo)}:{tag}"


def is_gcpgpu_image(image: str | None, region: str, project: str) -> bool:
    """Whether `image` is a gcpgpu training image of the region's default repository (it holds gcpgpu,
    so a node can run its follower from it)."""
    return bool(image) and str(image).startswith(image_path(project, region) + ":")


def stale_image(region: str, project: str) -> str:
    """The follower image older gcpgpu versions wrote: a tag nothing pushes."""
    return image_uri(project, region, STALE_TAG)
