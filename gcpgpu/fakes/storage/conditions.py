"""Preconditions on generations and metagenerations (ifGenerationMatch and kin), as query parameters give them.

google-cloud-storage sends ifGenerationMatch on retried writes and ifGenerationMatch=0 for
"create only"; gcloud sends them for no-clobber copies. A condition that does not hold is 412.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .names import bad_request, precondition_failed


@dataclass(frozen=True)
class Conditions:
    """ifGenerationMatch (0: only if there is no live object), ifGenerationNotMatch, ifMetageneration*."""

    generation_match: int | None = None
    generation_not_match: int | None = None
    metageneration_match: int | None = None
    metageneration_not_match: int | None = None

    @classmethod
    def from_query(cls, args: Any) -> Conditions:
        def number(key: str) -> int | None:
            value = args.get(key)
            if value in (None, ""):
                return None
            try:
                return int(value)
            except ValueError:
                raise bad_request(f"Invalid value for {key}: {value!r}") from None

        return cls(number("ifGenerationMatch"), number("ifGenerationNotMatch"),
                   number("ifMetagenerationMatch"), number("ifMetagenerationNotMatch"))

    def check(self, record: dict | None) -> None:
        gen = int(record["generation"]) if record else 0
        meta = int(record["metageneration"]) if record else None
        if (self.generation_match is not None and self.generation_match != gen) \
                or (self.generation_not_match is not None and self.generation_not_match == gen) \
                or (self.metageneration_match is not None and self.metageneration_match != meta) \
                or (self.metageneration_not_match is not None and meta is not None
                    and self.metageneration_not_match == meta):
            raise precondition_failed()


NONE = Conditions()
