"""What `job status` shows of a job besides its state: a failed job's cause from its log, a cluster job's
cost so far and, when it was recovered, the steps each recovery ran again, and every job's goodput."""

from __future__ import annotations

from dataclasses import replace

from gcpgpu.errors import CloudError
from gcpgpu.gcp.clients import Clients

from . import route
from .ids import JobId
from .state import CAUSE_LOG, FAILED, JobState


def with_cause(clients: Clients, project: str, state: JobState) -> JobState:
    """A FAILED job's state with `cause`: the first error line its program printed (one log read), which
    Vertex's or torchrun's own message ('exited with a non-zero status', ChildFailedError) leaves out.
    The follower's verdict (stalled) stands; a log that cannot be read leaves the cause unknown (None)."""
    if state.state != FAILED or state.cause:
        return state
    from . import ids
    from . import logs as job_logs

    jid = ids.parse(state.id)
    flt = route.log_filter(project, jid)
    began = (state.history[-1].get("delivered") or state.history[-1].get("at")) if state.history else None
    if began:  # the failing attempt's own lines: an earlier attempt's stop (its SIGTERM) is not why this one failed
        flt = f'{flt} AND timestamp>="{began}"'
    try:
        cause = job_logs.failure_cause(clients, project, flt)
    except CloudError:  # no permission on the log, say: the state alone still answers
        cause = None
    if not (cause or "").startswith(job_logs.KILLED):
        # A node whose container itself was killed left no report in the log; the peers' errors it set off did.
        cause = job_logs.killed_node(state.per_node) or cause
    return replace(state, cause=cause, cause_from=CAUSE_LOG)


def detail(clients: Clients, project: str, jid: JobId) -> JobState:
    """The job's state as `job status` shows it: a cluster job's with its cost so far and its history's
    steps redone (read from the trainer's log lines), and a failed job's with its cause."""
    state = route.status(clients, project, jid)
    if state.target == "cluster":
        from .cluster.spent import with_spent

        state = with_spent(clients, project, state)
    if state.history:
        from .cluster.recover import steps_redone

        history = steps_redone(clients, project, jid, state.history)
        for h in history:  # the table shows a range where the trainer's log cadence hides the end
            h["kind"] = h.get("kind") or "recovery"
            h["node"] = h.get("node") or ", ".join(h.get("lost") or [])
            h["redone"] = h["steps_redone"] if h["steps_redone"] == h["steps_redone_max"] else \
                f"{h['steps_redone']}-{h['steps_redone_max']}"
        state = replace(state, history=history, steps_redone=sum(h["steps_redone"] or 0 for h in history),
                        steps_redone_max=sum(h["steps_redone_max"] or 0 for h in history))
    return with_goodput(clients, project, with_cause(clients, project, state))


def with_goodput(clients: Clients, project: str, state: JobState) -> JobState:
    """`state` with its goodput (jobs/goodput.py); a log that cannot be read leaves it out (None)."""
    from gcpgpu.gcp import clock

    from . import goodput, ids

    try:
        flt = route.log_filter(project, ids.parse(state.id))
        return replace(state, goodput=goodput.of_job(clients, project, state, clock.now(), flt))
    except CloudError:
        return state
