"""Cloud Storage's JSON API on the wire: /storage/v1, /upload/storage/v1 and /download/storage/v1.

What the clients send, as they send it:
- Object names are one path segment with '/' escaped as %2F (google-cloud-storage, apitools), so the
  route is read from the raw request line, never from a path that was unescaped first.
- Uploads: uploadType=media (the bytes, name in the query), multipart (JSON metadata, then the
  bytes; apitools quotes its '=='-laden boundary with single quotes, which is taken as it comes)
  and resumable (uploads.py). A body sent with Content-Encoding: gzip is unpacked.
- Downloads: alt=media on the object's URL or its /download/ twin (the mediaLink), with Range
  (206, or 416 when it starts past the end; a range that does not parse is ignored, as Google
  ignores it) and the headers clients check: X-Goog-Hash, X-Goog-Generation, X-Goog-Stored-*.
  An object stored gzip-encoded is unpacked for a client that does not accept gzip, as Google does.
  Their errors are plain text, as Google's are (google-cloud-storage shows that text as the reason).
"""

from __future__ import annotations

import gzip
import json
import re
import shutil
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any
from urllib.parse import quote, unquote

from werkzeug.wrappers import Request, Response

from ..core import ApiError
from .backend import WRITABLE
from .conditions import Conditions
from .names import bad_request, http_date
from .resources import bucket_resource, object_resource

if TYPE_CHECKING:
    from ..server import Emulator
    from .backend import StorageBackend

_CHUNK = 1 << 20
_BOUNDARY = re.compile(r"""boundary=(?:"([^"]+)"|'([^']+)'|([^;\s]+))""", re.IGNORECASE)
_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")


def _json(status: int, body: Any, headers: dict | None = None) -> Response:
    return Response(json.dumps(body), status=status, mimetype="application/json", headers=headers or {})


def _segments(request: Request) -> list[str]:
    """The path's segments, each unescaped on its own (so an escaped '/' stays inside its segment)."""
    raw = request.environ.get("RAW_URI") or request.environ.get("REQUEST_URI") or quote(request.path)
    raw = raw.split("?", 1)[0].split("#", 1)[0]
    if "://" in raw:  # an absolute request target
        raw = "/" + raw.split("://", 1)[1].partition("/")[2]
    return [unquote(s) for s in raw.strip("/").split("/")]


def _body(request: Request) -> IO[bytes]:
    stream: IO[bytes] = request.stream
    if request.headers.get("Content-Encoding", "").lower() == "gzip":
        return gzip.GzipFile(fileobj=stream)  # type: ignore[return-value]
    return stream


def _metadata(raw: bytes) -> dict:
    if not raw.strip():
        return {}
    try:
        data = json.loads(raw)
    except ValueError:
        raise bad_request("Metadata part is not valid JSON.", "parseError") from None
    if not isinstance(data, dict):
        raise bad_request("Metadata part is not a JSON object.", "parseError")
    return data


def _multipart(body: bytes, content_type: str) -> list[tuple[dict[str, str], bytes]]:
    """The parts of a multipart/related body: (lower-cased headers, content)."""
    match = _BOUNDARY.search(content_type)
    if not match:
        raise bad_request("Missing boundary in a multipart upload's Content-Type.")
    delimiter = b"--" + next(g for g in match.groups() if g).encode()
    parts = []
    for piece in body.split(delimiter)[1:]:
        if piece.startswith(b"--"):
            break
        piece = piece[2:] if piece.startswith(b"\r\n") else piece[1:] if piece.startswith(b"\n") else piece
        cuts = [(i, len(sep)) for sep in (b"\r\n\r\n", b"\n\n") if (i := piece.find(sep)) >= 0]
        if not cuts:
            raise bad_request("A part of the multipart upload has no blank line after its headers.")
        at, width = min(cuts)
        head, content = piece[:at], piece[at + width:]
        content = content[:-2] if content.endswith(b"\r\n") else content[:-1] if content.endswith(b"\n") else content
        headers = {}
        for line in head.decode("latin-1").splitlines():
            key, sep, value = line.partition(":")
            if sep:
                headers[key.strip().lower()] = value.strip()
        parts.append((headers, content))
    if len(parts) != 2:
        raise bad_request(f"A multipart upload has a metadata part and a media part; this one has {len(parts)} parts.")
    return parts


