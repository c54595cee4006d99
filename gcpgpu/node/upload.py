"""`python -m gcpgpu.node.upload gs://BUCKET/PATH FILE...`: the entrypoint copies a profile's files to
Cloud Storage. Apart from the preflight (node/launch.py), which must not import a Google client."""

from __future__ import annotations

import sys
from pathlib import Path


def upload(destination: str, files: list[str]) -> None:
    """Copy files to a gs:// folder with google-cloud-storage (the image has it; gcloud it may not)."""
    from google.cloud import storage  # imported here: only profiling runs upload

    bucket_name, _, prefix = destination[len("gs://"):].partition("/")
    bucket = storage.Client().bucket(bucket_name)
    for path in files:
        blob = bucket.blob(f"{prefix.rstrip('/')}/{Path(path).name}".lstrip("/"))
        blob.upload_from_filename(path)
        print(f"gs://{bucket_name}/{blob.name}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) < 2 or not argv[0].startswith("gs://"):
        print("gcpgpu-entrypoint: usage: python -m gcpgpu.node.upload gs://BUCKET/PATH FILE...", file=sys.stderr)
        return 2
    upload(argv[0], argv[1:])
    return 0


if __name__ == "__main__":
    sys.exit(main())
