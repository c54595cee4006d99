"""How a cluster is named and how its resources say whose they are: the one home of these rules.

Every command that takes a cluster name (`cluster up/down/status/doctor`, `job submit --cluster`,
`metrics --cluster`, job ids `cluster:NAME:JOB`) checks it here, so they accept exactly the same
names. Resources carry the name three ways: labels on VMs (`gcpgpu-cluster`, `gcpgpu-rank`), a
description marker on what has no labels, and the name itself as a prefix.
"""

from __future__ import annotations

import re

from gcpgpu.errors import CloudError, UsageProblem
from gcpgpu.specfile import lowercase_hint

LABEL_CLUSTER = "gcpgpu-cluster"
LABEL_RANK = "gcpgpu-rank"
LABEL_MANAGED = "gcpgpu-managed"
SCHEDULER_KEY = "gcpgpu-scheduler"  # metadata: "slurm" on every node of a Slurm cluster (slurm_state.py)
LABEL_ATTEMPT = "gcpgpu-attempt"  # which `up` attempt created a node (descriptions carry " attempt=ID")
MARK = "gcpgpu:cluster="
# The longest suffix gcpgpu adds to a cluster's name is "-gpunet-8" / "-internal" (9 characters):
# 40 keeps every derived name within Compute's 63.
MAX_NAME = 40
NAME_PATTERN = rf"[a-z](?:[-a-z0-9]{{0,{MAX_NAME - 2}}}[a-z0-9])?"
CLUSTER_NAME = re.compile(rf"^{NAME_PATTERN}$")
# Any Compute resource name (RFC 1035, 1-63 characters).
RFC1035 = re.compile(r"^[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?$")


class NoSuchCluster(CloudError):
    """A cluster name that matches nothing in the project (unknown.py adds "did you mean" where it can)."""

    def __init__(self, project: str, cluster: str, after: str = "", suggestion: str = "") -> None:
        super().__init__(f"no cluster named {cluster} in project {project}{after}{suggestion} "
                         "(see 'gcpgpu cluster list')")
        self.project, self.cluster, self.after = project, cluster, after


def check_cluster_name(name: object, field: str = "NAME") -> str:
    """`name` if it is a cluster name gcpgpu can create, else one line naming `field` and the rule."""
    text = name if isinstance(name, str) else ""
    if CLUSTER_NAME.match(text):
        return text
    hint = lowercase_hint(text, lambda v: bool(CLUSTER_NAME.match(v)))
    raise UsageProblem(f"{field} {name!r} is not a cluster name: 1-{MAX_NAME} lowercase letters, digits and dashes, "
                       f"starting with a letter and not ending with a dash{hint}")


def slurm_state_disk(cluster: str) -> str:
    """The name of a Slurm cluster's state disk (slurm_state.py makes it; holdings.py names it)."""
    return f"{cluster}-slurm-state"


def marker(cluster: str) -> str:
    """The description marker that says a label-less resource belongs to `cluster`."""
    return f"{MARK}{cluster}"


def is_marked(description: str, cluster: str) -> bool:
    """The description marker of `cluster` exactly (cluster `c` must not claim cluster `c-x`'s resources)."""
    mark = marker(cluster)
    return description == mark or (description or "").startswith(mark + " ")


def owner_of(description: str) -> str | None:
    """The cluster whose marker a resource carries, or None if gcpgpu did not make it."""
    if not (description or "").startswith(MARK):
        return None
    return description[len(MARK):].split(" ", 1)[0] or None


_ATTEMPT = re.compile(r"(?:^| )attempt=([a-z0-9-]+)(?: |$)")


def attempt_of(description: str) -> str | None:
    """The `up` attempt a description says created the resource."""
    m = _ATTEMPT.search(description or "")
    return m.group(1) if m else None


def node_name(cluster: str, rank: int) -> str:
    return f"{cluster}-{rank}"


def rank_of(cluster: str, instance_name: str) -> int | None:
    """The number in a node's name (`c-3` -> 3), None for a name that is not the cluster's."""
    suffix = instance_name[len(cluster) + 1:] if instance_name.startswith(cluster + "-") else ""
    return int(suffix) if suffix.isdigit() else None


def node_rank(cluster: str, name: str, labels: dict[str, str]) -> int | None:
    """The one rank rule: the `gcpgpu-rank` label (ranks follow the fabric, not names), else the name's number."""
    label = labels.get(LABEL_RANK)
    return int(label) if label and label.isdigit() else rank_of(cluster, name)


def network_tag(cluster: str) -> str:
    return f"gcpgpu-{cluster}"
