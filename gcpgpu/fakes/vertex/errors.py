"""Vertex AI's errors as the service returns them: a canonical status, a message, field violations.

Every part of the emulated service raises these; the front ends turn them into the REST error body
(`to_json`) or a gRPC status with BadRequest details.
"""

from __future__ import annotations

from typing import Any


class VertexError(Exception):
    """An error as Vertex AI returns it: a canonical status, a message, optional field violations."""

    HTTP = {"INVALID_ARGUMENT": 400, "FAILED_PRECONDITION": 400, "OUT_OF_RANGE": 400, "NOT_FOUND": 404,
            "ALREADY_EXISTS": 409, "PERMISSION_DENIED": 403, "RESOURCE_EXHAUSTED": 429, "UNIMPLEMENTED": 501,
            "INTERNAL": 500, "UNAVAILABLE": 503, "DEADLINE_EXCEEDED": 504, "UNAUTHENTICATED": 401}

    def __init__(self, status: str, message: str, violations: list[tuple[str, str]] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.violations = violations or []

    @property
    def http(self) -> int:
        return self.HTTP.get(self.status, 500)

    def to_json(self) -> dict:
        """The REST error body Google's newer APIs send (no compute-style `errors` list)."""
        body: dict[str, Any] = {"code": self.http, "message": self.message, "status": self.status}
        if self.violations:
            body["details"] = [{
                "@type": "type.googleapis.com/google.rpc.BadRequest",
                "fieldViolations": [{"field": f, "description": d} for f, d in self.violations],
            }]
        return {"error": body}


def invalid_argument(violations: list[tuple[str, str]]) -> VertexError:
    # The real service lists every problem in one message, numbered, tab-separated.
    listed = "\t".join(f"{i}.Field: {f}; Message: {d}" for i, (f, d) in enumerate(violations, 1))
    return VertexError("INVALID_ARGUMENT", f"List of found errors:\t{listed}\t", violations)

