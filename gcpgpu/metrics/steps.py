"""A job's numbers per step, from its own log: what `metrics report --job` draws for its training panels.

Cloud Monitoring holds the trainer's numbers aligned to a minute (the reporter's points), one point
for a run of a few hundred fast steps; the job's log holds every step it printed. Read with the same
filter `job logs` uses (route.log_filter), the lines that carry a step are:

    the bundled trainer's   step     39 | loss 6.1234 | lr 1.00e-03 | 9.1k tok/s/gpu | mfu 41.0% | 39.2 ms | data 0.4% | ...
    a user's command's      step 10 loss=2.31 lr=0.001 / Step 10/100, loss: 2.31 / {"step": 10, "loss": 2.31}

A user's lines give each name=number (or "name: number", or "name number") they carry; the names on at
least half of them are drawn. Where several nodes print steps (a user's command on every rank), the
node that printed the most is read; a step printed again after a recovery is drawn where it was run again.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from gcpgpu.jobs.steplines import trainer_values, user_values
from gcpgpu.times import parse_timestamp

MAX_USER_SERIES = 6  # of a user's command's numbers, at most this many panels

# The trainer's fields: key -> (title, unit). Step time is in ms here; the report shows seconds where steps are long.
TRAINER_FIELDS = {
    "loss": ("loss", ""),
    "tokens_per_s_per_gpu": ("training throughput", "tokens/s per GPU"),
    "mfu_pct": ("model FLOPs utilization", "%"),
    "step_time_ms": ("step time", "ms"),
    "data_wait_pct": ("data-wait share", "%"),
}


@dataclass
class Steps:
    """Per step: when it was logged (epoch seconds), its number and its values by key."""

    points: list[tuple[float, int, dict[str, float]]] = field(default_factory=list)
    fields: dict[str, tuple[str, str]] = field(default_factory=dict)  # key -> (title, unit), in drawing order

    def series(self, key: str) -> list[tuple[int, float]]:
        """(step, value) of one key, in the order logged."""
        return [(step, values[key]) for _t, step, values in self.points if key in values]


def parse(lines: Iterable[tuple[float | None, str, str]]) -> Steps:
    """The steps in a job's log, given as (time, writer, text) in time order: the trainer's own lines
    where there are any, else a user's command's lines that carry a step (see the module's docstring)."""
    trainer: list[tuple[float, int, dict[str, float]]] = []
    user: dict[str, list[tuple[float, int, dict[str, float]]]] = {}
    for t, where, text in lines:
        if t is None:
            continue
        if (got := trainer_values(text)) is not None:
            trainer.append((t, *got))
        elif (got := user_values(text)) is not None:
            user.setdefault(where, []).append((t, *got))
    if trainer:
        seen = {k for _t, _s, values in trainer for k in values}
        return Steps(trainer, {k: v for k, v in TRAINER_FIELDS.items() if k in seen})
    if not user:
        return Steps()
    points = max(user.values(), key=len)
    counts: dict[str, int] = {}
    for _t, _s, values in points:
        for key in values:
            counts[key] = counts.get(key, 0) + 1
    keys = [k for k, n in counts.items() if n * 2 >= len(points)][:MAX_USER_SERIES]
    return Steps(points, {k: (k, "") for k in keys})


def read(clients: Any, project: str, jid: Any) -> Steps:
    """The job's steps from its log (one entries.list read, every page)."""
    from gcpgpu.jobs import logs, route

    entries = logs.entries(clients, project, route.log_filter(project, jid))
    return parse((parse_timestamp(e.get("timestamp")), logs.tag(e), logs.message(e)) for e in entries)
