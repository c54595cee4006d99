"""The emulator's front door: what every HTTP request must be before any API, control endpoint or
upload sees it.

The emulator has no authentication and, when its owner allows it, runs jobs' commands. A web page
its owner visits can still send it requests (a form, `fetch` in no-cors mode, a name that a DNS
server re-points at 127.0.0.1), so the door refuses, in Google's error shape and on one line:

- a Host that is not the loopback by name (127.0.0.1 or localhost, any port): a DNS-rebound name
  reaches 127.0.0.1 but says its own name here (403);
- an Origin that is present and not the emulator's own (http://127.0.0.1:PORT or
  http://localhost:PORT): browsers send it with every cross-site write (403);
- a body on a JSON API (POST, PUT, PATCH) that does not say application/json, and a write that says
  text/plain or a form type even with no body: those are what a page can send without asking first
  (415). Cloud Storage's upload surface
  (/upload/..., media, multipart/related, resumable chunks) keeps its own content types, and
  Google's HTTP batch is multipart/mixed;
- a body over MAX_BODY bytes, uploads excepted (413), before it is read.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

from .core import ApiError

MAX_BODY = 4 * 2**20  # bytes: far above any JSON body a Google API takes (a 1,000-VM batch is about 2 MiB)
LOOPBACK_NAMES = ("127.0.0.1", "localhost")
WRITES = ("POST", "PUT", "PATCH")
# Paths whose bodies are media (any type, any size): Cloud Storage's uploads, as clients send them.
MEDIA_PREFIXES = ("/upload/", "/resumable/upload/")
BATCH_PREFIX = "/batch/"  # Google's HTTP batch: multipart/mixed, each part checked as its own request
# The types a browser sends cross-site without a preflight (a form, fetch in no-cors mode).
BROWSER_TYPES = ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data")


def _short(value: str, limit: int = 80) -> str:
    return value if len(value) <= limit else value[:limit] + "..."


def host_name(host: str) -> str:
    """The name part of a Host header, lower-cased ('127.0.0.1:8085' -> '127.0.0.1')."""
    host = host.strip().lower()
    if host.startswith("["):
        return host.partition("]")[0] + "]"
    name, sep, port = host.rpartition(":")
    return name if sep and port.isdigit() else host


def own_origins(port: int | None) -> set[str]:
    return {f"http://{name}:{port}" for name in LOOPBACK_NAMES} if port else set()


def is_json(content_type: str) -> bool:
    """application/json, or a +json type, whatever its parameters (charset)."""
    mime = content_type.split(";", 1)[0].strip().lower()
    return mime == "application/json" or (mime.startswith("application/") and mime.endswith("+json"))


def refusal(environ: dict, port: int | None) -> ApiError | None:
    """Why the door refuses this request (an ApiError to answer with), or None to let it in."""
    host = environ.get("HTTP_HOST")
    if host is not None and host_name(host) not in LOOPBACK_NAMES:
        return ApiError(403, "forbidden", f"Host {_short(host)!r} is refused: this emulator answers only requests "
                                          "addressed to 127.0.0.1 or localhost (a DNS-rebound name is not one)")
    origin = environ.get("HTTP_ORIGIN")
    if origin is not None and origin.strip().lower().rstrip("/") not in own_origins(port):
        own = f"http://127.0.0.1:{port}" if port else "no web origin"
        return ApiError(403, "forbidden", f"Origin {_short(origin)!r} is refused: this emulator answers only its own "
                                          f"origin ({own}), so no web page can drive it")
    path = environ.get("PATH_INFO") or "/"
    if environ.get("REQUEST_METHOD", "GET").upper() not in WRITES or path.startswith(MEDIA_PREFIXES):
        return None
    try:
        length = int(environ.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return ApiError(400, "badRequest", "Content-Length is not a number")
    chunked = "chunked" in environ.get("HTTP_TRANSFER_ENCODING", "").lower()
    if length > MAX_BODY:
        return ApiError(413, "payloadTooLarge", f"Request payload size exceeds the limit: {MAX_BODY} bytes.")
    content_type = environ.get("CONTENT_TYPE", "")
    if not length and not chunked and content_type.split(";", 1)[0].strip().lower() not in BROWSER_TYPES:
        return None  # nothing to judge (a bodyless POST: start, stop, reset)
    if path.startswith(BATCH_PREFIX):
        ok = content_type.split(";", 1)[0].strip().lower() == "multipart/mixed"
        wanted = "multipart/mixed"
    else:
        ok, wanted = is_json(content_type), "application/json"
    if not ok:
        return ApiError(415, "unsupportedMediaType", f"Content-Type {_short(content_type or '(none)')!r} is not "
                                                     f"supported here: this API takes {wanted}")
    return None


def guarded(app: Callable[[dict, Callable], Iterable[bytes]], port: Callable[[], int | None]
            ) -> Callable[[dict, Callable], Iterable[bytes]]:
    """`app` behind the door: a refused request gets its one-line JSON error and never reaches `app`."""

    def door(environ: dict, start_response: Callable) -> Any:
        error = refusal(environ, port())
        if error is None:
            return app(environ, start_response)
        body = json.dumps(error.to_json()).encode()
        start_response(f"{error.code} {_REASONS.get(error.code, 'Refused')}",
                       [("Content-Type", "application/json; charset=UTF-8"), ("Content-Length", str(len(body)))])
        return [body]

    return door


_REASONS = {400: "Bad Request", 403: "Forbidden", 413: "Payload Too Large", 415: "Unsupported Media Type"}
