"""Which module answers each REST path the emulator serves: one line per API, imported only when it starts.

server.py loads each factory once per emulator and hands every request to the first pattern that matches;
schema.py checks the bodies of each (but Compute's, which its handler checks) against its published document.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

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


def batch(request: Any, api: Callable[[Any], Any]) -> Any:
    """Google's HTTP batch (multipart/mixed of application/http parts), as gcloud sends for many VMs: each part
    answered by `api` (the server's one-request handler)."""
    from email.parser import BytesParser
    from email.policy import HTTP

    from werkzeug.test import EnvironBuilder
    from werkzeug.wrappers import Request, Response

    header = f"Content-Type: {request.headers.get('Content-Type', '')}\r\n\r\n".encode()
    message = BytesParser(policy=HTTP).parsebytes(header + request.get_data())
    boundary = "batch_gcpgpu_emulator"
    out: list[bytes] = []
    for part in message.iter_parts():
        raw = part.get_payload(decode=True) or b""
        head, _, body = raw.replace(b"\r\n", b"\n").partition(b"\n\n")
        lines = head.decode().split("\n")
        method, target = lines[0].split(" ")[:2]
        headers = dict(line.split(": ", 1) for line in lines[1:] if ": " in line)
        path, _, query = target.partition("?")
        if "://" in path:
            path = "/" + path.split("://", 1)[1].split("/", 1)[1]
        # The outer request's host, so links in the answers lead back here; the raw target, so an
        # escaped '/' in an object name stays escaped.
        env = EnvironBuilder(path=path, method=method, query_string=query, data=body.strip() or None,
                             headers=headers, base_url=request.host_url,
                             environ_overrides={"RAW_URI": target}).get_environ()
        sub = api(Request(env))
        content_id = part.get("Content-ID", "").strip("<>")
        out.append(
            f"--{boundary}\r\nContent-Type: application/http\r\nContent-ID: <response-{content_id}>\r\n\r\n"
            f"HTTP/1.1 {sub.status}\r\nContent-Type: application/json\r\n\r\n".encode()
            + sub.get_data() + b"\r\n"
        )
    out.append(f"--{boundary}--\r\n".encode())
    return Response(b"".join(out), status=200, content_type=f"multipart/mixed; boundary={boundary}")
