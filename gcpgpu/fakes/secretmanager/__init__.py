"""The emulator's Secret Manager v1: secrets and versions over REST, the payloads held in memory.

backend.py  secrets per project, their numbered versions and payloads (`emulator.secretmanager`).
rest.py     v1 over REST/JSON, as googleapiclient, gcloud and Google's REST reference call it.
grants.py   what a sandboxed job may ask: its own --secrets with its token, nothing else.
"""

from __future__ import annotations

from .backend import SecretError, SecretManagerBackend

__all__ = ["SecretError", "SecretManagerBackend"]
