"""Private service access on the cluster's network, which Managed Lustre needs.

Google's way (Managed Lustre "Configure a VPC network", unverified here beyond the API references):
an internal range reserved for service producers (a Compute global address with purpose VPC_PEERING)
and a servicenetworking connection of the network to servicenetworking.googleapis.com over it.

gcpgpu makes them only when the network has no connection yet, labels the range it made with the
cluster's labels (plus gcpgpu-psa=connection when it also made the connection), and `down` removes
exactly those, the connection first. A network that already had private service access keeps it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from gcpgpu.errors import CloudError, one_line
from gcpgpu.gcp.clients import Clients
from gcpgpu.gcp.errors import is_not_found, is_service_off
from gcpgpu.gcp.operations import call, wait

SERVICE = "services/servicenetworking.googleapis.com"
CONNECTION = f"{SERVICE}/connections/servicenetworking-googleapis-com"
PREFIX_LENGTH = 20  # a /20 for the producers' range (Google's examples use /20 or /24: unverified choice)
MADE_CONNECTION = "gcpgpu-psa"
OP_TIMEOUT = 600.0


def _run(request: Any, what: str, gone_ok: bool = False) -> dict[str, Any]:
    """Execute a servicenetworking (googleapiclient) request: transient answers (408, 429, 5xx) retried with
    the tree's backoff (gcp/operations.py), any other failure one CloudError line, never googleapiclient's
    HttpError (which the CLI cannot tell from a bug); a 404 is {} when `gone_ok`."""
    from googleapiclient.errors import HttpError

    from gcpgpu.gcp.errors import TRANSIENT_HTTP
    from gcpgpu.gcp.operations import RETRY_DEADLINE, RETRY_INITIAL, RETRY_MAX

    delay, deadline = RETRY_INITIAL, time.monotonic() + RETRY_DEADLINE
    while True:
        try:
            return request.execute()
        except HttpError as e:
            status = int(getattr(e, "status_code", None) or e.resp.status)
            if status == 404 and gone_ok:
                return {}
            if status not in TRANSIENT_HTTP or time.monotonic() + delay > deadline:
                raise CloudError(f"{what}: servicenetworking said {status} {e.reason or ''}".rstrip()) from None
            time.sleep(delay)
            delay = min(delay * 2, RETRY_MAX)


def range_name(cluster: str) -> str:
    return f"{cluster}-psa"


def peering_network(clients: Clients, project: str, network: str) -> str:
    """The network as servicenetworking names it: projects/NUMBER/global/networks/NAME (its reference says
    the project number; Compute's project `id` is taken as that number: unverified)."""
    from gcpgpu.gcp.operations import retrying

    number = retrying()(clients.compute("ProjectsClient").get)(project=project).id
    return f"projects/{number}/global/networks/{network}"


def connected(clients: Clients, project: str, network: str) -> bool:
    resp = _run(clients.servicenetworking().services().connections().list(
        parent=SERVICE, network=peering_network(clients, project, network)), f"reading network {network}'s "
        "private service access")
    return bool(resp.get("connections"))


def ensure_private_access(clients: Clients, project: str, network: str, cluster: str, labels: dict[str, str],
                          say: Callable[[str], None], fence: Callable[[], None]) -> None:
    """Reserve a range and connect the network to Google's service producers, unless it is connected."""
    if connected(clients, project, network):
        return
    from gcpgpu.gcp.compute import compute_types

    compute = compute_types()

    name = range_name(cluster)
    say(f"Setting up private service access on network {network} (range {name}, /{PREFIX_LENGTH}) for Managed Lustre")
    addresses = clients.compute("GlobalAddressesClient")
    try:
        addresses.get(project=project, address=name)
    except Exception as e:
        if not is_not_found(e):
            raise
        fence()
        wait(clients, project, call(addresses.insert, {"project": project, "address_resource": compute.Address(
            name=name, purpose="VPC_PEERING", address_type="INTERNAL", prefix_length=PREFIX_LENGTH,
            network=f"projects/{project}/global/networks/{network}",
            labels={**labels, MADE_CONNECTION: "connection"},
            description=f"gcpgpu cluster {cluster}: private service access for Managed Lustre")}))
    fence()
    what = f"connecting network {network} to Google's services"
    op = _run(clients.servicenetworking().services().connections().create(parent=SERVICE, body={
        "network": peering_network(clients, project, network), "reservedPeeringRanges": [name]}), what)
    _wait(clients, op, what)


def _wait(clients: Clients, op: dict[str, Any], what: str) -> None:
    deadline = time.monotonic() + OP_TIMEOUT
    ops = clients.servicenetworking().operations()
    while not op.get("done"):
        if time.monotonic() > deadline:
            raise CloudError(f"{what}: not done after {OP_TIMEOUT:.0f} s")
        time.sleep(1.0)
        op = _run(ops.get(name=op["name"]), what)
    if op.get("error"):
        raise CloudError(f"{what} failed: {op['error'].get('message', op['error'])}")


def remove_private_access(clients: Clients, project: str, labels: dict[str, str],
                          say: Callable[[str], None], fence: Callable[[], None]) -> list[str]:
    """Remove the ranges (and connections) made for a cluster; one line per one left."""
    addresses = clients.compute("GlobalAddressesClient")
    try:
        found = [a for a in addresses.list(project=project)
                 if a.purpose == "VPC_PEERING" and all(a.labels.get(k) == v for k, v in labels.items())]
    except Exception as e:
        if is_service_off(e):  # an emulator without global addresses: nothing was made there
            return []
        raise
    lines = []
    for a in found:
        network = a.network.rsplit("/", 1)[-1]
        try:
            if a.labels.get(MADE_CONNECTION) == "connection":
                say(f"Removing private service access from network {network}")
                fence()
                what = f"disconnecting network {network} from Google's services"
                op = _run(clients.servicenetworking().services().connections().deleteConnection(
                    name=CONNECTION, body={"consumerNetwork": peering_network(clients, project, network)}),
                    what, gone_ok=True)  # 404: no connection (a try answered 503 after it was gone)
                if op:
                    _wait(clients, op, what)
            fence()
            wait(clients, project, call(addresses.delete, {"project": project, "address": a.name}))
        except Exception as e:
            if not is_not_found(e):
                lines.append(f"private service access range {a.name}: {one_line(e) if not isinstance(e, CloudError) else e}")
    return lines
