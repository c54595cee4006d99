"""Job ids say where a job lives, so status, logs and cancel need nothing but the id.

    vertex:LOCATION:ID                                   a Vertex AI custom job (the short form printed)
    projects/P/locations/LOCATION/customJobs/ID          the same, as the API names it
    cluster:CLUSTER:JOB                                  a job on a gcpgpu cluster's VMs
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gcpgpu.cluster.names import NAME_PATTERN
from gcpgpu.errors import UsageProblem

_VERTEX_SHORT = re.compile(r"^vertex:([a-z]+-[a-z]+\d+):(\d{1,20})$")
_VERTEX_FULL = re.compile(r"^projects/([^/]+)/locations/([a-z]+-[a-z]+\d+)/customJobs/(\d{1,20})$")
# A cluster job's id: what `job submit` makes (NAME-xxxxxx, jobs/cluster/deliver.py), an attempt's run key
# (ID-rN), or slurm-N (a job sbatch'ed by hand on a Slurm cluster's node).
JOB_PATTERN = r"[a-z](?:[-a-z0-9]{0,62}[a-z0-9])?"
_JOB = re.compile(rf"^{JOB_PATTERN}$")
_CLUSTER = re.compile(rf"^cluster:({NAME_PATTERN}):({JOB_PATTERN})$")
# A Vertex AI custom job's number alone, or inside its full name (metrics --job, the reporter's --job).
VERTEX_NUMBER = re.compile(r"^(?:projects/[^/]+/locations/[^/]+/customJobs/)?(\d{1,25})$")


@dataclass(frozen=True)
class JobId:
    target: str  # vertex | cluster
    location: str | None = None  # vertex
    job: str = ""  # Vertex numeric id, or the cluster job's id
    project: str | None = None  # vertex, when the full name gave one
    cluster: str | None = None

    def __str__(self) -> str:
        if self.target == "vertex":
            return f"vertex:{self.location}:{self.job}"
        return f"cluster:{self.cluster}:{self.job}"

    def resource_name(self, project: str) -> str:
        """The CustomJob's API name (Vertex jobs only)."""
        return f"projects/{self.project or project}/locations/{self.location}/customJobs/{self.job}"


def parse(text: str) -> JobId:
    """A job id as printed by `job submit` or `job list`; UsageProblem saying the forms otherwise."""
    value = text.strip()
    if m := _VERTEX_SHORT.match(value):
        return JobId("vertex", location=m.group(1), job=m.group(2))
    if m := _VERTEX_FULL.match(value):
        return JobId("vertex", location=m.group(2), job=m.group(3), project=m.group(1))
    if m := _CLUSTER.match(value):
        return JobId("cluster", cluster=m.group(1), job=m.group(2))
    raise UsageProblem(f"JOB {text!r} is not a job id: use what 'gcpgpu job submit' printed, e.g. "
                       "vertex:us-central1:1234567890, projects/P/locations/L/customJobs/ID or cluster:NAME:JOB")


def is_job(value: object) -> bool:
    """Whether `value` is a cluster job's id as gcpgpu makes them: the only ids a record may carry, since a
    record's id becomes file names and a batch job's name on a Slurm cluster's node 0."""
    return isinstance(value, str) and _JOB.match(value) is not None


def check_vertex_number(value: str) -> str:
    """A Vertex AI custom job's numeric id, from the id or its full resource name."""
    match = VERTEX_NUMBER.match((value or "").strip())
    if not match:
        raise UsageProblem(f"--job {value!r} is not a Vertex AI custom job: give its numeric id or "
                           "projects/PROJECT/locations/REGION/customJobs/ID")
    return match.group(1)


def vertex(name: str) -> JobId:
    """The id of a CustomJob from its API name."""
    m = _VERTEX_FULL.match(name)
    if not m:
        raise ValueError(name)
    return JobId("vertex", location=m.group(2), job=m.group(3))
