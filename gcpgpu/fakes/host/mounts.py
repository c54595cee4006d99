"""A job's --mount (or cluster --output-dir) of a bucket that does not exist fails, in the words the job would
fail with on Google.

Nothing on Google refuses such a job when it is created: the bucket is missing when the job starts.
- A cluster node's job agent (templates/job_agent.sh.j2) mounts each --mount bucket with Cloud Storage
  FUSE before it starts the container; gcsfuse cannot list a bucket that does not exist, and the agent
  reports the node FAILED with "mounting gs://B with Cloud Storage FUSE failed: " and gcsfuse's last
  line (gcsfuse 2.x: "... SetUpBucket: Error in iterating through objects: storage: bucket doesn't
  exist", the Go client's ErrBucketNotExist).
- Vertex AI mounts every bucket the job may read under /gcs; a missing one is simply not there, and
  the image's entrypoint (gcpgpu/node/workspace.py make_mounts) stops with "GCPGPU_MOUNTS: SOURCE on
  TARGET: the bucket is not mounted at /gcs/B". The emulator fails the job at once with that line.

A bucket exists here when the emulator's Cloud Storage has it (made through the API, or by a job that
wrote under /gcs/BUCKET); the job's own output folders never create a bucket it mounts.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..storage.names import is_bucket_name

if TYPE_CHECKING:
    from .storage import Storage

GCSFUSE_NO_BUCKET = "SetUpBucket: Error in iterating through objects: storage: bucket doesn't exist"


def bucket_exists(storage: Storage, bucket: str) -> bool:
    """Whether the emulator's Cloud Storage holds `bucket` (its folder, as storage/disk.py keeps buckets)."""
    return is_bucket_name(bucket) and Path(storage.local(f"gs://{bucket}", "-")).is_dir()


def cluster_failure(job: dict, storage: Storage) -> str | None:
    """The job agent's FAILED message for a cluster job that mounts a missing bucket; None when all exist.

    The agent mounts, in this order, each of the record's `gcs_buckets` (the --output-dir's bucket, the
    staging bucket of a --workdir, each writable --mount's) and then each read-only --mount's bucket, all
    with Cloud Storage FUSE: an --output-dir in a missing bucket fails as a --mount of it does."""
    fuse = [(bucket, False) for bucket in job.get("gcs_buckets") or []]
    fuse += [(m.get("bucket"), bool(m.get("ro"))) for m in job.get("user_mounts") or [] if isinstance(m, dict)]
    for bucket, ro in fuse:
        if isinstance(bucket, str) and not bucket_exists(storage, bucket):
            how = " read-only" if ro else ""
            return f"mounting gs://{bucket}{how} with Cloud Storage FUSE failed: {GCSFUSE_NO_BUCKET}"
    return None


def vertex_failure(env: dict[str, str], storage: Storage) -> str | None:
    """The entrypoint's line for a Vertex AI replica whose GCPGPU_MOUNTS names a missing bucket; None when all
    exist (or when the variable is not one the entrypoint would read: it says what is wrong with it itself)."""
    try:
        mounts: Any = json.loads(env.get("GCPGPU_MOUNTS") or "[]")
    except ValueError:
        return None
    for mount in mounts if isinstance(mounts, list) else []:
        source = mount.get("source") if isinstance(mount, dict) else None
        if not isinstance(source, str) or not source.startswith("gs://"):
            continue
        bucket = source[len("gs://"):].split("/", 1)[0]
        if not bucket_exists(storage, bucket):
            return (f"GCPGPU_MOUNTS: {source} on {mount.get('target')}: the bucket is not mounted at /gcs/{bucket} "
                    f"(Vertex AI mounts the buckets that exist; gs://{bucket} does not)")
    return None
