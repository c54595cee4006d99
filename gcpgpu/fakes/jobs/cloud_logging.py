"""Cloud Logging's entries.list (POST /v2/entries:list), answered from what local runs printed.

Vertex AI writes each replica's output to Cloud Logging (resource ml_job); the cluster agent's
containers write theirs through Docker's gcplogs driver (resource gce_instance). Both are read
with entries.list and a filter; this serves that call from the emulator's captured output, with
the filter language's comparisons (= != < <= > >= :) over entry fields, AND/OR/NOT, orderBy
timestamp and paging. Only local runs log: nothing else in the emulator writes log entries.
"""

from __future__ import annotations

import base64
import json
import re
import time
from typing import TYPE_CHECKING, Any

from ..core import ApiError
from . import filters

if TYPE_CHECKING:
    from werkzeug.wrappers import Request

    from .host import Host

DEFAULT_PAGE = 50
MAX_PAGE = 1000


def _timestamp(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts)) + f".{int((ts % 1) * 1e9):09d}Z"


def _parse_time(text: str) -> float:
    from ..core import parse_rfc3339

    return parse_rfc3339(text)


def _lookup(entry: Any, path: list[str]) -> Any:
    value = entry
    for part in path:
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


def _compare(text: str) -> filters.Compare:
    def compare(path: list[str], op: str, value: str) -> filters.Predicate:
        if path == ["timestamp"] or path == ["receiveTimestamp"]:
            try:
                bound = _parse_time(value)
            except ValueError:
                raise _bad(f"{path[0]} needs an RFC 3339 time, not {value!r}") from None

            def by_time(entry: dict) -> bool:
                got = _parse_time(_lookup(entry, path))
                return {"=": got == bound, "!=": got != bound, "<": got < bound, "<=": got <= bound,
                        ">": got > bound, ">=": got >= bound, ":": got == bound}[op]

            return by_time
        if path == ["severity"] and op in ("<", "<=", ">", ">="):
            order = ["DEFAULT", "DEBUG", "INFO", "NOTICE", "WARNING", "ERROR", "CRITICAL", "ALERT", "EMERGENCY"]
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

    return compare


def _bad(why: str) -> ApiError:
    return ApiError(400, "badRequest", f"Invalid filter: {why}")


class LoggingRest:
    """entries.list over every local run's captured lines."""

    @classmethod
    def for_emulator(cls, emulator: Host) -> LoggingRest:
        return cls(emulator)

    def __init__(self, emulator: Host) -> None:
        self.emulator = emulator

    def handle(self, request: Request) -> tuple[int, dict]:
        if request.method != "POST":
            raise ApiError(405, "methodNotAllowed", "entries.list is a POST.")
        try:
            body = json.loads(request.get_data() or b"{}")
        except ValueError:
            raise ApiError(400, "badRequest", "Invalid JSON payload received.") from None
        names = body.get("resourceNames") or []
        if not names:
            raise ApiError(400, "badRequest", "resourceNames is required, e.g. [\"projects/PROJECT\"].")
        projects = set()
        for name in names:
            m = re.fullmatch(r"projects/([^/]+)", name)
            if not m:
                raise ApiError(400, "badRequest", f"Unsupported resource name {name!r}; use projects/PROJECT.")
            projects.add(m.group(1))
        text = body.get("filter") or ""
        try:
            pred = filters.parse(text, _compare(text))
        except filters.FilterError as e:
            raise _bad(str(e)) from None
        order = (body.get("orderBy") or "timestamp asc").strip().lower()
        if order not in ("timestamp asc", "timestamp desc", "timestamp"):
            raise ApiError(400, "badRequest", f"orderBy {order!r} is not supported; use \"timestamp asc\" or \"timestamp desc\".")
        size = min(int(body.get("pageSize") or DEFAULT_PAGE), MAX_PAGE)
        start = 0
        if body.get("pageToken"):
            try:
                token = json.loads(base64.urlsafe_b64decode(body["pageToken"].encode()))
                start, same = int(token["o"]), token["f"] == text and token["d"] == order
            except Exception:
                same = False
            if not same:
                raise ApiError(400, "badRequest", "Invalid pageToken for this request.")
        entries = []
        for run in self.emulator.jobs.runner.all_runs():
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
                    entries.append((line.time, line.seq, entry))
        entries.sort(key=lambda e: (e[0], e[1]), reverse=order == "timestamp desc")
        page = [e for _t, _s, e in entries[start:start + size]]
        out: dict[str, Any] = {}
        if page:
            out["entries"] = page
        if start + size < len(entries):
            out["nextPageToken"] = base64.urlsafe_b64encode(
                json.dumps({"o": start + size, "f": text, "d": order}).encode()).decode()
        return 200, out
