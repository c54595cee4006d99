"""The emulator's Secret Manager v1: secrets and versions over REST, the payloads held in memory.

backend.py  secrets per project, their numbered versions and payloads (`emulator.secretmanager`).
rest.py     v1 over REST/JSON, as googleapiclient, gcloud and Google's REST reference call it.
"""

from __future__ import annotations

from .backend import SecretError, SecretManagerBackend

__all__ = ["SecretError", "SecretManagerBackend"]
