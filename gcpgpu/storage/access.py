"""Private service access on the cluster's network, which Managed Lustre needs (not built yet)."""

from __future__ import annotations

from collections.abc import Callable

from gcpgpu.errors import CloudError
from gcpgpu.gcp.clients import Clients


def ensure_private_access(clients: Clients, project: str, network: str, cluster: str, labels: dict[str, str],
                          say: Callable[[str], None], fence: Callable[[], None]) -> None:
    raise CloudError(f"--lustre: gcpgpu does not yet make the private service access Managed Lustre needs on network "
                     f"{network}; attach an existing instance with --mount lustre:NAME:/scratch")
