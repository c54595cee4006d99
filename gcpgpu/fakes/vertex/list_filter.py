"""ListCustomJobs' filter: which fields it takes, and how each one compares.

The grammar (AIP-160: AND, OR, NOT, parentheses, comparisons) is the one fakes/filters.py
parses for Cloud Logging too; this module says what each Vertex AI field means.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable

from .. import filters
from ..core import parse_rfc3339
from .errors import VertexError

STATES = ("JOB_STATE_QUEUED", "JOB_STATE_PENDING", "JOB_STATE_RUNNING", "JOB_STATE_SUCCEEDED",
          "JOB_STATE_FAILED", "JOB_STATE_CANCELLING", "JOB_STATE_CANCELLED", "JOB_STATE_PAUSED",
          "JOB_STATE_EXPIRED", "JOB_STATE_UPDATING", "JOB_STATE_PARTIALLY_SUCCEEDED", "JOB_STATE_UNSPECIFIED")
_FIELDS = ("display_name", "state", "create_time", "start_time", "end_time", "update_time", "labels")


def parse_filter(text: str) -> Callable[[dict], bool]:
    """ListCustomJobs' filter (AIP-160): display_name, state, create_time/start_time/end_time/
    update_time and labels.KEY, with = != < <= > >= and : (has; * is a wildcard), AND, OR, NOT."""

    def compare(path: list[str], op: str, value: str) -> Callable[[dict], bool]:
        root = path[0]
        if root not in _FIELDS or (root == "labels") != (len(path) == 2) or len(path) > 2:
            raise invalid_filter(text, f"unsupported field {'.'.join(path)!r} (supported: display_name, state, "
                                       "create_time, start_time, end_time, update_time, labels.KEY)")
        return _compare(".".join(path), op, value, text)

    try:
        return filters.parse(text, compare)
    except filters.FilterError as e:
        raise invalid_filter(text, str(e)) from None


def invalid_filter(text: str, why: str) -> VertexError:
    return VertexError("INVALID_ARGUMENT", f"Invalid filter {text!r}: {why}.", [("filter", why)])


def _compare(field: str, op: str, value: str, text: str) -> Callable[[dict], bool]:
    if field.endswith("_time"):
        if op == ":":
            raise invalid_filter(text, f"{field} does not support ':'")
        try:
            bound = parse_rfc3339(value)
        except ValueError:
            raise invalid_filter(text, f"{field} needs an RFC 3339 time like \"2024-05-18T00:00:00Z\"") from None
        key = "".join(w.capitalize() if i else w for i, w in enumerate(field.split("_")))

        def by_time(job: dict) -> bool:
            got = job.get(key)
            if not got:
                return op == "!="
            t = parse_rfc3339(got)
            return {"=": t == bound, "!=": t != bound, "<": t < bound, "<=": t <= bound, ">": t > bound,
                    ">=": t >= bound}[op]

        return by_time
    if field == "state":
        if op not in ("=", "!="):
            raise invalid_filter(text, "state supports only = and !=")
        if value not in STATES:
            raise invalid_filter(text, f"{value!r} is not a JobState (e.g. JOB_STATE_RUNNING)")
        return lambda job: (job.get("state") == value) == (op == "=")
    if op not in ("=", "!=", ":"):
        raise invalid_filter(text, f"{field} supports only =, != and :")

    def get(job: dict) -> str | None:
        if field == "display_name":
            return job.get("displayName", "")
        return (job.get("labels") or {}).get(field.split(".", 1)[1])

    def match(job: dict) -> bool:
        got = get(job)
        if op == ":":
            if got is None:
                return False
            if value == "*":
                return True
            return fnmatch.fnmatchcase(got, value) if "*" in value else value in got
        return (got == value) == (op == "=")

    return match

