"""--workdir: the user's folder, packed by image/pack.py, staged content-addressed in Cloud Storage.

The same tarball serves a cluster and Vertex AI: the image's entrypoint unpacks it into /workdir on
every node or replica (GCPGPU_WORKDIR, node/workspace.py).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import re
from typing import Any

from gcpgpu.image.pack import MAX_PACKED, Packed, mib, pack  # noqa: F401 - the packer's names, for callers here

STAGING_PREFIX = "gcpgpu-staging"


def object_name(packed: Packed) -> str:
    return f"{STAGING_PREFIX}/workdir-{packed.sha256}.tar.gz"


def staging_bucket(project: str) -> str:
    """gs://PROJECT-gcpgpu-staging (a domain-scoped project's ':' and '.' become '-'), as gcloud names its own."""
    return re.sub(r"[^a-z0-9-]", "-", project.lower()) + "-gcpgpu-staging"


def uri(project: str, packed: Packed) -> str:
    return f"gs://{staging_bucket(project)}/{object_name(packed)}"


def md5_hash(data: bytes) -> str:
    """The bytes' MD5 as Cloud Storage reports an object's md5Hash (base64 of the digest)."""
    return base64.b64encode(hashlib.md5(data, usedforsecurity=False).digest()).decode()


def upload(clients: Any, project: str, region: str | None, packed: Packed,
           say: Any = None) -> tuple[str, bool]:
    """Stage the tarball (the bucket made in the job's region when missing); (its gs:// URI, whether it was
    uploaded now). The upload is skipped only when the object there holds these very bytes: its md5Hash, as
    Cloud Storage computed it, is theirs. A job can write the staging bucket (it is mounted on every node),
    so an object whose bytes no longer match its name is uploaded again. MD5, not CRC32C: a CRC32C is easy to
    match with other bytes; an object without an md5Hash (a composed one) is replaced too."""
    from google.api_core import exceptions

    client = clients.storage()
    name = staging_bucket(project)
    bucket = client.bucket(name)
    stored = None
    with contextlib.suppress(exceptions.NotFound):
        stored = bucket.get_blob(object_name(packed))  # None when the bucket or the object is not there
    if stored is not None:
        if stored.md5_hash == md5_hash(packed.data) and stored.size == len(packed.data):
            return uri(project, packed), False
        if say is not None:
            say(f"workdir: the copy at {uri(project, packed)} does not hold what its name says (changed after it "
                "was staged): uploading it again")
    else:
        try:
            client.get_bucket(name)
        except exceptions.NotFound:
            # In the job's region, as gcloud makes its staging buckets; the US multi-region when the job
            # names none (a cluster job: its nodes' region is known only later).
            client.create_bucket(name, location=(region or "US").upper())
    # checksum: the MD5 goes along, and Cloud Storage refuses bytes that arrive other than they left.
    bucket.blob(object_name(packed)).upload_from_string(packed.data, content_type="application/gzip", checksum="md5")
    return uri(project, packed), True


def stage(clients: Any, project: str, job: Any, *, dry_run: bool, say: Any, packed: Packed | None = None) -> str:
    """Pack job.spec.workdir (unless `packed` already is it) and stage it (not under --dry-run, which lists
    what would go); its gs:// URI."""
    packed = packed if packed is not None else pack(job.spec.workdir)
    target = uri(project, packed)
    if packed.skipped:
        more = len(packed.skipped) - 5
        shown = ", ".join(packed.skipped[:5]) + (f" and {more} more" if more > 0 else "")
        say(f"workdir: left out {len(packed.skipped)} path(s) that lead out of the folder (links): {shown}")
    if dry_run:
        say(f"workdir: {len(packed.files)} files, {mib(len(packed.data))} packed; would upload to {target}:")
        for rel, size in packed.files:
            say(f"  {rel} ({size} bytes)")
        return target
    target, fresh = upload(clients, project, job.region, packed, say=say)
    say(f"workdir: {len(packed.files)} files, {mib(len(packed.data))} "
        + ("uploaded to " if fresh else "already staged at ") + target)
    return target
