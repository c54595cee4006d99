"""The project resource's own mutable part: commonInstanceMetadata, set under an optimistic fingerprint.

projects.setCommonInstanceMetadata takes the whole metadata document with the fingerprint the caller
read. A write whose fingerprint is stale is accepted as a request and its operation ends in error
CONDITION_NOT_MET (412), as concurrent writers meet it on GCP (CloudVE/cloudbridge PR 349, "Retry GCP
metadata writes on an operation-level fingerprint conflict"; Terraform's project metadata item
resource re-reads and retries likewise).
"""

from __future__ import annotations

from ..core import ApiError
from .links import fingerprint, same_fingerprint
from .state import Project, _mutation

MAX_METADATA_BYTES = 512 * 1024


class ProjectsMixin:
    def common_metadata(self, p: Project) -> dict:
        """The project's commonInstanceMetadata (kind, fingerprint, items), created empty on first use."""
        if p.common_metadata is None:
            p.common_metadata = {"kind": "compute#metadata", "fingerprint": fingerprint([]), "items": []}
        return p.common_metadata

    def project_metadata(self, project: str) -> dict[str, str]:
        """The project's commonInstanceMetadata items as key -> value (what a node's guest agent reads)."""
        with self._lock:  # type: ignore[attr-defined]
            common = self.common_metadata(self.project(project))  # type: ignore[attr-defined]
            return {i.get("key"): i.get("value") or "" for i in common.get("items") or []}

    @_mutation()
    def set_common_metadata(self, p: Project, body: dict) -> dict:
        items = body.get("items") or []
        total = sum(len(i.get("key") or "") + len(i.get("value") or "") for i in items)
        if total > MAX_METADATA_BYTES:
            raise ApiError(400, "invalid", f"Metadata total size {total} exceeds the 512 KB limit.")
        link = self.link(p.name, "")[:-1]
        current = self.common_metadata(p)
        if not same_fingerprint(body.get("fingerprint"), current["fingerprint"]):
            err = ApiError(412, "CONDITION_NOT_MET", "Supplied fingerprint does not match current metadata fingerprint.")
            return self.render_op(self._new_op(p.name, "global", "setMetadata", link, p.number, error=err))
        p.common_metadata = {
            "kind": "compute#metadata", "fingerprint": fingerprint(items), "items": items}
        return self.render_op(self._new_op(p.name, "global", "setMetadata", link, p.number))
