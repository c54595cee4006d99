"""The emulator's Filestore: file.googleapis.com v1 instances and operations, served under /filestore/v1/
(point a client's api_endpoint, or gcloud's api_endpoint_overrides/file, at http://127.0.0.1:PORT/filestore/).

backend.py  the instances: NFS shares the emulated nodes mount, each a folder of the storage root; its
            wire is managed.py's (fakes/), which Managed Lustre shares.
"""

from __future__ import annotations

from typing import Any


def rest_for_emulator(emulator: Any) -> Any:
    from ..managed import ManagedRest

    return ManagedRest(emulator.filestore, "filestore")
