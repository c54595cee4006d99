"""Webhook URLs as `--notify` takes them, for a job (jobs/policy.py) and a cluster's autostop
(cluster/spec.py) alike: one check, one set of one-line refusals. Below jobs/ and cluster/, so
both use it without one importing the other."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

from gcpgpu import specfile
from gcpgpu.errors import UsageProblem

MAX_NOTIFY = 10
PUBSUB = re.compile(r"^pubsub:projects/[a-z][-a-z0-9]{4,28}[a-z0-9]/topics/[A-Za-z][-\w.~+%]{2,254}$")


def check_notify(url: Any, where: str = "--notify") -> str:
    """An http(s) webhook with a host; Pub/Sub topics are refused (the emulator has no Pub/Sub to test them on)."""
    text = str(url)
    if PUBSUB.match(text) or text.startswith("pubsub:"):
        raise UsageProblem(f"{where} {specfile.shown(text)}: Pub/Sub topics are not supported yet; give an "
                           "http(s) webhook URL (e.g. https://hooks.example.com/gcpgpu)")
    specfile.check_utf8(text, where)
    parts = urlsplit(text) if not any(c.isspace() or ord(c) < 32 for c in text) else None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageProblem(f"{where} {specfile.shown(text)} is not an http(s) URL; give a webhook such as "
                           "https://hooks.example.com/gcpgpu")
    try:
        parts.port  # noqa: B018 - urlsplit checks the port only when asked
    except ValueError:
        raise UsageProblem(f"{where} {specfile.shown(text)} has a bad port") from None
    return text


def check_urls(urls: Any, where: str = "--notify") -> list[str]:
    """Every URL checked, at most MAX_NOTIFY of them (a list, or one string from a spec file)."""
    items = [urls] if isinstance(urls, str) else list(urls or [])
    if len(items) > MAX_NOTIFY:
        raise UsageProblem(f"{where} is given {len(items)} times; {MAX_NOTIFY} at most")
    return [check_notify(u, where) for u in items]
