"""The emulator's Artifact Registry: Docker images as dockerImages.list shows them, pushed by Cloud Build.

backend.py  the images, derived from what the emulator's Cloud Build pushed.
rest.py     v1 over REST/JSON: the one method gcpgpu (and `gcloud artifacts docker images list`) reads.
"""

from __future__ import annotations

from .backend import ArtifactRegistryBackend

__all__ = ["ArtifactRegistryBackend"]
