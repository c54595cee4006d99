"""`cluster up` / `cluster plan`'s shared file system flags (gcpgpu/storage)."""

from __future__ import annotations

from typing import Any

import click

from gcpgpu.cli.options import with_options

STORAGE_OPTIONS = [
    click.option("--filestore", metavar="SIZE",
                 help="Create a Filestore NFS share with the cluster, mounted at /shared on every node and in every "
                      "job, deleted by 'cluster down' (e.g. 1TiB; ZONAL tier: 1-9.75 TiB in 256 GiB steps or "
                      "10-100 TiB in 2.5 TiB steps)."),
    click.option("--filestore-tier", metavar="TIER",
                 help="Filestore tier: ZONAL (default), REGIONAL, BASIC_HDD or BASIC_SSD."),
    click.option("--lustre", metavar="SIZE",
                 help="Create a Managed Lustre file system with the cluster, mounted at /scratch (e.g. 18000GiB; "
                      "the tier sets the minimum and step: 9,000 GiB at 1000 MB/s per TiB)."),
    click.option("--lustre-tier", metavar="MBPS_PER_TIB",
                 help="Managed Lustre throughput tier: 1000 (default), 500, 250 or 125 MB/s per TiB."),
    click.option("--hyperdisk-ml", metavar="gs://BUCKET/PREFIX",
                 help="Create a Hyperdisk ML volume filled from this bucket path, attached read-only to every "
                      "node at /data."),
    click.option("--mount", "mounts", multiple=True, metavar="KIND:NAME:/PATH",
                 help="Attach an existing file system at PATH on every node (repeatable): filestore:NAME:/shared "
                      "or lustre:NAME:/scratch. 'cluster down' never deletes it."),
    click.option("--no-filestore", "no_filestore", is_flag=True, default=None,
                 help="A re-run keeps the file systems the cluster has: this unmounts the cluster's Filestore from "
                      "every node and deletes it (refused while another cluster mounts it)."),
    click.option("--no-lustre", "no_lustre", is_flag=True, default=None,
                 help="Unmount the cluster's Managed Lustre from every node and delete it."),
    click.option("--no-hyperdisk-ml", "no_hyperdisk_ml", is_flag=True, default=None,
                 help="Detach the cluster's Hyperdisk ML volume from every node and delete it."),
    click.option("--unmount", "unmount", multiple=True, metavar="PATH",
                 help="Stop mounting the file system attached at PATH (a --mount of an earlier run); never deletes "
                      "it (repeatable)."),
]


storage_options = with_options(*STORAGE_OPTIONS)


def storage_flags(kw: dict[str, Any]) -> dict[str, Any]:
    """ClusterSpec fields from the flags given (the spec checks them: gcpgpu/storage/spec.py)."""
    keys = ("filestore", "filestore_tier", "lustre", "lustre_tier", "hyperdisk_ml")
    flags: dict[str, Any] = {k: kw[k] for k in keys if kw.get(k) is not None}
    if kw.get("mounts"):
        flags["mounts"] = list(kw["mounts"])
    remove = [kind for kind in ("filestore", "lustre", "hyperdisk-ml") if kw.get(f"no_{kind.replace('-', '_')}")]
    if remove:
        flags["remove"] = remove
    if kw.get("unmount"):
        flags["unmount"] = list(kw["unmount"])
    return flags
