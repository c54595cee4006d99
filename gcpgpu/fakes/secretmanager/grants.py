"""What a user's sandboxed job may ask the emulator: its own secrets, nothing else.

On Google Cloud a job's container reads its `--secret`s with credentials that reach those secrets alone
(README, "Security"). Here the sandbox gets a token (GCPGPU_SECRETMANAGER_TOKEN) made for the secrets its
GCPGPU_SECRETS names when it starts; a request from a sandbox (host/peers.py) is answered only when it is a
read of one of those with that token. A cluster's munge key (gcpgpu-munge-*) is never a job's, named or not,
and every other API and the emulator's control endpoints refuse a sandbox outright.
"""

from __future__ import annotations

import json
import re
import secrets
import threading
from typing import TYPE_CHECKING, Any

from ..core import ApiError
from ..host.peers import from_sandbox
from .backend import project_number

if TYPE_CHECKING:
    from ..host.runner import Runner

TOKEN_ENV = "GCPGPU_SECRETMANAGER_TOKEN"
_PREFIX = "gcpgpu-job-"
_NAME = re.compile(r"^projects/([^/]+)/secrets/([^/]+)(?:/versions/[^/]+)?$")
_API = re.compile(r"^/v1/projects/[^/]+/secrets(?:[/:]|$)")
_READ = re.compile(r"^/v1/projects/([^/:]+)/secrets/([^/:]+)(?:/versions/[^/:]+(?::access)?)?/?$")
MUNGE_PREFIX = "gcpgpu-munge-"


def denied(what: str) -> ApiError:
    return ApiError(403, "forbidden", f"Permission denied: {what} (a job's sandbox reaches only the secrets the job "
                                      "was given with --secret)")


class Grants:
    """Tokens for sandboxed jobs, each for a set of (project number, secret id)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._scopes: dict[str, frozenset[tuple[str, str]]] = {}

    def mint(self, gcpgpu_secrets: str) -> str:
        """A new token for the secrets a job's GCPGPU_SECRETS names (malformed ones grant nothing: the
        entrypoint refuses them itself)."""
        try:
            wanted = json.loads(gcpgpu_secrets) if gcpgpu_secrets.strip() else {}
        except ValueError:
            wanted = {}
        scope = set()
        for name in wanted.values() if isinstance(wanted, dict) else []:
            m = _NAME.match(name) if isinstance(name, str) else None
            if m and not m.group(2).startswith(MUNGE_PREFIX):
                scope.add((project_number(m.group(1)), m.group(2)))
        token = _PREFIX + secrets.token_urlsafe(24)
        with self._lock:
            self._scopes[token] = frozenset(scope)
        return token

    def reset(self) -> None:
        with self._lock:
            self._scopes.clear()

    def check(self, method: str, path: str, authorization: str) -> None:
        """Raise a 403 unless this is a read of a secret the bearer token was made for."""
        token = authorization.removeprefix("Bearer ").strip() if authorization.startswith("Bearer ") else ""
        with self._lock:
            scope = self._scopes.get(token)
        if scope is None:
            raise denied(f"{method} {path} without the job's token")
        m = _READ.match(path)
        if method != "GET" or m is None:
            raise denied(f"{method} {path}")
        if m.group(2).startswith(MUNGE_PREFIX) or (project_number(m.group(1)), m.group(2)) not in scope:
            raise denied(f"secret projects/{m.group(1)}/secrets/{m.group(2)} is not this job's")


def sandbox_refusal(grants: Grants, runner: Runner, request: Any) -> ApiError | None:
    """A 403 for a request from a user's sandboxed command that its job's credentials would not allow; None
    for every other caller. Looked up only while a sandbox (a replica with a `prepare`) runs."""
    if not any(not run.done and any(r.spec.prepare is not None for r in run.replicas) for run in runner.all_runs()):
        return None
    if not from_sandbox(request.environ):
        return None
    if not _API.match(request.path):
        return denied(f"{request.method} {request.path}: no API but Secret Manager")
    try:
        grants.check(request.method, request.path, request.headers.get("Authorization", ""))
    except ApiError as e:
        return e
    return None
