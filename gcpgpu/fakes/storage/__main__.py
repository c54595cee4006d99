"""Make buckets in a running emulator's Cloud Storage from a shell (a job mounts only a bucket that exists):

    python -m gcpgpu.fakes.storage make-bucket my-bucket [--location us-central1] [--project P]

what `gcloud storage buckets create gs://my-bucket` does (on Google, or here through `gcpgpu emulator
gcloud-env`), without gcloud. A bucket that exists already is said and kept. The emulator is found from
--emulator HOST:PORT or GCPGPU_EMULATOR (its REST address); the project from --project,
GOOGLE_CLOUD_PROJECT or CLOUDSDK_CORE_PROJECT (bucket names are global: any project works here).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.error
import urllib.parse
import urllib.request


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gcpgpu.fakes.storage", description=__doc__.split("\n")[0])
    parser.add_argument("--emulator", default=os.environ.get("GCPGPU_EMULATOR"), help="HOST:PORT (REST)")
    sub = parser.add_subparsers(dest="what", required=True)
    make = sub.add_parser("make-bucket", help="make buckets (kept when they exist)")
    make.add_argument("buckets", nargs="+", metavar="BUCKET")
    make.add_argument("--location", default="US", help="a region or multi-region (default US)")
    make.add_argument("--project", default=os.environ.get("GOOGLE_CLOUD_PROJECT")
                      or os.environ.get("CLOUDSDK_CORE_PROJECT") or "emulator-project")
    args = parser.parse_args(argv)
    if not args.emulator:
        parser.error("no emulator: pass --emulator HOST:PORT or set GCPGPU_EMULATOR")
    for bucket in args.buckets:
        name = bucket.removeprefix("gs://").rstrip("/")
        url = f"http://{args.emulator}/storage/v1/b?project={urllib.parse.quote(args.project)}"
        request = urllib.request.Request(url, json.dumps({"name": name, "location": args.location}).encode(),
                                         {"Content-Type": "application/json"}, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=30):  # noqa: S310 - the loopback emulator
                print(f"made gs://{name} in the emulator at {args.emulator}", file=sys.stderr)
        except urllib.error.HTTPError as e:
            message = json.loads(e.read() or b"{}").get("error", {}).get("message", str(e))
            if e.code == 409 and "already own it" in message:
                print(f"gs://{name} exists already in the emulator at {args.emulator}", file=sys.stderr)
                continue
            print(f"make-bucket gs://{name}: {message}", file=sys.stderr)
            return 1
        except OSError as e:
            print(f"cannot reach the emulator at {args.emulator} ({e})", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
