"""Compute Engine v1's request bodies checked against its published schema (fakes/schema.py, the check every
REST service the emulator serves gets), with what is Compute's own: the body's field is named
`<type>_resource` (`instance_resource` for instances.insert: the field compute_v1's InsertInstanceRequest
holds the body in; inferred from the proto, unverified), and a description is at most 2,048 characters.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from .. import schema
from ..core import ApiError

API = "compute.v1"
# Characters in a resource's description: Compute refuses a longer one (the emulator stored 100 MB ones).
MAX_DESCRIPTION = 2048
snake = schema.snake


def discovery() -> dict:
    """Compute v1's discovery document as google-api-python-client ships it (read once)."""
    return schema.discovery(API)


@cache
def request_type(resource: str, method: str) -> str | None:
    """The schema name of a method's body (`instances`, `insert` -> `Instance`), or None for none."""
    methods = discovery()["resources"].get(resource, {}).get("methods", {})
    return (methods.get(method, {}).get("request") or {}).get("$ref")


@cache
def api_method(http_method: str, path: str) -> str | None:
    """The discovery id (`compute.instances.setMachineType`) of the Compute method a request's
    path and verb name, or None when the real API has no such method either."""
    method = schema.method_of(API, http_method, path)
    return method["id"] if method else None


def body_field(ref: str) -> str:
    """The request message's field that holds the body (`Instance` -> `instance_resource`)."""
    return snake(ref[0].lower() + ref[1:]) + "_resource"


def check_body(resource: str, method: str, body: Any) -> None:
    """Raise the front end's 400 if `body` has a field, or a value type, the method's schema lacks."""
    ref = request_type(resource, method)
    if ref is None or not isinstance(body, dict):
        return
    description = body.get("description")
    if isinstance(description, str) and len(description) > MAX_DESCRIPTION:
        # Compute's 'Invalid value for field' shape; the value is quoted short, never echoed whole.
        raise ApiError(400, "invalid", f"Invalid value for field 'resource.description': '{description[:40]}...'. "
                                       f"Must be at most {MAX_DESCRIPTION} characters long (it has {len(description)}).")
    schema.check(API, ref, body, body_field(ref))
