"""The JSON resources (storage#bucket, storage#object) as Cloud Storage writes them.

Links point back at the address the request came to, so a client that follows an object's
mediaLink (gcloud does, to download) reaches this emulator, never storage.googleapis.com. Numbers
Google sends as strings (size, generation, metageneration, projectNumber) are strings here too.
"""

from __future__ import annotations

import base64
import hashlib
from urllib.parse import quote

from ..core import stable_number
from .names import timestamp

_OPTIONAL = ("contentEncoding", "contentDisposition", "contentLanguage", "cacheControl", "metadata", "customTime",
             "componentCount")


def project_number(project: str) -> str:
    """The number the emulator gives a project id (the same as its Compute and Vertex AI give it)."""
    return project if project.isdigit() else str(100000000000 + stable_number(project, 899999999999))


def _etag(*parts: object) -> str:
    return base64.b64encode(hashlib.sha256("/".join(map(str, parts)).encode()).digest()[:9]).decode()


def bucket_link(base: str, bucket: str) -> str:
    return f"{base}storage/v1/b/{quote(bucket, safe='')}"


def object_link(base: str, bucket: str, name: str) -> str:
    return f"{bucket_link(base, bucket)}/o/{quote(name, safe='~')}"


def bucket_resource(record: dict, base: str) -> dict:
    """A bucket record as storage#bucket; `base` is the emulator's URL ending in '/'."""
    name = record["name"]
    project = record.get("project")
    out = {
        "kind": "storage#bucket",
        "selfLink": bucket_link(base, name),
        "id": name,
        "name": name,
        "metageneration": str(record["metageneration"]),
        "location": record.get("location", "US"),
        "locationType": record.get("locationType", "multi-region"),
        "storageClass": record.get("storageClass", "STANDARD"),
        "etag": _etag(name, record["metageneration"]),
        "timeCreated": timestamp(record["timeCreated"]),
        "updated": timestamp(record["updated"]),
        "iamConfiguration": record.get("iamConfiguration") or {
            "bucketPolicyOnly": {"enabled": False},
            "uniformBucketLevelAccess": {"enabled": False},
            "publicAccessPrevention": "inherited",
        },
        "rpo": "DEFAULT",
    }
    if project:
        out["projectNumber"] = project_number(project)
    for key in ("labels", "versioning"):
        if record.get(key):
            out[key] = record[key]
    return out


def object_resource(record: dict, base: str) -> dict:
    """An object record as storage#object, with selfLink and mediaLink on this emulator."""
    bucket, name, gen = record["bucket"], record["name"], record["generation"]
    link = object_link(base, bucket, name)
    out = {
        "kind": "storage#object",
        "id": f"{bucket}/{name}/{gen}",
        "selfLink": link,
        "mediaLink": f"{base}download/storage/v1/b/{quote(bucket, safe='')}/o/{quote(name, safe='~')}"
                     f"?generation={gen}&alt=media",
        "name": name,
        "bucket": bucket,
        "generation": str(gen),
        "metageneration": str(record["metageneration"]),
        "contentType": record.get("contentType", "application/octet-stream"),
        "storageClass": record.get("storageClass", "STANDARD"),
        "size": str(record.get("size", 0)),
        "md5Hash": record["md5Hash"],
        "crc32c": record["crc32c"],
        "etag": _etag(bucket, name, gen, record["metageneration"]),
        "timeCreated": timestamp(record["timeCreated"]),
        "updated": timestamp(record["updated"]),
        "timeStorageClassUpdated": timestamp(record["timeCreated"]),
    }
    for key in _OPTIONAL:
        if record.get(key) not in (None, "", {}):
            out[key] = record[key]
    return out
