"""Secret Manager v1 over REST/JSON, as googleapiclient, gcloud and Google's REST reference call it.

    POST   /v1/projects/P/secrets?secretId=S                 secrets.create (body: Secret)
    GET    /v1/projects/P/secrets                            secrets.list (pageSize, pageToken, filter)
    GET    /v1/projects/P/secrets/S                          secrets.get
    DELETE /v1/projects/P/secrets/S                          secrets.delete (etag)
    POST   /v1/projects/P/secrets/S:addVersion               secrets.addVersion (body: {payload})
    GET    /v1/projects/P/secrets/S:getIamPolicy             secrets.getIamPolicy
    POST   /v1/projects/P/secrets/S:setIamPolicy             secrets.setIamPolicy (body: {policy: {bindings}})
    GET    /v1/projects/P/secrets/S/versions                 secrets.versions.list
    GET    /v1/projects/P/secrets/S/versions/V               secrets.versions.get (V: a number or latest)
    GET    /v1/projects/P/secrets/S/versions/V:access        secrets.versions.access
    POST   /v1/projects/P/secrets/S/versions/V:disable|enable|destroy

Point a client at http://127.0.0.1:PORT/ (gcloud: api_endpoint_overrides/secretmanager).
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

from ..core import ApiError
from .backend import SecretError

if TYPE_CHECKING:
    from werkzeug.wrappers import Request

    from ..server import Emulator
    from .backend import SecretManagerBackend

_ROUTE = re.compile(r"^/v1/projects/(?P<project>[^/:]+)/secrets"
                    r"(?:/(?P<secret>[^/:]+)(?::(?P<secret_verb>[A-Za-z]+)|/versions(?:/(?P<version>[^/:]+)"
                    r"(?::(?P<version_verb>[A-Za-z]+))?)?)?)?/?$")
_STATE_VERBS = {"enable": "ENABLED", "disable": "DISABLED", "destroy": "DESTROYED"}


class _RestError(ApiError):
    """A SecretError in the shape the server's front door writes."""

    def __init__(self, error: SecretError) -> None:
        super().__init__(error.http, error.status, error.message)
        self.error = error

    def to_json(self) -> dict:
        return self.error.to_json()


def _page_size(args: Any) -> int:
    raw = args.get("pageSize", "") or "0"
    try:
        return int(raw)
    except ValueError:
        raise SecretError("INVALID_ARGUMENT", f"Invalid value at 'page_size' (TYPE_INT32), \"{raw}\"") from None


class SecretManagerRest:
    """Routes /v1/projects/P/secrets... to the Secret Manager backend."""

    @classmethod
    def for_emulator(cls, emulator: Emulator) -> SecretManagerRest:
        return cls(emulator.secretmanager)

    def __init__(self, backend: SecretManagerBackend) -> None:
        self.backend = backend

    def handle(self, request: Request) -> tuple[int, Any]:
        try:
            return 200, self._dispatch(request)
        except SecretError as e:
            raise _RestError(e) from None

    def _dispatch(self, request: Request) -> Any:
        m = _ROUTE.match(request.path)
        if m is None:
            raise ApiError(404, "notFound", f"The emulator's Secret Manager serves no method at {request.path}.")
        project, secret, secret_verb, version, version_verb = m.group(
            "project", "secret", "secret_verb", "version", "version_verb")
        method, args, b = request.method, request.args, self.backend
        body: dict = {}
        if method in ("POST", "PATCH"):
            try:
                body = json.loads(request.get_data() or b"{}")
            except ValueError:
                raise SecretError("INVALID_ARGUMENT", "Invalid JSON payload received.") from None
            if not isinstance(body, dict):
                raise SecretError("INVALID_ARGUMENT", "Invalid JSON payload received: not an object.")
        versions = "/versions" in request.path
        if secret is None:
            if method == "POST":
                return b.create_secret(project, args.get("secretId", ""), body)
            if method == "GET":
                return b.list_secrets(project, _page_size(args), args.get("pageToken", ""), args.get("filter", ""))
        elif secret_verb is not None:
            if secret_verb == "addVersion" and method == "POST":
                return b.add_version(project, secret, body.get("payload"))
            if secret_verb == "getIamPolicy" and method == "GET":
                return b.get_iam_policy(project, secret)
            if secret_verb == "setIamPolicy" and method == "POST":
                return b.set_iam_policy(project, secret, body)
        elif not versions:
            if method == "GET":
                return b.get_secret(project, secret)
            if method == "DELETE":
                b.delete_secret(project, secret, args.get("etag", ""))
                return {}
        elif version is None:
            if method == "GET":
                return b.list_versions(project, secret, _page_size(args), args.get("pageToken", ""),
                                       args.get("filter", ""))
        elif version_verb is None:
            if method == "GET":
                return b.get_version(project, secret, version)
        elif version_verb == "access" and method == "GET":
            return b.access_version(project, secret, version)
        elif version_verb in _STATE_VERBS and method == "POST":
            return b.set_version_state(project, secret, version, _STATE_VERBS[version_verb], body.get("etag", ""))
        raise ApiError(404, "notFound", f"Secret Manager has no method {method} {request.path}.")
