"""Cloud Storage's state and rules: buckets of a project, objects with generations, preconditions.

Every service of the emulator that keeps files in Cloud Storage uses this one backend: the JSON API
(rest.py), Cloud Build's sources, and (through the same folder, disk.py) cluster jobs' outputs and
mounts. Generations are microseconds, as Google's are, and grow with every write of a name;
metageneration counts metadata changes. Versioning is not kept: only the live generation exists.
"""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core import ApiError, Clock
from . import listing
from .conditions import NONE, Conditions
from .disk import ObjectStore, hashes_of
from .names import (
    bad_request,
    check_bucket_name,
    check_object_name,
    conflict,
    no_bucket,
    no_object,
)
from .uploads import Uploads

if TYPE_CHECKING:
    from ..host.storage import Storage

# Object fields a client may set (on insert, patch, update, copy), beside name and bucket.
WRITABLE = ("contentType", "contentEncoding", "contentDisposition", "contentLanguage", "cacheControl",
            "metadata", "customTime", "storageClass")
BUCKET_WRITABLE = ("labels", "versioning", "storageClass", "iamConfiguration")
MULTI_REGIONS = ("US", "EU", "ASIA")




class StorageBackend:
    """Buckets and objects over one folder shared with the emulator's jobs."""

    def __init__(self, disk: Storage, clock: Clock | None = None) -> None:
        self.disk = disk
        self.store = ObjectStore(disk)
        self.clock = clock or Clock()
        self._lock = threading.RLock()
        self.uploads = Uploads(self.store, self.check_insert, self.insert_object)

    def reset(self) -> None:
        """Forget every bucket, object and upload session."""
        self.uploads.reset()
        self.disk.reset()

    def _now(self) -> float:
        return self.clock.now()

    # -- buckets ----------------------------------------------------------------------------
    def insert_bucket(self, project: str, body: dict) -> dict:
        if not project:
            raise ApiError(400, "required", "Required parameter: project")
        name = body.get("name") or ""
        if not name:
            raise ApiError(400, "required", "Required field 'name' not specified")
        check_bucket_name(name)
        with self._lock:
            if self.store.has_bucket(name):
                owner = self.get_bucket(name).get("project")
                if owner in (None, project):
                    raise conflict("Your previous request to create the named bucket succeeded and you already own it.")
                raise conflict("The requested bucket name is not available. The bucket namespace is shared by all "
                               "users of the system. Please select a different name and try again.")
            now = self._now()
            location = str(body.get("location") or "US").upper()
            record = {
                **{k: body[k] for k in BUCKET_WRITABLE if k in body},
                "name": name, "project": project, "location": location,
                "locationType": "multi-region" if location in MULTI_REGIONS else "region",
                "storageClass": body.get("storageClass") or "STANDARD",
                "timeCreated": now, "updated": now, "metageneration": 1,
            }
            self.store.save_bucket(name, record)
            return record

    def get_bucket(self, name: str, conditions: Conditions = NONE) -> dict:
        check_bucket_name(name)
        if not self.store.has_bucket(name):
            raise no_bucket()
        record = self.store.bucket_record(name)
        if record is None:  # made by a job writing under /gcs/NAME: no project is known
            made = os.stat(self.store.bucket_dir(name)).st_mtime
            record = {"name": name, "project": None, "location": "US", "locationType": "multi-region",
                      "storageClass": "STANDARD", "timeCreated": made, "updated": made, "metageneration": 1}
        self._check_bucket(record, conditions)
        return record

    @staticmethod
    def _check_bucket(record: dict, conditions: Conditions) -> None:
        if conditions.generation_match is not None or conditions.generation_not_match is not None:
            raise bad_request("Buckets take ifMetagenerationMatch and ifMetagenerationNotMatch only")
        Conditions(metageneration_match=conditions.metageneration_match,
                   metageneration_not_match=conditions.metageneration_not_match).check(
            {"generation": 0, "metageneration": record["metageneration"]})

    def list_buckets(self, project: str, prefix: str = "", max_results: Any = None,
                     page_token: str = "") -> tuple[list[dict], str | None]:
        """The project's buckets (and those jobs made, whose project is unknown), a page at a time."""
        if not project:
            raise ApiError(400, "required", "Required parameter: project")
        records = [self.get_bucket(n) for n in self.store.bucket_names() if n.startswith(prefix)]
        keys = [(r["name"], False) for r in records if r.get("project") in (None, project)]
        shown, token = listing.page(keys, page_token, max_results)
        by_name = {r["name"]: r for r in records}
        return [by_name[k] for k, _ in shown], token

    def patch_bucket(self, name: str, body: dict, conditions: Conditions = NONE) -> dict:
        with self._lock:
            record = dict(self.get_bucket(name, conditions))
            for key in BUCKET_WRITABLE:
                if key in body:
                    record[key] = body[key]
            record.update(updated=self._now(), metageneration=int(record["metageneration"]) + 1)
            self.store.save_bucket(name, record)
            return record

    def delete_bucket(self, name: str, conditions: Conditions = NONE) -> None:
        with self._lock:
            self.get_bucket(name, conditions)
            if self.store.names(name):
                raise conflict("The bucket you tried to delete is not empty.")
            self.uploads.drop_bucket(name)
            self.store.remove_bucket(name)

    # -- objects ----------------------------------------------------------------------------
    def _bucket(self, bucket: str) -> None:
        check_bucket_name(bucket)
        if not self.store.has_bucket(bucket):
            raise no_bucket()

    def check_insert(self, bucket: str, name: str, conditions: Conditions = NONE) -> None:
        """What an upload is checked against before its bytes arrive (a resumable session's start)."""
        self._bucket(bucket)
        check_object_name(name)
        conditions.check(self.store.record(bucket, name))

    def insert_object(self, bucket: str, name: str, source: Path, attrs: dict | None = None,
                      conditions: Conditions = NONE, declared: dict | None = None) -> dict:
        """Make `source` (a file, moved into place) the live generation of gs://bucket/name."""
        attrs, declared = attrs or {}, declared or {}
        try:
            md5, crc = hashes_of(source)  # before the lock: other writes go on while a big file is read
            with self._lock:
                self.check_insert(bucket, name, conditions)
                current = self.store.record(bucket, name)
                if declared.get("md5Hash") and declared["md5Hash"] != md5:
                    raise bad_request(f'Provided MD5 hash "{declared["md5Hash"]}" doesn\'t match calculated MD5 hash "{md5}".')
                if declared.get("crc32c") and declared["crc32c"] != crc:
                    raise bad_request(f'Provided CRC32C "{declared["crc32c"]}" doesn\'t match calculated CRC32C "{crc}".')
                folder = name.endswith("/")
                if folder and os.path.getsize(source):
                    raise bad_request(f"Object {name!r} ends with '/' and has content: the gcpgpu emulator keeps "
                                      "such names as folders, which hold no bytes")
                now = self._now()
                record = {
                    **{k: attrs[k] for k in WRITABLE if attrs.get(k) not in (None, "", {})},
                    "bucket": bucket, "name": name, "generation": self._next_generation(current),
                    "metageneration": 1, "md5Hash": md5, "crc32c": crc, "timeCreated": now, "updated": now,
                }
                record.setdefault("contentType", "application/octet-stream")
                if folder:
                    record["size"] = 0
                    return self.store.put(bucket, name, None, record)
                return self.store.put(bucket, name, source, record)
        finally:
            Path(source).unlink(missing_ok=True)  # moved into place, or refused: never left behind

    def _next_generation(self, current: dict | None) -> int:
        return max(int(self._now() * 1_000_000), int(current["generation"]) + 1 if current else 0)

    def get_object(self, bucket: str, name: str, generation: Any = None, conditions: Conditions = NONE) -> dict:
        self._bucket(bucket)
        check_object_name(name)
        record = self.store.record(bucket, name)
        if record is None or (generation not in (None, "") and str(generation) != str(record["generation"])):
            raise no_object(bucket, name)
        conditions.check(record)
        return record

    def object_path(self, bucket: str, name: str) -> Path:
        return self.store.path(bucket, name)

    def list_objects(self, bucket: str, prefix: str = "", delimiter: str = "", max_results: Any = None,
                     page_token: str = "", start_offset: str = "", end_offset: str = "", match_glob: str = "",
                     include_trailing: bool = False) -> tuple[list[dict], list[str], str | None]:
        """(objects, prefixes, next page token) as objects.list answers."""
        self._bucket(bucket)
        keys = listing.entries(self.store.names(bucket, prefix), prefix, delimiter, start_offset, end_offset,
                               match_glob, include_trailing)
        shown, token = listing.page(keys, page_token, max_results)
        items = [r for k, is_prefix in shown if not is_prefix and (r := self.store.record(bucket, k))]
        return items, [k for k, is_prefix in shown if is_prefix], token

    def delete_object(self, bucket: str, name: str, generation: Any = None, conditions: Conditions = NONE) -> None:
        with self._lock:
            self.get_object(bucket, name, generation, conditions)
            self.store.remove(bucket, name)

    def patch_object(self, bucket: str, name: str, body: dict, conditions: Conditions = NONE,
                     replace: bool = False) -> dict:
        """objects.patch (metadata keys merged, a null removes one) or, with replace, objects.update."""
        with self._lock:
            record = dict(self.get_object(bucket, name, None, conditions))
            for key in WRITABLE:
                if key == "metadata" and not replace and isinstance(body.get(key), dict):
                    merged = {**(record.get("metadata") or {}), **body["metadata"]}
                    record["metadata"] = {k: v for k, v in merged.items() if v is not None}
                elif key in body or replace:
                    if body.get(key) is None:
                        record.pop(key, None)
                    else:
                        record[key] = body[key]
            record.setdefault("contentType", "application/octet-stream")
            record.update(updated=self._now(), metageneration=int(record["metageneration"]) + 1)
            self.store.save_record(bucket, name, record)
            return record

    def copy_object(self, bucket: str, name: str, to_bucket: str, to_name: str, body: dict | None = None,
                    source_generation: Any = None, conditions: Conditions = NONE) -> dict:
        """objects.copy / objects.rewrite: the source's bytes and metadata, overlaid with `body`'s."""
        source = self.get_object(bucket, name, source_generation)
        scratch = self.store.scratch()
        if not name.endswith("/"):
            shutil.copyfile(self.store.path(bucket, name), scratch)
        else:
            scratch.touch()
        attrs = {**{k: source[k] for k in WRITABLE if k in source}, **{k: v for k, v in (body or {}).items()
                                                                     if k in WRITABLE}}
        return self.insert_object(to_bucket, to_name, scratch, attrs, conditions)

    def compose(self, bucket: str, name: str, body: dict, conditions: Conditions = NONE) -> dict:
        """objects.compose: up to 32 objects of the bucket, in order, as one."""
        sources = body.get("sourceObjects") or []
        if not 1 <= len(sources) <= 32:
            raise bad_request(f"The number of source components provided ({len(sources)}) is not between 1 and 32.")
        scratch = self.store.scratch()
        count = 0
        try:
            with open(scratch, "wb") as out:
                for src in sources:
                    record = self.get_object(bucket, src.get("name") or "", src.get("generation"))
                    pre = src.get("objectPreconditions") or {}
                    Conditions(generation_match=pre.get("ifGenerationMatch")).check(record)
                    count += int(record.get("componentCount") or 1)
                    with open(self.store.path(bucket, record["name"]), "rb") as f:
                        shutil.copyfileobj(f, out)
        except ApiError:
            scratch.unlink(missing_ok=True)
            raise
        attrs = {k: v for k, v in (body.get("destination") or {}).items() if k in WRITABLE}
        record = self.insert_object(bucket, name, scratch, attrs, conditions)
        record["componentCount"] = count
        self.store.save_record(bucket, name, record)
        return record

    # -- for the emulator's other services --------------------------------------------------
    def read_bytes(self, bucket: str, name: str) -> bytes | None:
        """An object's bytes, or None where there is no such bucket or object (Cloud Build's source fetch)."""
        try:
            self.get_object(bucket, name)
        except ApiError:
            return None
        return self.store.path(bucket, name).read_bytes()

    def put_bytes(self, bucket: str, name: str, data: bytes, content_type: str = "application/octet-stream") -> dict:
        """Write one object whole (the bucket must exist)."""
        scratch = self.store.scratch()
        scratch.write_bytes(data)
        return self.insert_object(bucket, name, scratch, {"contentType": content_type})
