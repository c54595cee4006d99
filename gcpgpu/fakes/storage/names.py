"""Bucket and object names as Cloud Storage checks them, and the errors its clients expect.

The messages and reasons are Google's (google-cloud-storage maps the status to NotFound, Conflict,
PreconditionFailed; gcloud prints the message). Objects are files in the emulator, so an object
name also has to be a path: segments that are not empty, '.' or '..' (a trailing '/' names a folder
placeholder, as the console and `gcloud storage folders` make them), none over 255 bytes.
"""

from __future__ import annotations

import re
import time

from ..core import ApiError

_BUCKET = re.compile(r"^[a-z0-9][a-z0-9._-]*[a-z0-9]$")
_IPV4 = re.compile(r"^\d{1,3}(\.\d{1,3}){3}$")
MAX_OBJECT_BYTES = 1024
MAX_SEGMENT_BYTES = 255  # a file name on the emulator's disk


def is_bucket_name(name: str) -> bool:
    """Cloud Storage's bucket naming rules: 3-63 characters (222 with dots, 63 between them), lowercase
    letters, digits, '-', '_' and '.', starting and ending with a letter or digit, no IP address, no 'goog'."""
    parts = name.split(".")
    return (
        bool(_BUCKET.match(name))
        and 3 <= len(name) <= (222 if "." in name else 63)
        and all(0 < len(p) <= 63 for p in parts)
        and not _IPV4.match(name)
        and not name.startswith("goog")
        and "google" not in name
    )


def check_bucket_name(name: str) -> None:
    if not is_bucket_name(name):
        raise ApiError(400, "invalid", f"Invalid bucket name: '{name}'")


def check_object_name(name: str) -> None:
    """Google's rules (1-1024 bytes of UTF-8, no CR/LF, not '.' or '..') and the emulator's own (a path)."""
    raw = name.encode("utf-8", "surrogatepass")
    if not name:
        raise ApiError(400, "required", "Required object name not specified.")
    if len(raw) > MAX_OBJECT_BYTES or "\r" in name or "\n" in name or name in (".", "..") \
            or name.startswith(".well-known/acme-challenge/"):
        raise ApiError(400, "invalid", f"The specified object name is not valid: '{name[:100]}'.")
    segments = name[:-1].split("/") if name.endswith("/") else name.split("/")
    bad = next((s for s in segments if s in ("", ".", "..") or "\0" in s
                or len(s.encode("utf-8", "surrogatepass")) > MAX_SEGMENT_BYTES), None)
    if bad is not None:
        why = "a segment over 255 bytes" if len(bad.encode("utf-8", "surrogatepass")) > MAX_SEGMENT_BYTES \
            else f"the segment {bad!r}"
        raise ApiError(400, "invalid", f"Object name '{name[:100]}' has {why}: the gcpgpu emulator keeps objects as "
                                       "files, so every '/'-separated segment must be a file name")


def no_bucket() -> ApiError:
    return ApiError(404, "notFound", "The specified bucket does not exist.")


def no_object(bucket: str, name: str) -> ApiError:
    return ApiError(404, "notFound", f"No such object: {bucket}/{name}")


def precondition_failed() -> ApiError:
    return ApiError(412, "conditionNotMet", "At least one of the pre-conditions you specified did not hold.")


def conflict(message: str) -> ApiError:
    return ApiError(409, "conflict", message)


def bad_request(message: str, reason: str = "invalid") -> ApiError:
    return ApiError(400, reason, message)


def timestamp(seconds: float) -> str:
    """Cloud Storage's timestamps: RFC 3339, UTC, milliseconds, 'Z'."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{int(seconds % 1 * 1000):03d}Z"


def http_date(seconds: float) -> str:
    """Last-Modified's format."""
    return time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(seconds))
