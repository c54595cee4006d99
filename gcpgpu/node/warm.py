"""What gcpgpu's node programs (the follower, the Slurm node's supervisor, the metrics reporter) import of
Google's clients when they first call, imported ahead by a process they are forked from (the emulator's
forkserver), so each of them starts warm.

The Compute services are the ones every follower and Slurm supervisor reads (instances, projects and the
operations it polls), each imported alone (gcp/compute.py): the whole google.cloud.compute_v1 package
imports all ~100 services, about 1.5 s of CPU, for a handful used. A service missing here is imported by
the program that needs it, as it would be without this module.
"""

from __future__ import annotations

from google.cloud import monitoring_v3  # noqa: F401  # the reporter's and the follower's metrics

from gcpgpu.gcp.compute import client_class, compute_types

SERVICES = ("InstancesClient", "ProjectsClient", "ZoneOperationsClient", "RegionOperationsClient",
            "GlobalOperationsClient")

compute_types()
for _name in SERVICES:
    client_class(_name)
