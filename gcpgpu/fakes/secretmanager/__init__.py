"""The emulator's Secret Manager v1: secrets and versions over REST, the payloads held in memory."""

from __future__ import annotations

from .backend import SecretError, SecretManagerBackend

__all__ = ["SecretError", "SecretManagerBackend"]
