"""A job's state as `job status` and the followers read it (cluster jobs: with history and cost so far)."""

from __future__ import annotations

from gcpgpu.settings import Settings


def status_of(settings: Settings, job_id: str) -> dict:
    from gcpgpu.jobs import ids

    jid = ids.parse(job_id)
    if jid.target == "vertex":
        from gcpgpu.jobs import vertex

        state = vertex.get(settings.clients, settings.project, jid)
    else:
        from gcpgpu.jobs import follower

        state = follower.job_status(settings.clients, settings.project, jid)  # RECOVERING while one is unfinished
    return state


def status_with_history(settings: Settings, job_id: str) -> dict:
    """A job's status; for a cluster job that was recovered, its history with the steps each recovery redid."""
    state = status_of(settings, job_id)
    if state["target"] == "cluster":
        from gcpgpu.jobs.spent import add_spent

        add_spent(settings.clients, settings.project, state)
    if state.get("history"):
        from gcpgpu.jobs import ids
        from gcpgpu.jobs.recover import steps_redone

        state["history"] = steps_redone(settings.clients, settings.project, ids.parse(job_id), state["history"])
        state["steps_redone"] = sum(h["steps_redone"] or 0 for h in state["history"])
        state["steps_redone_max"] = sum(h["steps_redone_max"] or 0 for h in state["history"])
        for h in state["history"]:  # the table shows a range where the trainer's log cadence hides the end
            h["kind"] = h.get("kind") or "recovery"
            h["node"] = h.get("node") or ", ".join(h.get("lost") or [])
            h["redone"] = h["steps_redone"] if h["steps_redone"] == h["steps_redone_max"] else \
                f"{h['steps_redone']}-{h['steps_redone_max']}"
    return state
