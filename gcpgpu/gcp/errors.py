"""One place that decides what a Google error means for us: stockout, quota, transient or permanent.

Both shapes are handled: synchronous REST errors (api_core exceptions whose `errors` hold dicts
with `reason`) and failed Compute operations (api_core exceptions whose `errors` hold the
operation's error protos with `code`). Sources: shared/reference/gcp-facts.md section 4.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gcpgpu.errors import entry_text, error_entries, is_google_error

# Try another zone: the zone is out of what we asked for (SkyPilot's table, plus the _WITH_DETAILS
# variant SkyPilot once missed).
ZONE_LEVEL = frozenset({
    "ZONE_RESOURCE_POOL_EXHAUSTED",
    "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS",
    "UNSUPPORTED_OPERATION",
    "insufficientCapacity",
    "RESOURCE_NOT_READY",
    "RESOURCE_OPERATION_RATE_EXCEEDED",
    # Capacity codes Cluster Toolkit's Slurm resume code treats like the zone stockout.
    "REGION_RESOURCE_POOL_EXHAUSTED",
    "RESOURCE_POOL_EXHAUSTED",
    "resourcePoolExhausted",
})
# bulkInsert's summary when fewer than minCount VMs could be made ("Requested minimum count of N VMs
# could not be created."). The cause, when the operation carries one, follows it and decides; with
# none, it is a capacity failure (SkyPilot's provisioner and Cluster Toolkit's resume.py both fail
# over on it). gcp-facts sections 4 and 10.
MIN_COUNT_NOT_REACHED = "VM_MIN_COUNT_NOT_REACHED"
# Stop: another zone in the same region will not help.
QUOTA = frozenset({"QUOTA_EXCEEDED", "quotaExceeded"})
REGION_LEVEL = QUOTA | {"SUBNET_NOT_FOUND_FOR_VPC"}
TRANSIENT_HTTP = frozenset({408, 429, 500, 502, 503, 504})

_QUOTA_MESSAGE = re.compile(r"Quota '([A-Z0-9_]+)' exceeded\.\s+Limit:\s*([0-9.]+)(?:\s+in region\s+([a-z0-9-]+))?")


@dataclass(frozen=True)
class Failure:
    """What an error means: kind is 'stockout', 'quota', 'region', 'transient' or 'permanent'."""

    kind: str
    reasons: tuple[str, ...]
    message: str
    code: int | None
    quota_metric: str | None = None
    quota_limit: float | None = None
    quota_region: str | None = None


def reasons_of(exc: BaseException) -> list[str]:
    """Every reason/code string the error carries."""
    out = [v for err in error_entries(exc) for key in ("reason", "code") if (v := entry_text(err, key))]
    reason = getattr(exc, "reason", None)
    if isinstance(reason, str) and reason:
        out.append(reason)
    return out


def message_of(exc: BaseException) -> str:
    for err in error_entries(exc):
        if msg := entry_text(err, "message"):
            return " ".join(msg.split())
    return " ".join(str(getattr(exc, "message", None) or exc).split())


def classify(exc: BaseException, *, from_operation: bool = False) -> Failure:
    """Classify a Google API error. A bare 503 from a finished operation counts as no capacity. Retries that
    ran out (api_core's RetryError, whose own text is only 'Timeout of 90.0s exceeded') are told by their last
    error, and stay permanent: nothing retries them again."""
    cause = getattr(exc, "cause", None)
    if type(exc).__name__ == "RetryError" and isinstance(cause, BaseException) and is_google_error(cause):
        inner = classify(cause, from_operation=from_operation)
        return Failure("permanent", inner.reasons, f"{inner.message} (still failing after retries)", inner.code)
    reasons = tuple(reasons_of(exc))
    code = getattr(exc, "code", None)
    code = code if isinstance(code, int) else None
    message = message_of(exc)
    if MIN_COUNT_NOT_REACHED in reasons:
        causes = tuple(r for r in reasons if r != MIN_COUNT_NOT_REACHED)
        if not causes:
            return Failure("stockout", reasons, message, code)
        cause = classify_reasons(causes, message, code)
        return Failure(cause.kind, reasons, message, code, cause.quota_metric, cause.quota_limit, cause.quota_region)
    return classify_reasons(reasons, message, code, from_operation=from_operation)


def classify_reasons(reasons: tuple[str, ...], message: str, code: int | None, *,
                     from_operation: bool = False) -> Failure:
    """classify() for error codes already read out of an exception or an operation."""
    if any(r in QUOTA for r in reasons):
        m = _QUOTA_MESSAGE.search(message)
        return Failure("quota", reasons, message, code,
                       quota_metric=m.group(1) if m else None,
                       quota_limit=float(m.group(2)) if m else None,
                       quota_region=m.group(3) if m else None)
    if any(r in ZONE_LEVEL for r in reasons):
        return Failure("stockout", reasons, message, code)
    if any(r in REGION_LEVEL for r in reasons):
        return Failure("region", reasons, message, code)
    if code in TRANSIENT_HTTP:
        # An insert whose operation ended in 503 had no capacity behind it (dstack issue 488); a
        # request answered 503 before any operation existed is worth retrying.
        return Failure("stockout" if from_operation and code == 503 else "transient", reasons, message, code)
    return Failure("permanent", reasons, message, code)


def is_transient(exc: BaseException) -> bool:
    return is_google_error(exc) and classify(exc).kind == "transient"


def is_not_found(exc: BaseException) -> bool:
    return getattr(exc, "code", None) == 404


def is_service_off(e: BaseException) -> bool:
    """The API is not enabled in the project, or not served by the emulator: nothing of it can exist there."""
    from google.api_core import exceptions

    if is_not_found(e) or isinstance(e, exceptions.MethodNotImplemented):
        return True
    text = str(e).lower()
    return isinstance(e, exceptions.PermissionDenied) and any(
        s in text for s in ("service_disabled", "has not been used", "is disabled"))
