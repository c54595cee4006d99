"""What `--cluster NAME` or `--job ID` means to Cloud Monitoring: which resources, filters and groupings.

A cluster is its VMs, found once by label with one Compute list call (their instance ids are
what every Compute and Ops Agent series carries); a Vertex AI job is a `cloudml_job` resource
with label job_id, one series per task (replica). Names are checked before any API call.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gcpgpu.errors import UsageProblem

from .sources import NAMESPACE, Metric

if TYPE_CHECKING:
    from gcpgpu.catalog import MachineType
    from gcpgpu.gcp.clients import Clients


def check_cluster_name(name: str) -> str:
    """A cluster name as `gcpgpu cluster up` allows it (the rule lives in cluster/names.py)."""
    from gcpgpu.cluster.names import check_cluster_name as check

    return check(name, "--cluster")


def pick(cluster: str | None, job: str | None) -> tuple[str, str]:
    """('cluster', NAME) or ('job', VERTEX ID) from the two options, exactly one of which must be given.

    --job takes what `gcpgpu job submit` prints: vertex:LOCATION:ID or the CustomJob's name (a
    Vertex job), or cluster:NAME:JOB (a job on a cluster's VMs: those VMs are what to watch).
    """
    if bool(cluster) == bool(job):
        raise UsageProblem("give exactly one of --cluster NAME or --job JOB")
    if cluster:
        return "cluster", check_cluster_name(cluster)
    from gcpgpu.jobs import ids

    text = (job or "").strip()
    if ids.VERTEX_NUMBER.match(text):
        return "job", ids.check_vertex_number(text)

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
        if metric.source in ("trainer", "goodput", "nics"):  # written by gcpgpu itself, on a generic_task
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
        if metric.per_nic:
            return ["metric.labels.node", "metric.labels.role", *(["metric.labels.nic"] if metric.by_nic else [])]
        fields = [f"resource.labels.{self.key_label}"]
        if per_gpu and metric.per_gpu:
            fields.append("metric.labels.gpu_number")
        return fields

    def key_of(self, name: str) -> str:
        """The member key (instance id) of the node named `name` (the NIC metrics name their node); the name
        itself when no member has it."""
        index = self.__dict__.get("_names")
        if index is None or index[0] is not self.members or index[2] != len(self.members):
            index = (self.members, {m.name: m.key for m in self.members}, len(self.members))
            self.__dict__["_names"] = index
        return index[1].get(name, name)

    def member(self, key: str) -> Member:
        # By an index, not a scan: a 1,024-node refresh looks up ~11,000 series' members, and the
        # scan was ~0.4 s of each (profiled). Rebuilt when the members list is replaced or grows.
        index = self.__dict__.get("_index")
        if index is None or index[0] is not self.members or index[2] != len(self.members):
            by_key: dict[str, Member] = {}
            for m in self.members:
                by_key.setdefault(m.key, m)
            index = (self.members, by_key, len(self.members))
            self.__dict__["_index"] = index
        if key in index[1]:
            return index[1][key]
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
    from gcpgpu.cluster.observe import brief_nodes

    # Only what a member is made of, not whole VMs: a VM is ~17 KB (mostly its startup script), and
    # reading 1,024 of them made a --once at 1,024 nodes ~2x the time of one at 8 (issue 27).
    nodes = brief_nodes(clients, project, name)
    if not nodes:
        from gcpgpu.cluster.unknown import missing

        raise missing(clients, project, name, " with nodes")
    members = [Member(key=n["id"], name=n["name"], rank=n["rank"], machine_type=n["machine_type"], zone=n["zone"])
               for n in nodes]
    machine = machine_types().get(members[0].machine_type or "")
    return Target("cluster", name, project, members, machine)
