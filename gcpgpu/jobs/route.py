"""The one routing point for the verbs every job target answers: status, cancel, logs and list (and
follow, for a target with a follower of its own: jobs/follow.py).

A job's id says where the job lives (ids.py: vertex:LOCATION:ID, cluster:CLUSTER:JOB); each verb here
hands the call to that target's backend, as SkyPilot's sky/provision hands each verb to the provider's
module. The CLI, the metrics' job span and anything else that acts on a job by its id come through here,
so a new target is one more entry in BACKENDS and its module.

    vertex    jobs/vertex.py: Vertex AI's JobService
    cluster   jobs/cluster/backend.py: a gcpgpu cluster's jobs, each handed on to the backend of the
              cluster's scheduler (gcpgpu's job agent on each node, or the cluster's Slurm)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from gcpgpu.errors import UsageProblem
from gcpgpu.gcp.clients import Clients

from .ids import JobId
from .state import JobState


@dataclass(frozen=True)
class Backend:
    """A target's verbs, all with the same shape: (clients, project, job id) in, a JobState out."""

    status: Callable[[Clients, str, JobId], JobState]
    cancel: Callable[[Clients, str, JobId], JobState]  # asks, and returns the state right after asking
    log_filter: Callable[[str, JobId], str]  # Cloud Logging's filter for the job's entries
    # Rows of `job list` (newest first): (clients, project, region, state or None, at most this many)
    list_jobs: Callable[[Clients, str, str | None, str | None, int], list[dict]]
    # Whether the job runs a user's own command (not the bundled trainer): following it shows all its lines.
    # A target that cannot tell: the trainer's progress lines only.
    runs_user_command: Callable[[Clients, str, JobId], bool] = lambda _clients, _project, _jid: False
    # Follows the job to its end from here, where the target has a follower of its own (follow.py);
    # None: its service runs and restarts the job's workers, and watching its state is enough.
    follow: Callable[..., JobState] | None = None


def _vertex() -> Backend:
    from . import vertex

    def listed(clients: Clients, project: str, region: str | None, state: str | None, limit: int) -> list[dict]:
        return vertex.list_jobs(clients, project, str(region), state, limit)

    return Backend(status=vertex.get, cancel=vertex.cancel, log_filter=lambda _project, jid: vertex.log_filter(jid),
                   list_jobs=listed, runs_user_command=vertex.runs_user_command)


def _cluster() -> Backend:
    from .cluster import backend

    def listed(clients: Clients, project: str, region: str | None, state: str | None, limit: int) -> list[dict]:
        # A cluster's last jobs (jobs/cluster/store.py's KEEP): the rows are few, and the state is filtered here.
        return [r for r in backend.list_jobs(clients, project) if not state or r["state"] == state]

    return Backend(status=backend.status, cancel=backend.cancel, log_filter=backend.log_filter,
                   list_jobs=listed, runs_user_command=backend.runs_user_command, follow=backend.follow)


# Imported when first used: `gcpgpu --help` loads no backend.
BACKENDS: dict[str, Callable[[], Backend]] = {"vertex": _vertex, "cluster": _cluster}


def backend(target: str) -> Backend:
    """The verbs of `target`; one line naming the targets there are otherwise."""
    make = BACKENDS.get(target)
    if make is None:
        raise UsageProblem(f"job target {target!r} is not one gcpgpu runs jobs on: use one of {', '.join(BACKENDS)}")
    return make()


def status(clients: Clients, project: str, jid: JobId) -> JobState:
    """The job's state as its target reports it."""
    return backend(jid.target).status(clients, project, jid)


def cancel(clients: Clients, project: str, jid: JobId) -> JobState:
    """Ask the job's target to stop it; its state right after asking."""
    return backend(jid.target).cancel(clients, project, jid)


def log_filter(project: str, jid: JobId) -> str:
    """The Cloud Logging filter that picks the job's entries (jobs/logs.py reads them)."""
    return backend(jid.target).log_filter(project, jid)


def list_jobs(clients: Clients, project: str, *, only: str | None = None, region: str | None = None,
              state: str | None = None, limit: int = 50, say: Callable[[str], None] = lambda _line: None) -> list[dict]:
    """`job list`: each target's jobs (`only` one target), Vertex AI's first. Vertex AI lists a region's
    jobs: with none set, a Vertex-only list is one line and a whole list says it left them out."""
    rows: list[dict] = []
    for target in (only,) if only else tuple(BACKENDS):
        verbs = backend(target)
        if target == "vertex" and not region:
            if only:
                raise UsageProblem("no region set to list Vertex AI jobs of: pass --region REGION")
            say("note: no region set, so no Vertex AI jobs listed (pass --region REGION)")
            continue
        rows += verbs.list_jobs(clients, project, region, state, limit)
    return rows
