"""--workdir: the user's folder, packed by image/pack.py, staged content-addressed in Cloud Storage.

The same tarball serves a cluster and Vertex AI: the image's entrypoint unpacks it into /workdir on
every node or replica (GCPGPU_WORKDIR, node/workspace.py).
"""

from __future__ import annotations

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


def upload(clients: Any, project: str, region: str | None, packed: Packed) -> tuple[str, bool]:
    """Stage the tarball (the bucket made in the job's region when missing); (its gs:// URI, whether it was
    uploaded now: the same content is already there under the same name otherwise)."""
    from google.api_core import exceptions

    client = clients.storage()
    name = staging_bucket(project)
    blob = client.bucket(name).blob(object_name(packed))
    try:
        if blob.exists():
            return uri(project, packed), False
    except exceptions.NotFound:
        pass
    try:
        client.get_bucket(name)
    except exceptions.NotFound:
        # In the job's region, as gcloud makes its staging buckets; the US multi-region when the job
        # names none (a cluster job: its nodes' region is known only later).
        client.create_bucket(name, location=(region or "US").upper())
    blob.upload_from_string(packed.data, content_type="application/gzip")
    return uri(project, packed), True


def stage(clients: Any, project: str, job: Any, *, dry_run: bool, say: Any) -> str:
    """Pack job.spec.workdir and stage it (not under --dry-run, which lists what would go); its gs:// URI."""
    packed = pack(job.spec.workdir)
    target = uri(project, packed)
    if dry_run:
        say(f"workdir: {len(packed.files)} files, {mib(len(packed.data))} packed; would upload to {target}:")
        for rel, size in packed.files:
            say(f"  {rel} ({size} bytes)")
        return target
    target, fresh = upload(clients, project, job.region, packed)
    say(f"workdir: {len(packed.files)} files, {mib(len(packed.data))} "
        + ("uploaded to " if fresh else "already staged at ") + target)
    return target
