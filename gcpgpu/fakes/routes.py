"""Which module answers each REST path the emulator serves: one line per API, imported only when it starts.

server.py loads each factory once per emulator and hands every request to the first pattern that matches;
schema.py checks the bodies of each (but Compute's, which its handler checks) against its published document.
"""

from __future__ import annotations

# REST: (path regex, "module:factory"); factory(emulator) -> object with handle(request) -> (status, body)
#   or a werkzeug Response (headers of its own, streamed bytes), raising core.ApiError for API errors.
#   The first matching pattern wins.
REST_APIS: list[tuple[str, str]] = [
    (r"^/compute/v1/projects/[^/]+/zones/[^/]+/instances/[^/]+/getGuestAttributes/?$",
     "gcpgpu.fakes.compute.guest_attributes:GuestAttributesRest.for_emulator"),
    (r"^/compute/v1/projects/[^/]+/(zones/[^/]+/(reservations/[^/]+/reservationBlocks|futureReservations"
     r"|instances/[^/]+/reportHostAsFaulty)|regions/[^/]+/advice/calendarMode|aggregated/futureReservations)",
     "gcpgpu.fakes.compute.rest_reservations:ReservationsRest.for_emulator"),
    (r"^/compute/v1/", "gcpgpu.fakes.compute.rest:ComputeRest.for_emulator"),
    (r"^/compute/beta/", "gcpgpu.fakes.compute.rest:ComputeRest.for_beta"),
    (r"^/(v1|ui)/projects/[^/]+/locations/[^/]+/(customJobs|operations)", "gcpgpu.fakes.vertex.rest:VertexRest.for_emulator"),
    (r"^/v2/entries:list$", "gcpgpu.fakes.logging.rest:LoggingRest.for_emulator"),
    (r"^/monitoring/v[13]/", "gcpgpu.fakes.monitoring.rest:MonitoringRest.for_emulator"),
    (r"^/((resumable/)?upload/|download/)?storage/v1/", "gcpgpu.fakes.storage.rest:StorageRest.for_emulator"),
    (r"^/v1/projects/[^/]+/secrets(?:[/:]|$)", "gcpgpu.fakes.secretmanager.rest:SecretManagerRest.for_emulator"),
    (r"^/v1/projects/[^/]+/locations/[^/]+/repositories/",
     "gcpgpu.fakes.artifactregistry.rest:ArtifactRegistryRest.for_emulator"),
    # Filestore and Managed Lustre share Google's path shape (/v1/projects/P/locations/L/instances), so each
    # answers under a prefix of its own: a client's api_endpoint (gcloud's override) names it.
    (r"^/filestore/v1/", "gcpgpu.fakes.filestore:rest_for_emulator"),
    (r"^/lustre/v1/", "gcpgpu.fakes.lustre:rest_for_emulator"),
    (r"^/servicenetworking/v1/", "gcpgpu.fakes.servicenetworking:rest_for_emulator"),
    (r"^/v1/services(/|$)", "gcpgpu.fakes.billing:rest_for_emulator"),  # the Cloud Billing Catalog (GET only)
]
