"""What `job status` shows of a job besides its state: a failed job's cause from its log, a cluster job's
cost so far and, when it was recovered, the steps each recovery ran again, and every job's goodput, with
its dollars per million tokens (steplines.tokens_trained, at its COST SO FAR) and what each lost part cost
(goodput.lost_usd, at its node price)."""

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
    """The job's state as `job status` shows it: a cluster job's with its cost so far, a failed job's with
    its cause, and every job's goodput with, for each recovery, the steps it ran again (one log read)."""
    state = route.status(clients, project, jid)
    if state.target == "cluster":
        from .cluster.spent import with_spent

        state = with_spent(clients, project, state)
    else:  # Vertex: its uptime and node-hours (its price is Vertex AI's own: not in the catalog yet)
        from gcpgpu.gcp import clock

        from .vertex import with_spent as vertex_spent

        state = vertex_spent(state, clock.now())
    return with_goodput(clients, project, with_cause(clients, project, state))


def with_goodput(clients: Clients, project: str, state: JobState) -> JobState:
    """`state` with its goodput (jobs/goodput.py) and its history's steps redone, both from goodput.redone():
    the retry table and the goodput's redone part count the same steps. A log that cannot be read leaves
    them out (None)."""
    from gcpgpu.gcp import clock

    from . import goodput, ids

    try:
        read = goodput.entries(clients, project, route.log_filter(project, ids.parse(state.id)))
    except CloudError:
        read = None
    tl = None if read is None else goodput.timeline(state, read, clock.now())
    if state.history:
        redos = goodput.redone(tl) if tl is not None else []
        history = []
        for k, h in enumerate(state.history):  # the table shows a range where the log's cadence hides the end
            r = redos[k] if k < len(redos) else goodput.Redo(h.get("last_step"), None, None, None)
            h = {**h, "last_step": h.get("last_step") if r.last_step is None else r.last_step,
                 "resumed_at": r.resumed_at, "steps_redone": r.steps, "steps_redone_max": r.steps_max}
            h["kind"] = h.get("kind") or "recovery"
            h["node"] = h.get("node") or ", ".join(h.get("lost") or [])
            h["redone"] = r.steps if r.steps == r.steps_max else f"{r.steps}-{r.steps_max}"
            history.append(h)
        state = replace(state, history=history, steps_redone=sum(h["steps_redone"] or 0 for h in history),
                        steps_redone_max=sum(h["steps_redone_max"] or 0 for h in history))
    if tl is None:
        return state
    from . import steplines

    got = goodput.split(tl)
    tokens = steplines.tokens_trained(tl.lines, gpus_of(state))
    cost, price = (state.spent.cost_usd, state.spent.price_per_hour) if state.spent else (None, None)
    return replace(state, goodput=got, tokens=tokens,
                   usd_per_million_tokens=round(cost / (tokens / 1e6), 2) if cost is not None and tokens else None,
                   goodput_lost_usd=goodput.lost_usd(got, price))


def gpus_of(state: JobState) -> int:
    """The job's GPUs in all: its nodes x its machine's GPUs (the catalog's; 0 when it is not there)."""
    from gcpgpu import catalog

    try:
        per = catalog.get_machine_type(str(state.machine_type or "")).gpu_count
    except Exception:  # a machine type the catalog does not know
        return 0
    return per * max(int(state.nnodes or 0) if state.target == "cluster" else int(state.nodes or 0), 1)
