"""Who is calling: the Google identity of the credentials in use, written on every job and cluster gcpgpu makes.

It is never asked for: it is read the way Google's client libraries expose it. A service account's
credentials (a key file, the metadata server's, an impersonated account) name their account
(`service_account_email`); a person's (gcloud's application-default login) do not, so their token is asked of
Google's tokeninfo endpoint, which names its e-mail (gcloud's login grants the userinfo.email scope for it).

On the emulator no credentials are sent: the caller is GCPGPU_EMULATOR_USER when set (so tests, and a team
trying gcpgpu on one machine, act as several people), else `EMULATOR_USER`.

An identity that cannot be read is "unknown", never a failure: who made a job is told, not enforced, here
(project IAM decides who may act; a Slurm cluster's accounting enforces its own rules).
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .clients import Clients

UNKNOWN = "unknown"
EMULATOR_USER = "you@example.com"
USER_ENV = "GCPGPU_EMULATOR_USER"
TOKENINFO = "https://oauth2.googleapis.com/tokeninfo"
EMAIL = re.compile(r"^[A-Za-z0-9._%+-]{1,64}@[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)+$")
_cache: dict[Any, str] = {}


def is_email(value: str) -> bool:
    return len(value) <= 254 and EMAIL.match(value) is not None


def whoami(clients: Clients) -> str:
    """The caller's e-mail (a person's or a service account's), or UNKNOWN; read once per process."""
    key = ("emulator", os.environ.get(USER_ENV)) if clients.is_emulated else "google"
    if key not in _cache:
        _cache[key] = _emulated() if clients.is_emulated else _google()
    return _cache[key]


def _emulated() -> str:
    named = os.environ.get(USER_ENV, "").strip()
    if not named:
        return EMULATOR_USER
    return named if is_email(named) else UNKNOWN


def _google() -> str:
    try:
        import google.auth
        import google.auth.transport.requests

        credentials, _ = google.auth.default(scopes=["https://www.googleapis.com/auth/cloud-platform"])
        named = getattr(credentials, "service_account_email", None)
        if isinstance(named, str) and is_email(named):
            return named
        request = google.auth.transport.requests.Request()
        credentials.refresh(request)
        named = getattr(credentials, "service_account_email", None)  # the metadata server's, once refreshed
        if isinstance(named, str) and is_email(named):
            return named
        response = request(url=f"{TOKENINFO}?access_token={credentials.token}", method="GET")
        if response.status != 200:
            return UNKNOWN
        import json

        email = json.loads(response.data).get("email")
        return email if isinstance(email, str) and is_email(email) else UNKNOWN
    except Exception:  # noqa: BLE001 (no credentials, no network: the job is still made, by someone unknown)
        return UNKNOWN


def matches(owner: str | None, wanted: str) -> bool:
    """Whether a record's `owner` (None: written before gcpgpu kept one) is `wanted`, case aside."""
    return (owner or UNKNOWN).lower() == wanted.lower()
