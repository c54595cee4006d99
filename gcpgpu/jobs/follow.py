"""Following a job to its end from here (`job follow`, `job submit --wait`, `job cancel --wait`).

watch() polls the job's state (route.status) until it is final: all a Vertex AI job needs, since
Vertex runs and restarts its own workers. A target with a follower of its own (a cluster's: its backend
follows it, jobs/cluster/backend.py) is followed by it: on a cluster without a scheduler this command
leads the job's followers when nobody does, recovering it from lost nodes, else watches the leader; a
Slurm cluster's job is watched through its record (Slurm requeues it itself). Either way a job that ends
FAILED comes back with the cause its log gives.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Callable, Sequence

from gcpgpu.cluster.session import Reporter
from gcpgpu.errors import CloudError, UsageProblem
from gcpgpu.gcp.clients import Clients

from . import route
from .detail import with_cause
from .ids import JobId
from .logs import Say
from .state import JobState, is_final

OnState = Callable[[JobState], None]


def watch(clients: Clients, project: str, jid: JobId, on_state: OnState, poll_s: float) -> JobState:
    """Poll the job until its state is final, calling `on_state` on each change; its final state."""
    last = None
    while True:
        state = route.status(clients, project, jid)
        if state.state != last:
            last = state.state
            on_state(state)
        if is_final(state.state):
            from gcpgpu.gcp import clock

            from . import goodput

            # Vertex's end: nobody else writes its goodput
            goodput.publish(clients, project, state, clock.now(), route.log_filter(project, jid))
            return with_cause(clients, project, state)
        time.sleep(poll_s)


def check(jid: JobId, recover: int | None) -> None:
    """Refuse --recover for a job whose target runs and restarts its workers itself (no follower here)."""
    if recover is not None and route.backend(jid.target).follow is None:
        raise UsageProblem("--recover applies to cluster jobs; Vertex AI restarts a job's workers itself")


def follow(clients: Clients, project: str, jid: JobId, *, recover: int | None, on_state: OnState,
           say: Callable[[str], None], poll_s: float, reporter: Reporter | None = None,
           progress: Say | None = None, progress_poll_s: float = 5.0,
           notify: Sequence[str] = (), name: str | None = None) -> JobState:
    """Follow the job to its end: with its target's follower where it has one (a cluster job's recovers it
    from lost nodes at most `recover` times in all; None: what its record says, else the cluster's
    default; `reporter` shows a recovery's steps), else by watching its state. `progress` is told
    (line, the time its entry was written) the trainer's progress lines from the job's log as they come, or
    every line of a user's command after its rank (logs.Progress, read as `job logs --follow` reads it), the
    last of them before the final state is. `notify`: webhooks this process tells of the
    job `name`'s changes where nothing else follows it (a cluster's follower tells those its record holds)."""
    check(jid, recover)
    lines = None
    if progress is not None:
        from .logs import Progress

        lines = Progress(clients, project, route.log_filter(project, jid), progress, poll_s=progress_poll_s,
                         user=lambda: _runs_user_command(clients, project, jid), label=rank_labels(clients, project, jid))

    def changed(state: JobState) -> None:
        if lines is not None and state.final:
            lines.drain()
        on_state(state)

    with lines or contextlib.nullcontext():
        follower = route.backend(jid.target).follow
        if follower is not None:
            return with_cause(clients, project, follower(clients, project, jid, recover=recover, on_state=changed,
                                                         say=say, poll_s=poll_s, reporter=reporter))
        from .notify import state_changes

        with state_changes(list(notify), job=str(jid), name=name) as tell:  # the job's service runs it: tell here

            def both(state: JobState) -> None:
                changed(state)
                tell(state)

            return watch(clients, project, jid, both if notify else changed, poll_s)


def _runs_user_command(clients: Clients, project: str, jid: JobId) -> bool:
    """Whether the job runs a user's own command; a job that cannot be read is taken as the trainer's."""
    try:
        return route.backend(jid.target).runs_user_command(clients, project, jid)
    except CloudError:
        return False


# Vertex AI's writers: pool 0 holds the chief (rank 0), pool 1 the rest (rank 1 on), as jobs/vertex.py asks.
_VERTEX_TASK = re.compile(r"^workerpool([01])-(\d+)$")


def rank_labels(clients: Clients, project: str, jid: JobId) -> Callable[[str], str]:
    """What names a log entry's writer (a Vertex task, a cluster node) by its rank: 'rank N', or the writer
    itself where the job does not say (the job's nodes are read once for each writer not known yet)."""
    known: dict[str, str] = {}

    def label(where: str) -> str:
        if where not in known:
            if m := _VERTEX_TASK.match(where):
                known[where] = f"rank {int(m.group(2)) + int(m.group(1))}"
            elif jid.target != "vertex":
                try:
                    rows = route.status(clients, project, jid).per_node
                except CloudError:
                    rows = []
                known.update({r["node"]: f"rank {r['rank']}" for r in rows if int(r.get("rank", -1)) >= 0})
            known.setdefault(where, where)
        return known[where]

    return label
