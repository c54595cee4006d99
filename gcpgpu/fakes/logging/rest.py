"""Cloud Logging's entries.list over REST (POST /v2/entries:list): the wire format of the emulator's logs.

resourceNames (projects/PROJECT only), filter (backend.py reads it), orderBy "timestamp asc|desc", pageSize
and pageToken, with the 400s Google's front end answers for what it does not take. The entries come from
the Logging backend (`emulator.logging`), so job logs are read the way they are read from the real cloud.
"""

from __future__ import annotations

import base64
import json
import re
from typing import TYPE_CHECKING, Any

from ..core import ApiError
from .backend import LoggingBackend, query

if TYPE_CHECKING:
    from werkzeug.wrappers import Request

DEFAULT_PAGE = 50
MAX_PAGE = 1000


class LoggingRest:
    """entries.list over the Logging backend."""

    @classmethod
    def for_emulator(cls, emulator: Any) -> LoggingRest:
        return cls(emulator.logging)

    def __init__(self, backend: LoggingBackend) -> None:
        self.backend = backend

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
        pred = query(text)
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
        entries = self.backend.entries(projects, pred, descending=order == "timestamp desc")
        page = entries[start:start + size]
        out: dict[str, Any] = {}
        if page:
            out["entries"] = page
        if start + size < len(entries):
            out["nextPageToken"] = base64.urlsafe_b64encode(
                json.dumps({"o": start + size, "f": text, "d": order}).encode()).decode()
        return 200, out
