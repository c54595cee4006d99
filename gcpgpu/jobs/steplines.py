"""The lines of a job's log that say how far it got, as every reader of the log parses them: the
bundled trainer's step lines, a user's command's step lines (the pattern README "Goodput" documents),
where a resumed run started, and how long each checkpoint blocked the steps.

    the bundled trainer's   step     39 | loss 6.1234 | lr 1.00e-03 | 9.1k tok/s/gpu | mfu 41.0% | 39.2 ms | ...
    a user's command's      step 10 loss=2.31 lr=0.001 / Step 10/100, loss: 2.31 / {"step": 10, "loss": 2.31}
    a resume                resumed from gs://.../step_00000020 at step 20 / no checkpoint in DIR: starting from step 0
    a checkpoint            saved checkpoint PATH (async) in 1.20 s (...); steps blocked 0.031 s

    the trainer's summary   gcpgpu-train: median over 7 steps: 39.2 ms/step, ...

A step number has at most MAX_DIGITS digits and a value must be a finite number: a line with more (a
runaway counter, garbage) is not a step line and is ignored, so no line of a log can break a reader.
metrics/steps.py draws the steps; jobs/goodput.py and jobs/cluster/recover.py count them.
"""

from __future__ import annotations

import math
import re
import statistics

# Prefixes a launcher may add to a worker's lines: "[rank0]: ", "[default0]:".
_PREFIX = re.compile(r"^(?:\[(?:rank|default)\d+\]:\s?)")
MAX_DIGITS = 15  # a step number's digits at most (10^15 steps: beyond any run; exact as a float)
_N = rf"(\d{{1,{MAX_DIGITS}}})(?!\d)"
_TRAINER = re.compile(r"^step\s+" + _N + r" \| loss (\S+) \|")
_RATE = re.compile(r"^([\d.]+)([kM]?) tok/s/gpu$")
_STEP = re.compile(r"""^[{"']*\s*step["']?\s*[=:]?\s*""" + _N, re.IGNORECASE)
_PAIR = re.compile(r"""([A-Za-z_][\w./-]*)["']?\s*(?:[=:]\s*|\s+)(-?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)(?![\w./])""")
RESUMED = re.compile(r"resumed from \S+ at step " + _N + r"|no checkpoint in .*: starting from step (0)")
_CKPT = re.compile(r"^saved checkpoint \S+ \((\w+)\) in [\d.]+ s.*; steps blocked (\d{1,12}(?:\.\d{1,9})?) s")
_SUMMARY = re.compile(r": median over \d{1,12} steps: (\d{1,12}(?:\.\d{1,9})?) ms/step")


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
            _number(values, "tokens_per_s_per_gpu", rate.group(1))
            if "tokens_per_s_per_gpu" in values:
                values["tokens_per_s_per_gpu"] *= {"": 1, "k": 1e3, "M": 1e6}[rate.group(2)]
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
        value = float(text)
    except ValueError:
        return  # "n/a", a value the line left out
    if math.isfinite(value):  # 1e999 or 400 nines: no number a reader could use
        values[key] = value


def resumed_at(text: str) -> int | None:
    """The step a resumed run starts from (0 for a fresh start), from the trainer's line saying so."""
    m = RESUMED.search(text)
    return None if m is None else int(m.group(1) or m.group(2))


def ckpt_blocked(text: str) -> float | None:
    """Seconds a checkpoint blocked the steps, from the trainer's line that says it is complete."""
    m = _CKPT.match(_PREFIX.sub("", text.strip()))
    return None if m is None else float(m.group(2))


def summary_step_s(text: str) -> float | None:
    """Seconds per step (the median after warm-up) from the trainer's summary line, else None."""
    m = _SUMMARY.search(text)
    return None if m is None else float(m.group(1)) / 1e3


def tokens_trained(lines: list[tuple[float, str]], gpus: int) -> float | None:
    """Tokens a job's steps trained, from its writer's lines (`lines`: (time, text)); None when they do not say.

    The bundled trainer's: each step line's "tok/s/gpu" x its "ms" per step x the job's `gpus` is one step's
    tokens (their median), x its last step + 1 (a step a recovery ran again is paid twice, counted once).
    A user's command's: a `tokens` value on its step lines ("step 10 loss=2.3 tokens=40960": tokens trained so
    far), the largest one."""
    per_step: list[float] = []
    last = told = None
    for _t, text in lines:
        got = trainer_values(text)
        if got is not None:
            last = got[0] if last is None else max(last, got[0])
            rate, ms = got[1].get("tokens_per_s_per_gpu"), got[1].get("step_time_ms")
            if rate and ms and gpus > 0:
                per_step.append(rate * ms / 1e3 * gpus)
        elif (mine := user_values(text)) is not None and mine[1].get("tokens"):
            told = max(told or 0.0, mine[1]["tokens"])
    if told:
        return told
    return statistics.median(per_step) * (last + 1) if per_step and last is not None else None
