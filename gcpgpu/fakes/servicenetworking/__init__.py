"""The emulator's Service Networking: the private service access connections (servicenetworking.googleapis.com
v1, services/servicenetworking.googleapis.com/connections) that Managed Lustre, and Filestore in its
PRIVATE_SERVICE_ACCESS mode, need on their network. Served under /servicenetworking/v1/.

backend.py  the connections between a consumer VPC and Google's service producers, and their REST wire.
"""

from __future__ import annotations

from typing import Any


def rest_for_emulator(emulator: Any) -> Any:
    from .backend import ServiceNetworkingRest

    return ServiceNetworkingRest(emulator.servicenetworking)
