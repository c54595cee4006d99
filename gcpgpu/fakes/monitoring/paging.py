"""Paging and the 400 error shared by the Monitoring backend's parts."""

from __future__ import annotations

import base64
import hashlib

from ..core import ApiError


def invalid_argument(message: str) -> ApiError:
    return ApiError(400, "badRequest", message)


def page(items: list, size: int, token: str, request: tuple) -> tuple[list, str]:
    """One page and the token for the next; a token only works with the request that made it."""
    tag = hashlib.sha256(repr(request).encode()).hexdigest()[:12]
    offset = 0
    if token:
        try:
            raw = base64.urlsafe_b64decode(token.encode()).decode()
            got_tag, _, number = raw.partition(":")
            offset = int(number)
            if got_tag != tag or offset < 0:
                raise ValueError
        except ValueError as e:
            raise invalid_argument("Field pageToken had an invalid value: it does not belong to this request.") from e
    page = items[offset:offset + size]
    nxt = offset + size
    return page, base64.urlsafe_b64encode(f"{tag}:{nxt}".encode()).decode() if nxt < len(items) else ""
