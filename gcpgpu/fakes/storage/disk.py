"""Objects as files: gs://BUCKET/NAME is ROOT/gcs/BUCKET/NAME, the file a job sees at /gcs/BUCKET/NAME.

ROOT is the emulator's storage root (host/storage.py: where cluster jobs' --output-dir folders
already lived), so what a job writes is an object and what a client uploads is a file a job reads.

What Google keeps beside the bytes (generation, metageneration, md5Hash, crc32c, content type,
custom metadata) lives apart, in ROOT/.gcs-meta/BUCKET/: one JSON record per object, named by the
SHA-256 of the object's name (names are up to 1024 bytes; file names 255), so a bucket's folder
holds only objects. A record notes its file's size and mtime: a file that no longer matches was
written by a job, and is taken in when next read with a new generation and fresh hashes, as an
object rewritten through Cloud Storage FUSE gets. Uploads are assembled in ROOT/.gcs-uploads and
moved into place whole, so a job never reads half an object.

Keeping objects as files has one limit Google does not: an object cannot also be the folder of
another ("a" and "a/b"); such an upload is refused with 409 and says why.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import google_crc32c

from .names import conflict, is_bucket_name

if TYPE_CHECKING:
    from ..host.storage import Storage

_CHUNK = 1 << 20


def hashes_of(path: Path) -> tuple[str, str]:
    """(md5Hash, crc32c) of a file, base64 as the JSON API carries them."""
    md5, crc = hashlib.md5(usedforsecurity=False), google_crc32c.Checksum()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            md5.update(chunk)
            crc.update(chunk)
    return base64.b64encode(md5.digest()).decode(), base64.b64encode(crc.digest()).decode()


def _write_json(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)  # whole or not at all: a reader never sees half a record


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, NotADirectoryError, ValueError):
        return None


class ObjectStore:
    """Bucket folders, object files and their records under the emulator's storage root."""

    def __init__(self, disk: Storage) -> None:
        self.disk = disk

    # -- where things are ------------------------------------------------------------------
    @property
    def data(self) -> Path:
        return Path(self.disk.local("gs://", "-"))  # the folder jobs' gs:// and /gcs/ paths resolve into

    @property
    def meta(self) -> Path:
        return self.disk.root / ".gcs-meta"

    def scratch(self) -> Path:
        """A fresh path on the same file system as the buckets (a rename into place is atomic)."""
        folder = self.disk.root / ".gcs-uploads"
        folder.mkdir(parents=True, exist_ok=True)
        return folder / uuid.uuid4().hex

    def bucket_dir(self, bucket: str) -> Path:
        return self.data / bucket

    def path(self, bucket: str, name: str) -> Path:
        """The file (or, for 'x/', folder) of an object; a link a job made that leads out of the bucket is refused."""
        base = self.bucket_dir(bucket)
        path = base.joinpath(*name.rstrip("/").split("/"))
        real = Path(os.path.realpath(path))
        if real != path and not real.is_relative_to(os.path.realpath(base)):
            raise conflict(f"gs://{bucket}/{name} is a link out of the bucket in the emulator's storage; "
                           "it is not served")
        return path

    def _record_path(self, bucket: str, name: str) -> Path:
        return self.meta / bucket / "objects" / hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()

    # -- buckets ----------------------------------------------------------------------------
    def bucket_names(self) -> list[str]:
        """Every bucket: made through the API, or by a job writing under /gcs/BUCKET (a folder whose name
        no bucket could have is not one)."""
        names = set()
        for folder in (self.data, self.meta):
            if folder.is_dir():
                names.update(p.name for p in folder.iterdir() if p.is_dir())
        return sorted(n for n in names if is_bucket_name(n) and self.has_bucket(n))

    def has_bucket(self, bucket: str) -> bool:
        return self.bucket_dir(bucket).is_dir()

    def bucket_record(self, bucket: str) -> dict | None:
        return _read_json(self.meta / bucket / "bucket.json")

    def save_bucket(self, bucket: str, record: dict) -> None:
        self.bucket_dir(bucket).mkdir(parents=True, exist_ok=True)
        _write_json(self.meta / bucket / "bucket.json", record)

    def remove_bucket(self, bucket: str) -> None:
        shutil.rmtree(self.bucket_dir(bucket), ignore_errors=True)
        shutil.rmtree(self.meta / bucket, ignore_errors=True)

    # -- objects ----------------------------------------------------------------------------
    def record(self, bucket: str, name: str) -> dict | None:
        """The object's record, taken in afresh when its file was written outside the API; None: no such object."""
        path = self.path(bucket, name)
        held = _read_json(self._record_path(bucket, name))
        if name.endswith("/"):
            return held if held and path.is_dir() else None
        try:
            st = os.lstat(path)
        except (FileNotFoundError, NotADirectoryError):
            return None
        if not os.path.isfile(path) or os.path.islink(path):
            return None
        if held and held.get("size") == st.st_size and held.get("mtimeNs") == st.st_mtime_ns:
            return held
        return self._adopt(bucket, name, path, st, held)

    def _adopt(self, bucket: str, name: str, path: Path, st: os.stat_result, held: dict | None) -> dict:
        md5, crc = hashes_of(path)
        generation = max(st.st_mtime_ns // 1000, int(held["generation"]) + 1 if held else 0)
        record = {
            "bucket": bucket, "name": name, "generation": generation, "metageneration": 1,
            # Not guessed from the name: system tables call a PyTorch '.pt' file a SNES page table.
            "contentType": "application/octet-stream",
            "size": st.st_size, "mtimeNs": st.st_mtime_ns, "md5Hash": md5, "crc32c": crc,
            "timeCreated": st.st_mtime, "updated": st.st_mtime,
        }
        _write_json(self._record_path(bucket, name), record)
        return record

    def put(self, bucket: str, name: str, source: Path | None, record: dict) -> dict:
        """Move `source` into place as the object (None: a folder placeholder) and keep its record."""
        path = self.path(bucket, name)
        self._make_parents(bucket, name, path)
        if source is None:
            if path.exists() and not path.is_dir():
                raise conflict(f"gs://{bucket}/{name.rstrip('/')} is an object: in the gcpgpu emulator, where "
                               "objects are files, it cannot also be a folder")
            path.mkdir(exist_ok=True)
            _write_json(self._record_path(bucket, name), record)
            return record
        if path.is_dir():
            raise conflict(f"gs://{bucket}/{name}/ holds other objects: in the gcpgpu emulator, where objects are "
                           f"files, {name!r} cannot also be an object")
        os.replace(source, path)
        st = os.stat(path)
        record = {**record, "size": st.st_size, "mtimeNs": st.st_mtime_ns}
        _write_json(self._record_path(bucket, name), record)
        return record

    def _make_parents(self, bucket: str, name: str, path: Path) -> None:
        base = self.bucket_dir(bucket)
        for parent in reversed(path.parents):
            if parent == base or not parent.is_relative_to(base):
                continue
            if parent.exists() and not parent.is_dir():
                taken = parent.relative_to(base).as_posix()
                raise conflict(f"gs://{bucket}/{taken} is an object: in the gcpgpu emulator, where objects are "
                               f"files, it cannot also be the folder of {name!r}")
        path.parent.mkdir(parents=True, exist_ok=True)

    def save_record(self, bucket: str, name: str, record: dict) -> None:
        """Keep changed metadata (a patch); the bytes stay as they are."""
        _write_json(self._record_path(bucket, name), record)

    def remove(self, bucket: str, name: str) -> None:
        path = self.path(bucket, name)
        self._record_path(bucket, name).unlink(missing_ok=True)
        if name.endswith("/"):
            try:
                path.rmdir()  # a placeholder of a folder that still holds objects: only its record goes
            except OSError:
                return
        else:
            path.unlink(missing_ok=True)
        # Folders left empty were only the path to the object (unless they are placeholders themselves).
        base = self.bucket_dir(bucket)
        for parent in path.parents:
            if parent == base or not parent.is_relative_to(base):
                break
            if self._record_path(bucket, parent.relative_to(base).as_posix() + "/").exists():
                break
            try:
                parent.rmdir()
            except OSError:
                break

    def names(self, bucket: str, prefix: str = "") -> list[str]:
        """Every object name in the bucket that starts with `prefix`, in Google's order (UTF-8 bytes)."""
        base = self.bucket_dir(bucket)
        start_rel = prefix.rpartition("/")[0].split("/")
        # Walk from the prefix's folder; a prefix no object name could start with ('..', '//') walks
        # from the top, and matches nothing, rather than leading the walk out of the bucket.
        start = base if any(s in ("", ".", "..") for s in start_rel) else base.joinpath(*start_rel)
        found: list[str] = []
        if not start.is_dir() or os.path.islink(start):
            return found
        for folder, dirs, files in os.walk(start):
            rel = Path(folder).relative_to(base).as_posix()
            rel = "" if rel == "." else rel + "/"
            for f in files:
                name = rel + f
                if name.startswith(prefix) and not os.path.islink(os.path.join(folder, f)):
                    found.append(name)
            keep = []
            for d in dirs:
                sub = rel + d + "/"
                if os.path.islink(os.path.join(folder, d)) or not (sub.startswith(prefix) or prefix.startswith(sub)):
                    continue
                keep.append(d)
                if sub.startswith(prefix) and self._record_path(bucket, sub).exists():
                    found.append(sub)
            dirs[:] = keep
        return sorted(found, key=lambda n: n.encode("utf-8", "surrogatepass"))
