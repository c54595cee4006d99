"""A job's time in dollars: what each of goodput's lost parts cost, and dollars per million tokens trained.

Both price node-time at the job's own node price, the one its COST SO FAR uses (jobs/cluster/spent.py:
the catalog's, cluster/cost.py), so the figures move with it. Goodput's parts are node-seconds
(jobs/goodput.py), so a part's dollars are its node-seconds x the price per node-hour / 3600.

Tokens trained come from the job's step lines (jobs/steplines.py), as the writer of the steps logged them:

    the bundled trainer   each step line's "tok/s/gpu" x its "ms" per step x the job's GPUs is one step's
                          tokens (the median over the lines); x the steps trained (its last step + 1: a
                          step a recovery ran again is paid for twice and counted once)
    a user's command      a `tokens` value on its step lines (tokens trained so far, e.g. "step 10 loss=2.3
                          tokens=40960"): the largest one

Nothing else tells the tokens: a job whose lines carry neither has no dollars per million tokens (None).
"""

from __future__ import annotations

import statistics
from typing import Any

from . import steplines


def lost_usd(goodput: dict[str, Any] | None, price_per_hour: float | None) -> dict[str, float] | None:
    """Each lost part's dollars (rounded to the cent), from goodput's node-seconds; None without a price."""
    if not goodput or price_per_hour is None:
        return None
    return {part: round(s * price_per_hour / 3600, 2) for part, s in (goodput.get("lost_s") or {}).items()}


def tokens_trained(lines: list[tuple[float, str]], gpus: int) -> float | None:
    """Tokens the job's steps trained, from the step lines of its writer (`lines`: (time, text)); None
    when they do not say."""
    per_step: list[float] = []
    last = None
    told = None
    for _t, text in lines:
        got = steplines.trainer_values(text)
        if got is not None:
            step, values = got
            last = step if last is None else max(last, step)
            rate, ms = values.get("tokens_per_s_per_gpu"), values.get("step_time_ms")
            if rate and ms and gpus > 0:
                per_step.append(rate * ms / 1e3 * gpus)
            continue
        mine = steplines.user_values(text)
        if mine is not None and mine[1].get("tokens"):
            told = max(told or 0.0, mine[1]["tokens"])
    if told:
        return told
    if per_step and last is not None:
        return statistics.median(per_step) * (last + 1)
    return None


def per_million_tokens(cost_usd: float | None, tokens: float | None) -> float | None:
    """Dollars per million tokens trained, to the cent; None when either is unknown or nothing trained."""
    if cost_usd is None or not tokens:
        return None
    return round(cost_usd / (tokens / 1e6), 2)


def gpus_of(state: Any) -> int:
    """The job's GPUs in all: its nodes x its machine's GPUs (the catalog's; 0 when it is not there)."""
    from gcpgpu import catalog

    try:
        per = catalog.get_machine_type(str(state.machine_type or "")).gpu_count
    except Exception:  # a machine type the catalog does not know
        return 0
    nodes = int(state.nnodes or 0) if state.target == "cluster" else int(state.nodes or 0)
    return per * max(nodes, 1)
