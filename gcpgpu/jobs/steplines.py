"""The lines of a job's log that say how far it got, as every reader of the log parses them: the
bundled trainer's step lines, a user's command's step lines (the pattern README "Goodput" documents),
where a resumed run started, and how long each checkpoint blocked the steps.

    the bundled trainer's   step     39 | loss 6.1234 | lr 1.00e-03 | 9.1k tok/s/gpu | mfu 41.0% | 39.2 ms | ...
    a user's command's      step 10 loss=2.31 lr=0.001 / Step 10/100, loss: 2.31 / {"step": 10, "loss": 2.31}
    a resume                resumed from gs://.../step_00000020 at step 20 / no checkpoint in DIR: starting from step 0
    a checkpoint            saved checkpoint PATH (async) in 1.20 s (...); steps blocked 0.031 s

metrics/steps.py draws the steps; jobs/goodput.py and jobs/cluster/recover.py count them.
"""

from __future__ import annotations

import re

# Prefixes a launcher may add to a worker's lines: "[rank0]: ", "[default0]:".
_PREFIX = re.compile(r"^(?:\[(?:rank|default)\d+\]:\s?)")
_TRAINER = re.compile(r"^step\s+(\d+) \| loss (\S+) \|")
_RATE = re.compile(r"^([\d.]+)([kM]?) tok/s/gpu$")
_STEP = re.compile(r"""^[{"']*\s*step["']?\s*[=:]?\s*(\d+)""", re.IGNORECASE)
_PAIR = re.compile(r"""([A-Za-z_][\w./-]*)["']?\s*(?:[=:]\s*|\s+)(-?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)(?![\w./])""")
RESUMED = re.compile(r"resumed from \S+ at step (\d+)|no checkpoint in .*: starting from step (0)")
_CKPT = re.compile(r"^saved checkpoint \S+ \((\w+)\) in [\d.]+ s.*; steps blocked ([\d.]+) s")


def trainer_values(text: str) -> tuple[int, dict[str, float]] | None:
    """(step, values) of the bundled trainer's step line, else None."""
    line = _PREFIX.sub("", text.strip())
    m = _TRAINER.match(line)
    if not m:
        return None
    values: dict[str, float] = {}
    _number(values, "loss", m.group(2))
    for part in (p.strip() for p in line.split(" | ")[2:]):
        if rate := _RATE.match(part):
            values["tokens_per_s_per_gpu"] = float(rate.group(1)) * {"": 1, "k": 1e3, "M": 1e6}[rate.group(2)]
        elif part.startswith("mfu ") and part.endswith("%"):
            _number(values, "mfu_pct", part[4:-1])
        elif part.endswith(" ms"):
            _number(values, "step_time_ms", part[:-3])
        elif part.startswith("data ") and part.endswith("%"):
            _number(values, "data_wait_pct", part[5:-1])
    return int(m.group(1)), values


def user_values(text: str) -> tuple[int, dict[str, float]] | None:
    """(step, values) of a line that starts with a step, with the name-number pairs after it, else None."""
    line = _PREFIX.sub("", text.strip())
    m = _STEP.match(line)
    if not m:
        return None
    values: dict[str, float] = {}
    for name, number in _PAIR.findall(line[m.end():]):
        if name.lower() != "step" and name.lower() not in values:
            _number(values, name.lower(), number)
    return int(m.group(1)), values


def _number(values: dict[str, float], key: str, text: str) -> None:
    try:
        values[key] = float(text)
    except ValueError:
        pass  # "n/a", a value the line left out


def resumed_at(text: str) -> int | None:
    """The step a resumed run starts from (0 for a fresh start), from the trainer's line saying so."""
    m = RESUMED.search(text)
    return None if m is None else int(m.group(1) or m.group(2))


def ckpt_blocked(text: str) -> float | None:
    """Seconds a checkpoint blocked the steps, from the trainer's line that says it is complete."""
    m = _CKPT.match(_PREFIX.sub("", text.strip()))
    return None if m is None else float(m.group(2))
