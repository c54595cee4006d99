"""Zone, region and global operations: made by every mutation, read by get/wait/list."""

from __future__ import annotations

import copy
import time
import uuid
from typing import Any

from ..core import ApiError, not_found, rfc3339
from . import filters
from .state import _HTTP_MESSAGES, public


class OperationsMixin:
    def _new_op(
        self,
        project: str,
        scope: str,
        op_type: str,
        target_link: str,
        target_id: str | None = None,
        error: ApiError | None = None,
        group: str | None = None,
    ) -> dict:
        p = self.project(project)
        now = self.now()
        dur = self._op_seconds()
        name = f"operation-{int(now * 1000)}-{uuid.uuid4().hex[:13]}-{uuid.uuid4().hex[:8]}"
        op: dict[str, Any] = {
            "kind": "compute#operation",
            "id": self.ids.next(),
            "name": name,
            "operationType": op_type,
            "targetLink": target_link,
            "user": "emulator@gcpgpu.local",
            "insertTime": rfc3339(now),
            "selfLink": self.link(project, f"{scope}/operations/{name}"),
            "_t0": now,
            "_pending_s": dur * self.world.timings.get("pending_share", 0.2),
            "_done_at": now + dur,
        }
        if target_id:
            op["targetId"] = target_id
        if group:
            op["operationGroupId"] = group  # bulkInsert's operation and its per-VM inserts share it
        if scope.startswith("zones/"):
            op["zone"] = self.link(project, scope)
        elif scope.startswith("regions/"):
            op["region"] = self.link(project, scope)
        if error is not None:
            op["_error"] = {
                "errors": [
                    {"code": error.reason, "message": error.message, **({"errorDetails": error.details} if error.details else {})}
                ]
            }
            op["_http"] = [error.code, _HTTP_MESSAGES.get(error.code, "ERROR")]
        p.operations.setdefault(scope, {})[name] = op
        return op

    def render_op(self, op: dict) -> dict:
        now = self.now()
        out = public(op)
        if now < op["_t0"] + op["_pending_s"] and now < op["_done_at"]:
            out.update(status="PENDING", progress=0)
        elif now < op["_done_at"]:
            span = max(op["_done_at"] - op["_t0"], 1e-9)
            out.update(status="RUNNING", progress=int(100 * (now - op["_t0"]) / span), startTime=rfc3339(op["_t0"]))
        else:
            out.update(status="DONE", progress=100, startTime=rfc3339(op["_t0"]), endTime=rfc3339(op["_done_at"]))
            if "_error" in op:
                out["error"] = copy.deepcopy(op["_error"])
                out["httpErrorStatusCode"], out["httpErrorMessage"] = op["_http"]
        return out

    def _replay(self, project: str, request_id: str | None) -> dict | None:
        """A retried mutation with the same requestId gets the first one's operation, not a second effect."""
        if not request_id:
            return None
        link = self.project(project).request_ids.get(request_id)
        if link is None:
            return None
        scope, name = link.split(f"/projects/{project}/", 1)[1].split("/operations/")
        return self.project(project).operations.get(scope, {}).get(name)

    def get_operation(self, project: str, scope: str, name: str) -> dict:
        with self._lock:
            op = self.project(project).operations.get(scope, {}).get(name)
            if op is None:
                raise not_found(f"projects/{project}/{scope}/operations/{name}")
            return self.render_op(op)

    def wait_operation(self, project: str, scope: str, name: str, timeout: float = 120.0) -> dict:
        """operations.wait: returns when DONE or after `timeout` seconds of wall time, like the real one."""
        deadline = time.monotonic() + timeout
        while True:
            op = self.get_operation(project, scope, name)
            # A frozen clock only moves when a test advances it: answer at once, as the real wait
            # does when its deadline passes, instead of holding the client for two minutes.
            if op["status"] == "DONE" or time.monotonic() >= deadline or self.clock.frozen:
                return op
            with self._lock:
                remaining = self.project(project).operations[scope][name]["_done_at"] - self.now()
            time.sleep(min(max(remaining, 0.005), 0.25, max(deadline - time.monotonic(), 0)))

    def delete_operation(self, project: str, scope: str, name: str) -> None:
        with self._lock:
            ops = self.project(project).operations.get(scope, {})
            if name not in ops:
                raise not_found(f"projects/{project}/{scope}/operations/{name}")
            del ops[name]

    def list_operations(self, project: str, scope: str, flt: str | None) -> list[dict]:
        with self._lock:
            ops = [self.render_op(o) for o in self.project(project).operations.get(scope, {}).values()]
        pred = filters.parse(flt)
        return [o for o in ops if pred(o)]

    def aggregated_operations(self, project: str) -> dict[str, list[dict]]:
        with self._lock:
            p = self.project(project)
            return {scope: [self.render_op(o) for o in ops.values()] for scope, ops in p.operations.items()}
