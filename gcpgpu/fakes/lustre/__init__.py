"""The emulator's Managed Lustre: lustre.googleapis.com v1 instances and operations, served under /lustre/v1/
(point a client's api_endpoint, or gcloud's api_endpoint_overrides/lustre, at http://127.0.0.1:PORT/lustre/).

backend.py  the instances: parallel file systems the emulated nodes mount, each a folder of the storage
            root; its wire is managed.py's (fakes/), which Filestore shares.
"""

from __future__ import annotations

from typing import Any


def rest_for_emulator(emulator: Any) -> Any:
    from ..managed import ManagedRest

    return ManagedRest(emulator.lustre, "lustre")
