"""Cloud Logging's entries, and its query language over them.

Only local runs log: Vertex AI writes each replica's output to Cloud Logging (resource ml_job), the cluster
agent's containers write theirs through Docker's gcplogs driver (resource gce_instance), and the emulated
VMs' own programs (the node agents, the Slurm daemons) as logs of their VM. Each run says how a line it
captured becomes an entry (its `describe`), so the entries are read from the runner's runs when asked; this
adds the fields the service stamps (timestamp, receiveTimestamp, insertId) and answers a filter in Logging's
query language: comparisons (= != < <= > >= :) over entry fields, severities ordered, times as RFC 3339,
with AND/OR/NOT from the grammar Google's newer APIs share (fakes/filters.py).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from .. import filters
from ..core import ApiError, parse_rfc3339

if TYPE_CHECKING:
    from ..host.runner import Runner

SEVERITIES = ["DEFAULT", "DEBUG", "INFO", "NOTICE", "WARNING", "ERROR", "CRITICAL", "ALERT", "EMERGENCY"]


def _timestamp(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts)) + f".{int((ts % 1) * 1e9):09d}Z"


class LoggingBackend:
    """entries.list's state: every local run's captured lines, as the entries the real service would hold."""

    def __init__(self, runner: Runner) -> None:
        self.runner = runner

    def entries(self, projects: set[str], pred: filters.Predicate, descending: bool = False) -> list[dict]:
        """The entries of `projects` that `pred` (a `query`) keeps, by timestamp, then in the order written."""
        found = []
        for run in self.runner.all_runs():
            if run.describe is None:
                continue
            for line in run.log_lines():
                entry = run.describe(line)
                project = entry["logName"].split("/")[1]
                if project not in projects:
                    continue
                entry.update(timestamp=_timestamp(line.time), receiveTimestamp=_timestamp(line.time),
                             insertId=f"{line.seq:016d}")
                if pred(entry):
                    found.append((line.time, line.seq, entry))
        found.sort(key=lambda e: (e[0], e[1]), reverse=descending)
        return [entry for _t, _s, entry in found]


def query(text: str) -> filters.Predicate:
    """A predicate over entries for Logging filter `text` (empty: every entry); ApiError 400 when it does not parse."""
    try:
        return filters.parse(text, _compare)
    except filters.FilterError as e:
        raise _bad(str(e)) from None


def _lookup(entry: Any, path: list[str]) -> Any:
    value = entry
    for part in path:
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


def _compare(path: list[str], op: str, value: str) -> filters.Predicate:
    if path == ["timestamp"] or path == ["receiveTimestamp"]:
        try:
            bound = parse_rfc3339(value)
        except ValueError:
            raise _bad(f"{path[0]} needs an RFC 3339 time, not {value!r}") from None

        def by_time(entry: dict) -> bool:
            got = parse_rfc3339(_lookup(entry, path))
            return {"=": got == bound, "!=": got != bound, "<": got < bound, "<=": got <= bound,
                    ">": got > bound, ">=": got >= bound, ":": got == bound}[op]

        return by_time
    if path == ["severity"] and op in ("<", "<=", ">", ">="):
        order = SEVERITIES
        rank = order.index(value.upper()) if value.upper() in order else 0
        return lambda e: {"<": order.index(e.get("severity", "DEFAULT")) < rank,
                          "<=": order.index(e.get("severity", "DEFAULT")) <= rank,
                          ">": order.index(e.get("severity", "DEFAULT")) > rank,
                          ">=": order.index(e.get("severity", "DEFAULT")) >= rank}[op]

    def match(entry: dict) -> bool:
        got = _lookup(entry, path)
        if op == ":":
            return got is not None and (value == "*" or value.lower() in str(got).lower())
        if op in ("=", "!="):
            return (got is not None and str(got) == value) == (op == "=")
        return got is not None and {"<": str(got) < value, "<=": str(got) <= value, ">": str(got) > value,
                                    ">=": str(got) >= value}[op]

    return match


def _bad(why: str) -> ApiError:
    return ApiError(400, "badRequest", f"Invalid filter: {why}")
