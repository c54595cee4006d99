"""What `--cluster NAME` or `--job ID` means to Cloud Monitoring: which resources, filters and groupings.

A cluster is its VMs, found once by label with one Compute list call (their instance ids are
what every Compute and Ops Agent series carries); a Vertex AI job is a `cloudml_job` resource
with label job_id, one series per task (replica). Names are checked before any API call.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gcpgpu.errors import CloudError, UsageProblem
from gcpgpu.specfile import lowercase_hint

from .sources import NAMESPACE, Metric

if TYPE_CHECKING:
    from gcpgpu.catalog import MachineType
    from gcpgpu.gcp.clients import Clients

_CLUSTER = re.compile(r"^[a-z](?:[-a-z0-9]{0,38}[a-z0-9])?$")
_JOB = re.compile(r"^(?:projects/[^/]+/locations/[^/]+/customJobs/)?(\d{1,25})$")


def check_cluster_name(name: str) -> str:
    """A cluster name as `gcpgpu cluster up` allows it, or a UsageProblem naming the rule."""
    if not _CLUSTER.match(name or ""):
        raise UsageProblem(f"--cluster {name!r} is not a cluster name: 1-40 lowercase letters, digits and dashes, "
                           f"starting with a letter (see 'gcpgpu cluster list'){lowercase_hint(name, _CLUSTER.match)}")
    return name


def check_job_id(value: str) -> str:
    """A Vertex AI custom job's numeric id, from the id or its full resource name."""
    match = _JOB.match((value or "").strip())
    if not match:
        raise UsageProblem(f"--job {value!r} is not a Vertex AI custom job: give its numeric id or "
                           "projects/PROJECT/locations/REGION/customJobs/ID")
    return match.group(1)


def pick(cluster: str | None, job: str | None) -> tuple[str, str]:
    """('cluster', NAME) or ('job', VERTEX ID) from the two options, exactly one of which must be given.

    --job takes what `gcpgpu job submit` prints: vertex:LOCATION:ID or the CustomJob's name (a
    Vertex job), or cluster:NAME:JOB (a job on a cluster's VMs: those VMs are what to watch).
    """
    if bool(cluster) == bool(job):
        raise UsageProblem("give exactly one of --cluster NAME or --job JOB")
    if cluster:
        return "cluster", check_cluster_name(cluster)
    text = (job or "").strip()
    if _JOB.match(text):
        return "job", check_job_id(text)
    from gcpgpu.jobs import ids

    try:
        parsed = ids.parse(text)
    except UsageProblem:
        raise UsageProblem(f"--job {job!r} is not a job: give what 'gcpgpu job submit' printed "
                           "(vertex:LOCATION:ID, projects/P/locations/L/customJobs/ID or cluster:NAME:JOB) "
                           "or a Vertex AI custom job's numeric id") from None
    return ("cluster", parsed.cluster or "") if parsed.target == "cluster" else ("job", parsed.job)


@dataclass(frozen=True)
class Member:
    """A node of a cluster or a task of a Vertex job: one row of the tail."""

    key: str  # instance id, or the task name
    name: str
    rank: int | None = None
    machine_type: str | None = None
    zone: str | None = None


@dataclass
class Target:
    kind: str  # cluster | job
    name: str
    project: str
    members: list[Member] = field(default_factory=list)
    machine: MachineType | None = None

    @property
    def resource_type(self) -> str:
        return "gce_instance" if self.kind == "cluster" else "cloudml_job"

    @property
    def key_label(self) -> str:
        return "instance_id" if self.kind == "cluster" else "task_name"

    @property
    def label(self) -> str:
        return f"{self.kind} {self.name}"

    def filter(self, metric: Metric) -> str:
        """The ListTimeSeries filter for one metric over the whole target."""
        terms = [f'metric.type = "{metric.metric_type}"']
        if metric.source == "trainer":
            terms += ['resource.type = "generic_task"', f'resource.labels.namespace = "{NAMESPACE[self.kind]}"',
                      f'resource.labels.job = "{self.name}"']
        elif self.kind == "cluster":
            ids = ", ".join(f'"{m.key}"' for m in self.members)
            terms += ['resource.type = "gce_instance"', f"resource.labels.instance_id = one_of({ids})"]
        else:
            terms += ['resource.type = "cloudml_job"', f'resource.labels.job_id = "{self.name}"']
        if metric.extra_filter:
            terms.append(metric.extra_filter)
        return " AND ".join(terms)

    def group_by(self, metric: Metric, per_gpu: bool) -> list[str]:
        if metric.job_level:
            return ["resource.labels.job"]
        fields = [f"resource.labels.{self.key_label}"]
        if per_gpu and metric.per_gpu:
            fields.append("metric.labels.gpu_number")
        return fields

    def member(self, key: str) -> Member:
        for m in self.members:
            if m.key == key:
                return m
        # A Vertex task seen for the first time in the data, or a VM that joined since discovery.
        found = Member(key, key, _task_rank(key) if self.kind == "job" else None)
        self.members.append(found)
        return found


def _task_rank(task: str) -> int | None:
    # workerpool0-0 is the primary (rank 0); workerpool1-N are ranks 1..N+1.
    match = re.match(r"^workerpool(\d+)-(\d+)$", task)
    if not match:
        return None
    pool, index = int(match.group(1)), int(match.group(2))
    return 0 if pool == 0 else index + 1


def resolve(clients: Clients, project: str, kind: str, name: str) -> Target:
    """The target with its members: a cluster's VMs from one Compute list call; a job's tasks come with the data."""
    if kind == "job":
        return Target("job", name, project)
    from gcpgpu.catalog import machine_types
    from gcpgpu.cluster.observe import list_nodes
    from gcpgpu.cluster.plan import LABEL_CLUSTER, LABEL_RANK

    instances: list[Any] = list_nodes(clients, project, f"labels.{LABEL_CLUSTER} = {name}")
    if not instances:
        raise CloudError(f"cluster {name!r} has no nodes in project {project} (see 'gcpgpu cluster list')")
    members = []
    for inst in instances:
        rank = inst.labels.get(LABEL_RANK)
        suffix = inst.name.rsplit("-", 1)[-1]
        members.append(Member(
            key=str(inst.id), name=inst.name,
            rank=int(rank) if rank and rank.isdigit() else int(suffix) if suffix.isdigit() else None,
            machine_type=inst.machine_type.rsplit("/", 1)[-1], zone=inst.zone.rsplit("/", 1)[-1],
        ))
    members.sort(key=lambda m: (m.rank is None, m.rank or 0, m.name))
    machine = machine_types().get(members[0].machine_type or "")
    return Target("cluster", name, project, members, machine)
