"""What a job's follower does besides recovering lost nodes: retries on the job's own failures,
stall detection, notifications and its spend cap (job submit --max-restarts-on-errors,
--retry-on-exit-codes, --stall-timeout, --notify, --max-spend: jobs/cluster/spendcap.py).

The settings are checked here before any API call and stored in the job's record on its nodes
(record["policy"]), so whoever follows the job (the submitting process, `job follow` from another
machine, or a follower on the cluster itself) reads the same settings from the cloud.
"""

from __future__ import annotations

import re
from typing import Any

from gcpgpu import specfile
from gcpgpu.errors import UsageProblem
from gcpgpu.specfile import check_urls  # --notify, checked as a cluster's autostop checks it

MAX_RESTARTS = 100
STALL_RANGE = (5, 7 * 86400)  # below a few seconds a log read's own delay looks like a stall


def parse_exit_codes(value: Any, where: str = "--retry-on-exit-codes") -> list[int]:
    """'3,75' (or a list of them, from a spec file) -> [3, 75]: integers 1-255, as a process exits."""
    items = value if isinstance(value, (list, tuple)) else str(value).split(",")
    codes: list[int] = []
    for item in items:
        text = str(item).strip()
        if isinstance(item, bool) or not re.fullmatch(r"\d{1,3}", text) or not 1 <= int(text) <= 255:
            raise UsageProblem(f"{where} {specfile.shown(text)} is not an exit code: give integers from 1 to 255, "
                               f"comma-separated (e.g. {where} 3,75)")
        if int(text) not in codes:
            codes.append(int(text))
    if not codes:
        raise UsageProblem(f"{where} is empty: give exit codes from 1 to 255, e.g. {where} 3,75")
    return codes


def check(spec: Any, target: str) -> None:
    """The follower's settings of a JobSpec, refused in one line naming the flag."""
    restarts = spec.max_restarts_on_errors
    if restarts is not None and (isinstance(restarts, bool) or not isinstance(restarts, int)
                                 or not 0 <= restarts <= MAX_RESTARTS):
        raise UsageProblem(f"--max-restarts-on-errors {restarts!r} must be a whole number from 0 to {MAX_RESTARTS}")
    if spec.retry_on_exit_codes:
        spec.retry_on_exit_codes = parse_exit_codes(spec.retry_on_exit_codes)
        if not restarts:
            raise UsageProblem("--retry-on-exit-codes needs --max-restarts-on-errors N (how many retries in all)")
    stall = spec.stall_timeout
    if stall is not None and (isinstance(stall, bool) or not isinstance(stall, int)
                              or not STALL_RANGE[0] <= stall <= STALL_RANGE[1]):
        raise UsageProblem(f"--stall-timeout {stall!r}s must be from {STALL_RANGE[0]}s to 7d (e.g. 30m)")
    spec.notify = check_urls(spec.notify)
    if spec.max_spend is not None:
        spec.max_spend = specfile.parse_usd(spec.max_spend, "--max-spend")
    if target == "vertex" and spec.max_spend is not None:
        raise UsageProblem("--max-spend applies to --cluster jobs: its follower stops the job; a Vertex AI job's "
                           "cost is not priced by gcpgpu (stop it with --timeout)")
    if target == "vertex":
        for flag, value in (("--max-restarts-on-errors", restarts), ("--retry-on-exit-codes", spec.retry_on_exit_codes),
                            ("--stall-timeout", stall)):
            if value:
                raise UsageProblem(f"{flag} applies to --cluster jobs: Vertex AI has no such scheduling field "
                                   "(its own retries: --restart)")


def record_fields(spec: Any) -> dict:
    """What the job's record keeps of these settings (record["policy"]); empty when none was given."""
    policy = {"max_restarts_on_errors": spec.max_restarts_on_errors or 0,
              "retry_on_exit_codes": list(spec.retry_on_exit_codes or []),
              "stall_timeout": spec.stall_timeout, "notify": list(spec.notify or []),
              **({"max_spend": spec.max_spend} if spec.max_spend is not None else {})}
    return {"policy": policy} if any(policy.values()) else {}


def retryable(policy: dict, failed: list[dict]) -> dict | None:
    """The failed node row (exit code, node) that makes the job's failure retryable under `policy`, or None.

    With codes, only those count; without, any non-zero exit does (SkyPilot's max_restarts_on_errors)."""
    if not policy.get("max_restarts_on_errors"):
        return None
    codes = set(policy.get("retry_on_exit_codes") or [])
    for row in failed:
        if "job's timeout" in str(row.get("message") or ""):
            continue  # the user's own --timeout cap: running again would undo it
        code = row.get("exit_code")
        if code is not None and code != 0 and (not codes or code in codes):
            return row
    return None
