"""Cloud Monitoring dashboards (google.monitoring.dashboard.v1): create, get, list, update, delete.

State lives on the backend (`self.dashboards`: project -> name -> dashboard JSON); this mixin is
the behaviour, shared by the gRPC and REST front ends.
"""

from __future__ import annotations

import copy
import uuid
from typing import Any

from ..core import ApiError, fingerprint
from . import filters
from .paging import invalid_argument, page


class DashboardsMixin:
    """Dashboards over `self.dashboards` and `self._lock` (the backend's)."""

    dashboards: dict[str, dict[str, dict]]
    _lock: Any

    # ------------------------------------------------------------------ dashboards
    def create_dashboard(self, project: str, dashboard: dict, validate_only: bool = False) -> dict:
        self._check_dashboard(dashboard)
        name = dashboard.get("name") or ""
        if name and not name.startswith(f"projects/{project}/dashboards/"):
            dash_id = name.rsplit("/", 1)[-1]
            name = f"projects/{project}/dashboards/{dash_id}"
        if not name:
            name = f"projects/{project}/dashboards/{uuid.uuid4()}"
        with self._lock:
            existing = self.dashboards.setdefault(project, {})
            if name in existing:
                raise ApiError(409, "alreadyExists", f"Dashboard {name} already exists.")
            stored = {**dashboard, "name": name}
            stored["etag"] = fingerprint({k: v for k, v in stored.items() if k != "etag"})
            if not validate_only:
                existing[name] = stored
            return copy.deepcopy(stored)

    def get_dashboard(self, name: str) -> dict:
        project = _dashboard_project(name)
        with self._lock:
            d = self.dashboards.get(project, {}).get(name)
            if d is None:
                raise ApiError(404, "notFound", f"Requested entity was not found: dashboard {name}.")
            return copy.deepcopy(d)

    def list_dashboards(self, project: str, page_size: int, page_token: str) -> tuple[list[dict], str]:
        with self._lock:
            items = [copy.deepcopy(d) for _n, d in sorted(self.dashboards.get(project, {}).items())]
        return page(items, min(page_size or 1000, 1000), page_token, ("dashboards", project))

    def delete_dashboard(self, name: str) -> None:
        project = _dashboard_project(name)
        with self._lock:
            if name not in self.dashboards.get(project, {}):
                raise ApiError(404, "notFound", f"Requested entity was not found: dashboard {name}.")
            del self.dashboards[project][name]

    def update_dashboard(self, dashboard: dict, validate_only: bool = False) -> dict:
        name = dashboard.get("name", "")
        current = self.get_dashboard(name)
        self._check_dashboard(dashboard)
        if dashboard.get("etag") and dashboard["etag"] != current["etag"]:
            raise ApiError(409, "aborted", "The dashboard's etag does not match: someone changed it since you read it.")
        stored = {k: v for k, v in dashboard.items() if k != "etag"}
        stored["etag"] = fingerprint(stored)
        with self._lock:
            if not validate_only:
                self.dashboards[_dashboard_project(name)][name] = stored
        return copy.deepcopy(stored)

    def _check_dashboard(self, d: dict) -> None:
        if not d.get("displayName"):
            raise invalid_argument("Field dashboard.displayName is required.")
        layouts = [k for k in ("gridLayout", "mosaicLayout", "rowLayout", "columnLayout") if k in d]
        if len(layouts) != 1:
            raise invalid_argument("A dashboard needs exactly one layout (gridLayout, mosaicLayout, rowLayout or columnLayout).")
        # Every chart's filter must parse, as the real API checks on create.
        for flt in _filters_in(d):
            try:
                filters.parse(flt)
            except filters.FilterError as e:
                raise invalid_argument(f"Widget filter {flt!r} is invalid: {e}") from e


def _filters_in(value: Any) -> list[str]:
    out: list[str] = []
    if isinstance(value, dict):
        for k, v in value.items():
            if k == "filter" and isinstance(v, str):
                out.append(v)
            else:
                out.extend(_filters_in(v))
    elif isinstance(value, list):
        for v in value:
            out.extend(_filters_in(v))
    return out


def _dashboard_project(name: str) -> str:
    parts = name.split("/")
    if len(parts) != 4 or parts[0] != "projects" or parts[2] != "dashboards":
        raise invalid_argument(f"Field name had an invalid value of {name!r}: expected projects/PROJECT/dashboards/ID.")
    return parts[1]
