"""Cloud Storage's JSON API in the emulator: one storage that every service and every job shares.

names.py      bucket and object names as Google checks them (plus what keeping objects as files needs),
              and the errors Google's clients expect (404 notFound, 409 conflict, 412 conditionNotMet).
disk.py       objects as files under the emulator's storage root, where jobs see them at /gcs/BUCKET;
              their metadata (generation, md5Hash, crc32c, content type) kept apart, refreshed when a
              job changed a file.
listing.py    list semantics: prefix, delimiter, startOffset/endOffset, matchGlob, pageToken.
conditions.py preconditions (ifGenerationMatch, ifMetagenerationMatch, ...): 412 when one does not hold.
backend.py    buckets and objects: insert, get, list, patch, delete, copy, compose.
uploads.py    resumable upload sessions (POST to start, PUT chunks with Content-Range, 308 until done).
resources.py  the JSON resources (storage#bucket, storage#object) with links back to this emulator.
rest.py       the wire: /storage/v1/..., /upload/storage/v1/..., /download/storage/v1/...
__main__.py   `python -m gcpgpu.fakes.storage make-bucket B`: a bucket from a shell, without gcloud.

google-cloud-storage, `gcloud storage` (api_endpoint_overrides/storage) and gcpgpu see the same buckets;
cluster jobs' --output-dir and mounts, and Cloud Build's sources, are objects here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .backend import StorageBackend

__all__ = ["StorageBackend"]


def __getattr__(name: str):
    if name == "StorageBackend":
        from .backend import StorageBackend

        return StorageBackend
    raise AttributeError(name)
