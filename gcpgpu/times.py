"""Durations and timestamps: the one grammar people write durations in, and the one reader of RFC 3339 times.

A duration is plain seconds ('3600') or one or more NUMBER UNIT parts ('90m', '2h', '1h30m', '1.5d'),
units s, m, h, d and w, case and spaces ignored; a spec file may also give a number. Every caller
names its own bounds: a duration is never unbounded, so '9' * 400 + 'd' or a spec file's .inf is one
line naming the option, never an overflow.
"""

from __future__ import annotations

import calendar
import math
import re
import time
from typing import Any

from gcpgpu.errors import UsageProblem
from gcpgpu.specfile import shown

UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
NOT_A_DURATION = "is not a duration; write e.g. 90m, 2h, 1h30m, 1d or 3600s"
_PLAIN = re.compile(r"\d+(?:\.\d+)?")
_PARTS = re.compile(r"(?:\d+(?:\.\d+)?[smhdw])+")
_PART = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")
# RFC 3339 as Google's APIs write it ('Z' or an offset, any fraction); no offset is read as UTC.
_TIMESTAMP = re.compile(r"(\d{4}-\d\d-\d\d)[Tt ](\d\d:\d\d:\d\d)(\.\d+)?([Zz]|[+-]\d\d:\d\d)?")


def _seconds(value: Any) -> float | None:
    """The seconds a duration stands for (inf for a number too large for a float), or None if not one."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return float(value) if abs(value) < 2**1000 else math.inf if value > 0 else -math.inf
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if not isinstance(value, str):
        return None
    text = "".join(value.split()).lower()
    if _PLAIN.fullmatch(text):
        return float(text)
    if not _PARTS.fullmatch(text):
        return None
    return sum(float(number) * UNIT_S[unit] for number, unit in _PART.findall(text))


def _shown(value: Any) -> str:
    # A spec file's int may be thousands of digits, more than Python turns into text by default.
    if isinstance(value, int) and abs(value) >= 10**80:
        return "(a number of more than 80 digits)"
    return shown(value)


def parse_duration(value: Any, where: str, *, at_most: float, at_least: float = 0,
                   too_short: str | None = None, too_long: str | None = None, malformed: str | None = None) -> int:
    """A duration (see above) -> whole seconds in [at_least, at_most]; a one-line UsageProblem naming
    `where` otherwise. `too_short`, `too_long` and `malformed` replace the wording of each refusal."""
    seconds = _seconds(value)
    if seconds is None:
        raise UsageProblem(f"{where} {_shown(value)} {malformed or NOT_A_DURATION}")
    if not at_least <= seconds <= at_most:
        default = f"out of range: give between {format_duration(at_least)} and {format_duration(at_most)}"
        why = (too_short if seconds < at_least else too_long) or default
        raise UsageProblem(f"{where} {_shown(value)} is {why}")
    return int(seconds)


def format_duration(seconds: float) -> str:
    """3h05m, 2d4h, 45m, 30s: the two largest units, for tables."""
    s = max(int(seconds), 0)
    days, rest = divmod(s, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d{hours}h" if hours else f"{days}d"
    if hours:
        return f"{hours}h{minutes:02d}m" if minutes else f"{hours}h"
    if minutes:
        return f"{minutes}m" if not secs else f"{minutes}m{secs:02d}s"
    return f"{secs}s"


def parse_timestamp(text: str | None) -> float | None:
    """Seconds since the epoch from an RFC 3339 time; None for an empty or malformed one (or no such date)."""
    if not text or not isinstance(text, str):
        return None
    m = _TIMESTAMP.fullmatch(text.strip())
    if not m:
        return None
    try:
        base = calendar.timegm(time.strptime(f"{m.group(1)}T{m.group(2)}", "%Y-%m-%dT%H:%M:%S"))
    except ValueError:  # 2026-02-30, 25:00:00
        return None
    tz = (m.group(4) or "Z").upper()
    offset = 0 if tz == "Z" else (1 if tz[0] == "+" else -1) * (int(tz[1:3]) * 3600 + int(tz[4:6]) * 60)
    return base + float(m.group(3) or 0) - offset


def format_timestamp(ts: float) -> str:
    """Epoch seconds -> RFC 3339 in UTC, to the second (2026-12-01T08:00:00Z)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))
