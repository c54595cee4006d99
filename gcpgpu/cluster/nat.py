"""A Cloud NAT serves a whole network in a region, not one cluster.

`up` makes a Cloud Router with a NAT for all subnetworks of the nodes' network, unless the network
already has one in the region, in which case the cluster uses that one (the API refuses a second
NAT covering all subnetworks). So a NAT gcpgpu made for cluster `a` may carry cluster `b`'s traffic
too. `down` therefore keeps a NAT while other VMs on its network in its region remain (deleting it
would cut their way out), and the `down` that leaves the network without VMs there removes a
gcpgpu-made NAT kept that way, whichever cluster made it. Only NATs gcpgpu made (its description
marker) are ever touched; a NAT someone else made stays.

Known window: an `up` that has just chosen to use an existing NAT but whose nodes do not exist yet
is not seen as a user; a `down` that runs in that moment may remove the NAT.
"""

from __future__ import annotations

from gcpgpu.gcp.clients import Clients
from gcpgpu.gcp.operations import retrying
from gcpgpu.storage.hyperdisk import LOADER_LABEL

from .kinds import last
from .names import owner_of
from .observe import Observed, project_nodes


def settle(clients: Clients, project: str, cluster: str, obs: Observed) -> tuple[list[dict], list[str]]:
    """Which gcpgpu-made Cloud NAT routers `down` of `cluster` should delete, and notes for the user.

    The cluster's own NAT goes unless VMs outside the cluster still use its network in its region; a
    NAT another cluster's `down` kept goes when this cluster's nodes were its last users."""
    regions = sorted({n.region for n in obs.nodes} | {r["region"] for r in obs.routers})
    if not regions:
        return [], []
    mine = {(n.zone, n.name) for n in obs.nodes}
    # The cluster's Hyperdisk ML loader VM (storage/hyperdisk.py) goes with it: not another user of the NAT.
    others = [n for n in project_nodes(clients, project, managed_only=False)
              if (n.zone, n.name) not in mine and n.labels.get(LOADER_LABEL) != cluster]
    delete: list[dict] = []
    notes: list[str] = []
    for region in regions:
        pager = retrying()(clients.compute("RoutersClient").list)(request={"project": project, "region": region})
        for router in pager:
            owner = owner_of(router.description)
            if owner is None or not list(router.nats):
                continue
            network = last(router.network)
            users = sorted(n.name for n in others if n.region == region and network in n.networks)
            item = {"name": router.name, "region": region}
            if users:
                if owner == cluster:
                    notes.append(f"keeping Cloud NAT {router.name} ({region}): {len(users)} other VM(s) on network "
                                 f"{network} still reach out through it ({', '.join(users[:3])}"
                                 f"{' ...' if len(users) > 3 else ''}); the last 'gcpgpu cluster down' there removes it")
                continue
            if owner != cluster:
                if not any(n.region == region and n.network == network for n in obs.nodes):
                    continue  # not a network this cluster's nodes used here
                notes.append(f"removing Cloud NAT {router.name} ({region}) that cluster {owner} left for the VMs "
                             f"on network {network}: this cluster's nodes were its last users")
            delete.append(item)
    return delete, notes
