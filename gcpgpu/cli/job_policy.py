"""`job submit`'s options for what its follower does besides recovering lost nodes: retries, stalls,
webhooks (checked in jobs/policy.py, stored in the job's record). Only click is imported here."""

from __future__ import annotations

from typing import Any

import click

from gcpgpu.cli.options import with_options

OPTIONS = [
    click.option("--max-restarts-on-errors", type=click.IntRange(0, 100), metavar="N",
                 help="Cluster: restart the job from its last checkpoint when it fails by itself (a non-zero exit, "
                 "or one of --retry-on-exit-codes; a stall), at most N times."),
    click.option("--retry-on-exit-codes", metavar="CODES", help="Cluster: only these exit codes (comma-separated, "
                 "1-255) count as retryable, e.g. 3,75."),
    click.option("--stall-timeout", metavar="DURATION", help="Cluster: no new trainer step (a user command: no log "
                 "line) for this long is a stall: stacks are captured, the job stopped and restarted (counted as a "
                 "retry), or FAILED with cause 'stalled'."),
    click.option("--notify", "notify", multiple=True, metavar="URL", help="POST one JSON message per state change "
                 "to this http(s) webhook (repeatable); stored with the job in plain text."),
]


follower_options = with_options(*OPTIONS)


def policy_flags(kw: dict[str, Any]) -> dict[str, Any]:
    """The follower's settings from the flags, as JobSpec fields (jobs/policy.py checks them together)."""
    from gcpgpu.jobs.policy import parse_exit_codes
    from gcpgpu.jobs.spec import parse_duration

    stall, codes = kw.get("stall_timeout"), kw.get("retry_on_exit_codes")
    return {"max_restarts_on_errors": kw.get("max_restarts_on_errors"),
            "retry_on_exit_codes": parse_exit_codes(codes) if codes is not None else None,
            "stall_timeout": parse_duration(stall, "--stall-timeout") if stall is not None else None,
            "notify": list(kw.get("notify") or ()) or None}
