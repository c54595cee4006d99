"""The emulator's Artifact Registry: Docker images as dockerImages.list shows them, pushed by Cloud Build."""

from __future__ import annotations

from .backend import ArtifactRegistryBackend

__all__ = ["ArtifactRegistryBackend"]