class StorageRest:
    """Routes the JSON API's requests to the storage backend."""

    def __init__(self, backend: StorageBackend) -> None:
        self.backend = backend

    @classmethod
    def for_emulator(cls, emulator: Emulator) -> StorageRest:
        return cls(emulator.storage)

    def handle(self, request: Request) -> Response:
        segments = _segments(request)
        if segments[0] == "resumable":  # apitools (gcloud) starts resumable uploads at /resumable/upload/...
            segments = segments[1:]
        surface = segments[0] if segments[0] in ("upload", "download") else "json"
        rest = segments[3:] if surface != "json" else segments[2:]
        method = request.headers.get("X-HTTP-Method-Override", request.method).upper()
        base = request.host_url
        if len(rest) >= 3 and rest[0] == "b" and rest[2] == "o":
            if surface == "upload":
                return self._upload(request, method, rest[1], base)
            if surface == "download" or request.args.get("alt") == "media":
                try:
                    return self._media(request, rest[1], "/".join(rest[3:]))
                except ApiError as e:  # media errors are plain text on Google ("No such object: B/N")
                    return Response(e.message, status=e.code, mimetype="text/plain")
        if surface != "json" or not rest or rest[0] != "b":
            raise ApiError(404, "notFound", f"Not Found: {request.path} is not a Cloud Storage JSON API path")
        if len(rest) == 1:
            return self._buckets(request, method, base)
        if len(rest) == 2 or (len(rest) == 3 and rest[2] == "storageLayout"):
            return self._bucket(request, method, rest[1], base, layout=len(rest) == 3)
        if len(rest) == 3 and rest[2] == "managedFolders" and method == "GET":
            self.backend.get_bucket(rest[1])
            return _json(200, {"kind": "storage#managedFolders"})  # none: `gcloud storage rm -r` asks
        if rest[2] == "o" and len(rest) == 3:
            return self._list_objects(request, rest[1], base)
        if rest[2] == "o":
            return self._object(request, method, rest[1], rest[3:], base)
        raise ApiError(404, "notFound", f"The gcpgpu emulator does not serve {request.path} (no ACLs, IAM, "
                                        "notifications or HMAC keys)")

    # -- buckets ----------------------------------------------------------------------------
    def _buckets(self, request: Request, method: str, base: str) -> Response:
        project = request.args.get("project", "")
        if method == "POST":
            record = self.backend.insert_bucket(project, _metadata(request.get_data()))
            return _json(200, bucket_resource(record, base))
        if method != "GET":
            raise ApiError(405, "methodNotAllowed", f"{method} is not a method of buckets")
        records, token = self.backend.list_buckets(project, request.args.get("prefix", ""),
                                                   request.args.get("maxResults"), request.args.get("pageToken", ""))
        body: dict[str, Any] = {"kind": "storage#buckets"}
        if records:
            body["items"] = [bucket_resource(r, base) for r in records]
        if token:
            body["nextPageToken"] = token
        return _json(200, body)

    def _bucket(self, request: Request, method: str, name: str, base: str, layout: bool = False) -> Response:
        conditions = Conditions.from_query(request.args)
        if layout:
            record = self.backend.get_bucket(name)
            return _json(200, {"kind": "storage#storageLayout", "bucket": name, "location": record["location"],
                               "locationType": record["locationType"], "hierarchicalNamespace": {"enabled": False}})
        if method == "GET":
            return _json(200, bucket_resource(self.backend.get_bucket(name, conditions), base))
        if method in ("PATCH", "PUT"):
            record = self.backend.patch_bucket(name, _metadata(request.get_data()), conditions)
            return _json(200, bucket_resource(record, base))
        if method == "DELETE":
            self.backend.delete_bucket(name, conditions)
            return Response(b"", status=204)
        raise ApiError(405, "methodNotAllowed", f"{method} is not a method of a bucket")

    # -- objects ----------------------------------------------------------------------------
    def _list_objects(self, request: Request, bucket: str, base: str) -> Response:
        a = request.args
        items, prefixes, token = self.backend.list_objects(
            bucket, a.get("prefix", ""), a.get("delimiter", ""), a.get("maxResults"), a.get("pageToken", ""),
            a.get("startOffset", ""), a.get("endOffset", ""), a.get("matchGlob", ""),
            a.get("includeTrailingDelimiter", "").lower() == "true")
        body: dict[str, Any] = {"kind": "storage#objects"}
        if items:
            body["items"] = [object_resource(r, base) for r in items]
        if prefixes:
            body["prefixes"] = prefixes
        if token:
            body["nextPageToken"] = token
        return _json(200, body)

    def _object(self, request: Request, method: str, bucket: str, tail: list[str], base: str) -> Response:
        conditions = Conditions.from_query(request.args)
        verb = next((i for i, s in enumerate(tail) if s in ("rewriteTo", "copyTo") and len(tail) >= i + 5
                     and tail[i + 1] == "b" and tail[i + 3] == "o"), None)
        if verb is not None and method == "POST":
            source, to_bucket, to_name = "/".join(tail[:verb]), tail[verb + 2], "/".join(tail[verb + 4:])
            record = self.backend.copy_object(bucket, source, to_bucket, to_name, _metadata(request.get_data()),
                                              request.args.get("sourceGeneration"), conditions)
            resource = object_resource(record, base)
            if tail[verb] == "copyTo":
                return _json(200, resource)
            size = str(record.get("size", 0))
            return _json(200, {"kind": "storage#rewriteResponse", "totalBytesRewritten": size, "objectSize": size,
                               "done": True, "resource": resource})
        if tail[-1] == "compose" and len(tail) > 1 and method == "POST":
            record = self.backend.compose(bucket, "/".join(tail[:-1]), _metadata(request.get_data()), conditions)
            return _json(200, object_resource(record, base))
        name = "/".join(tail)
        generation = request.args.get("generation")
        if method in ("GET", "HEAD"):
            return _json(200, object_resource(self.backend.get_object(bucket, name, generation, conditions), base))
        if method == "DELETE":
            self.backend.delete_object(bucket, name, generation, conditions)
            return Response(b"", status=204)
        if method in ("PATCH", "PUT"):
            record = self.backend.patch_object(bucket, name, _metadata(request.get_data()), conditions,
                                               replace=method == "PUT")
            return _json(200, object_resource(record, base))
        raise ApiError(405, "methodNotAllowed", f"{method} is not a method of an object")

    # -- uploads ----------------------------------------------------------------------------
    def _upload(self, request: Request, method: str, bucket: str, base: str) -> Response:
        args = request.args
        uploads = self.backend.uploads
        upload_id = args.get("upload_id")
        if upload_id:
            if method == "DELETE":
                uploads.cancel(upload_id)
                return Response(b"", status=499)  # Google's answer to a cancelled session
            held, record = uploads.put(upload_id, request.headers.get("Content-Range"), _body(request),
                                       request.headers.get("X-Goog-Hash", ""))
            if record is not None:
                return _json(200, object_resource(record, base))
            headers = {"Range": f"bytes=0-{held - 1}"} if held else {}
            if "X-Guploader-No-308" in request.headers:  # the Go client cannot take a bare 308
                return Response(b"", status=200, headers={**headers, "X-Http-Status-Code-Override": "308"})
            return Response(b"", status=308, headers=headers)
        if method != "POST":
            raise ApiError(405, "methodNotAllowed", f"{method} of an upload needs an upload_id")
        kind = args.get("uploadType", "")
        conditions = Conditions.from_query(args)
        if kind == "media":
            name = args.get("name", "")
            attrs = {"contentType": request.headers.get("Content-Type"), "contentEncoding": args.get("contentEncoding")}
            record = self.backend.insert_object(bucket, name, self._save(_body(request)), attrs, conditions)
            return _json(200, object_resource(record, base))
        if kind == "multipart":
            (_, meta_raw), (media_headers, data) = _multipart(_body(request).read(),
                                                               request.headers.get("Content-Type", ""))
            meta = _metadata(meta_raw)
            name = args.get("name") or meta.get("name") or ""
            attrs = {k: meta.get(k) for k in WRITABLE}
            attrs["contentType"] = attrs["contentType"] or media_headers.get("content-type")
            attrs["contentEncoding"] = args.get("contentEncoding") or attrs["contentEncoding"]
            declared = {k: meta[k] for k in ("md5Hash", "crc32c") if meta.get(k)}
            scratch = self.backend.store.scratch()
            scratch.write_bytes(data)
            record = self.backend.insert_object(bucket, name, scratch, attrs, conditions, declared)
            return _json(200, object_resource(record, base))
        if kind == "resumable":
            meta = _metadata(request.get_data())
            name = args.get("name") or meta.get("name") or ""
            attrs = {k: meta.get(k) for k in WRITABLE}
            attrs["contentType"] = attrs["contentType"] or request.headers.get("X-Upload-Content-Type")
            attrs["contentEncoding"] = args.get("contentEncoding") or attrs["contentEncoding"]
            declared = {k: meta[k] for k in ("md5Hash", "crc32c") if meta.get(k)}
            upload_id = uploads.start(bucket, name, attrs, conditions, declared)
            location = (f"{base}upload/storage/v1/b/{quote(bucket, safe='')}/o?uploadType=resumable"
                        f"&name={quote(name, safe='')}&upload_id={upload_id}")
            return Response(b"", status=200, headers={"Location": location, "X-GUploader-UploadID": upload_id})
        raise bad_request("Upload requests must include an uploadType URL parameter (media, multipart or "
                          f"resumable) and a URL-encoded object name; got uploadType={kind!r}.")

    def _save(self, stream: IO[bytes]) -> Path:
        path = self.backend.store.scratch()
        with open(path, "wb") as out:
            shutil.copyfileobj(stream, out, _CHUNK)
        return path

    # -- downloads --------------------------------------------------------------------------
    def _media(self, request: Request, bucket: str, name: str) -> Response:
        record = self.backend.get_object(bucket, name, request.args.get("generation"),
                                         Conditions.from_query(request.args))
        size = int(record.get("size", 0))
        encoding = record.get("contentEncoding") or ""
        headers = {
            "Content-Type": record.get("contentType", "application/octet-stream"),
            "X-Goog-Generation": str(record["generation"]),
            "X-Goog-Metageneration": str(record["metageneration"]),
            "X-Goog-Hash": f"crc32c={record['crc32c']},md5={record['md5Hash']}",
            "X-Goog-Stored-Content-Length": str(size),
            "X-Goog-Stored-Content-Encoding": encoding or "identity",
            "ETag": f'"{record["md5Hash"]}"',
            "Last-Modified": http_date(record["updated"]),
            "Accept-Ranges": "bytes",
            **{f"X-Goog-Meta-{k}": str(v) for k, v in (record.get("metadata") or {}).items()},
        }
        for key, header in (("contentDisposition", "Content-Disposition"), ("contentLanguage", "Content-Language"),
                            ("cacheControl", "Cache-Control")):
            if record.get(key):
                headers[header] = record[key]
        if name.endswith("/"):
            return Response(b"", status=200, headers=headers)
        path = self.backend.object_path(bucket, name)
        if encoding == "gzip" and "gzip" not in request.headers.get("Accept-Encoding", ""):
            data = gzip.decompress(path.read_bytes())  # transcoding: the whole object, any Range ignored
            return Response(data if request.method != "HEAD" else b"", status=200, headers=headers)
        if encoding:
            headers["Content-Encoding"] = encoding
        status, start, length = 200, 0, size
        match = _RANGE.match(request.headers.get("Range", "").replace(" ", ""))
        if match and size and match.group(1) + match.group(2):
            first, last = match.groups()
            start = max(size - int(last), 0) if not first else int(first)
            end = size - 1 if not first or not last else min(int(last), size - 1)
            if start >= size:
                return Response("The requested range cannot be satisfied.", status=416, mimetype="text/plain",
                                headers={"Content-Range": f"bytes */{size}"})
            if end >= start:
                status, length = 206, end - start + 1
                headers["Content-Range"] = f"bytes {start}-{end}/{size}"
        headers["Content-Length"] = str(length)
        if request.method == "HEAD":
            return Response(b"", status=status, headers=headers)
        f = open(path, "rb")  # opened now: a delete while the bytes stream does not cut them short

        def stream() -> Any:
            f.seek(start)
            left = length
            while left > 0 and (chunk := f.read(min(_CHUNK, left))):
                left -= len(chunk)
                yield chunk

        response = Response(stream(), status=status, headers=headers, direct_passthrough=True)
        response.call_on_close(f.close)
        return response
