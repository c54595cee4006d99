"""Artifact Registry v1 over REST/JSON: the one method gcpgpu (and `gcloud artifacts docker images list`) reads.

    GET /v1/projects/P/locations/L/repositories/R/dockerImages    dockerImages.list (pageSize, pageToken)
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from ..core import ApiError

if TYPE_CHECKING:
    from werkzeug.wrappers import Request

    from ..server import Emulator
    from .backend import ArtifactRegistryBackend

_ROUTE = re.compile(r"^/v1/projects/(?P<project>[^/]+)/locations/(?P<location>[^/]+)/repositories/"
                    r"(?P<repo>[^/]+)/dockerImages/?$")


class ArtifactRegistryRest:
    @classmethod
    def for_emulator(cls, emulator: Emulator) -> ArtifactRegistryRest:
        return cls(emulator.artifactregistry)

    def __init__(self, backend: ArtifactRegistryBackend) -> None:
        self.backend = backend

    def handle(self, request: Request) -> tuple[int, Any]:
        m = _ROUTE.match(request.path)
        if m is None or request.method != "GET":
            raise ApiError(404, "notFound", f"The emulator's Artifact Registry has no method {request.method} "
                           f"{request.path}.")
        raw = request.args.get("pageSize", "") or "0"
        try:
            size = int(raw)
            start = int(request.args.get("pageToken", "") or 0)
        except ValueError:
            raise ApiError(400, "badRequest", "Invalid pageSize or pageToken.") from None
        size = size if 0 < size <= 1000 else 100
        images = self.backend.docker_images(m["project"], m["location"], m["repo"])
        body: dict[str, Any] = {"dockerImages": images[start:start + size]}
        if start + size < len(images):
            body["nextPageToken"] = str(start + size)
        return 200, body
