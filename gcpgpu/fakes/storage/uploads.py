"""Resumable uploads: a session started by POST, its bytes sent by PUT in chunks, 308 until the last.

Each PUT carries `Content-Range: bytes FIRST-LAST/TOTAL` (TOTAL '*' while the client does not know
it yet); the answer to a chunk that is not the last is 308 with `Range: bytes=0-N` (N the last byte
held; no Range while nothing is held), which is how google-cloud-storage, gcloud (apitools) and
the Go client learn where to go on. `bytes */TOTAL` or `bytes */*` with no body asks where the
session stands. A chunk that starts before the end of what is held (a retry after a lost answer)
has its repeated bytes skipped; one that starts past it leaves a gap and is refused. The last chunk
may carry `X-Goog-Hash`, checked against the object like the md5Hash/crc32c given at the start.
A session's bytes are kept in a file beside the buckets until the object is made from them whole.
"""

from __future__ import annotations

import re
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING

from ..core import ApiError
from .conditions import Conditions
from .names import bad_request

if TYPE_CHECKING:
    from .disk import ObjectStore

_RANGE = re.compile(r"^bytes (?:\*|(\d+)-(\d+))/(\*|\d+)$")
_CHUNK = 1 << 20


@dataclass
class Session:
    id: str
    bucket: str
    name: str
    attrs: dict
    conditions: Conditions
    declared: dict
    path: Path
    received: int = 0
    total: int | None = None
    result: dict | None = None  # the object, once made: a repeated last PUT gets it again
    lock: threading.Lock = field(default_factory=threading.Lock)


class Uploads:
    """The open resumable upload sessions of one storage backend.

    `check(bucket, name, conditions)` refuses a session the object could not come of; `insert(bucket,
    name, file, attrs, conditions, declared)` makes the object from the session's bytes.
    """

    def __init__(self, store: ObjectStore, check: Callable[[str, str, Conditions], None],
                 insert: Callable[..., dict]) -> None:
        self.store = store
        self.check = check
        self.insert = insert
        self._sessions: dict[str, Session] = {}
        self._lock = threading.Lock()

    def reset(self) -> None:
        with self._lock:
            self._sessions.clear()  # their files go with the storage root's reset

    def drop_bucket(self, bucket: str) -> None:
        with self._lock:
            for key in [k for k, s in self._sessions.items() if s.bucket == bucket]:
                self._sessions[key].path.unlink(missing_ok=True)
                del self._sessions[key]

    def start(self, bucket: str, name: str, attrs: dict, conditions: Conditions, declared: dict) -> str:
        """A new session for gs://bucket/name; its id goes into the upload URL."""
        self.check(bucket, name, conditions)
        path = self.store.scratch()
        path.touch()
        session = Session(uuid.uuid4().hex, bucket, name, attrs, conditions, declared, path)
        with self._lock:
            self._sessions[session.id] = session
        return session.id

    def cancel(self, upload_id: str) -> None:
        with self._lock:
            session = self._sessions.pop(upload_id, None)
        if session is not None:
            session.path.unlink(missing_ok=True)

    def put(self, upload_id: str, content_range: str | None, body: IO[bytes], hash_header: str = ""
            ) -> tuple[int, dict | None]:
        """Take one chunk: (bytes held, the object once the upload is complete, else None)."""
        with self._lock:
            session = self._sessions.get(upload_id)
        if session is None:
            raise ApiError(404, "notFound", f"No such upload session: {upload_id}")
        with session.lock:
            if session.result is not None:
                return session.received, session.result
            first, last, total = _parse_range(content_range)
            if total is not None:
                if session.total is not None and total != session.total:
                    raise bad_request(f"Content-Range total {total} differs from the {session.total} given before")
                session.total = total
            if first is not None:
                self._append(session, first, last, body)
            elif content_range is None:  # no Content-Range: the whole object in this one request
                self._append(session, 0, None, body)
                session.total = session.received
            if session.total is not None and session.received > session.total:
                raise bad_request(f"Received {session.received} bytes, more than the {session.total} announced")
            if session.total is None or session.received < session.total:
                return session.received, None
            declared = {**session.declared, **_hashes(hash_header)}
            try:
                session.result = self.insert(session.bucket, session.name, session.path, session.attrs,
                                             session.conditions, declared)
            except ApiError:
                self.cancel(upload_id)  # its bytes are gone (refused): the client starts again, as on Google
                raise
            return session.received, session.result

    @staticmethod
    def _append(session: Session, first: int, last: int | None, body: IO[bytes]) -> None:
        if first > session.received:
            raise bad_request(f"Invalid request: this chunk starts at byte {first}, but the session holds "
                              f"{session.received} bytes; send from byte {session.received}")
        skip = session.received - first  # bytes this chunk repeats (a retry after a lost answer)
        got = 0
        with open(session.path, "ab") as out:
            while chunk := body.read(_CHUNK):
                got += len(chunk)
                if skip:
                    drop = min(skip, len(chunk))
                    chunk, skip = chunk[drop:], skip - drop
                out.write(chunk)
                session.received += len(chunk)
        if last is not None and got != last - first + 1:
            raise bad_request(f"Content-Range bytes {first}-{last} announces {last - first + 1} bytes; "
                              f"the request carried {got}")


def _parse_range(value: str | None) -> tuple[int | None, int | None, int | None]:
    """(first, last, total) of a Content-Range; None where it says '*' (or there is none)."""
    if value is None:
        return None, None, None
    match = _RANGE.match(value.strip())
    if not match:
        raise bad_request(f"Invalid Content-Range header: {value!r}; expected 'bytes FIRST-LAST/TOTAL', "
                          "'bytes FIRST-LAST/*' or 'bytes */TOTAL'")
    first, last, total = match.groups()
    if first is not None and int(last) < int(first):
        raise bad_request(f"Invalid Content-Range header: {value!r}: the last byte is before the first")
    return (int(first) if first is not None else None, int(last) if last is not None else None,
            int(total) if total != "*" else None)


def _hashes(header: str) -> dict:
    """X-Goog-Hash ('crc32c=...,md5=...') as the md5Hash/crc32c fields it declares."""
    out = {}
    for part in (header or "").split(","):
        key, _, value = part.strip().partition("=")
        if key == "md5" and value:
            out["md5Hash"] = value
        elif key == "crc32c" and value:
            out["crc32c"] = value
    return out
