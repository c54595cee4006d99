"""Request bodies checked against Compute Engine v1's published schema, as Google's front end does.

The schema is data, not code written here: the Compute v1 discovery document that
google-api-python-client ships (`googleapiclient/discovery_cache/documents/compute.v1.json`), read
once and cached. A method's body type is its `request.$ref` there.

What the real front end answers (the JSON-to-proto transcoder every Google API sits behind):
- a field the message does not have: 400 INVALID_ARGUMENT, `Invalid JSON payload received.
  Unknown name "FIELD" at 'PATH': Cannot find field.`, one line per unknown field, each also a
  `google.rpc.BadRequest` field violation with `field` PATH. PATH names proto fields in snake_case,
  with `[i]` after a repeated or map field, and starts at the request message's body field
  (`instance_resource` for instances.insert: the field compute_v1's InsertInstanceRequest holds
  the body in). Source: the error bodies quoted in google-gemini/gemini-cli issue 13972,
  danny-avila/LibreChat issue 11761 and decolua/9router issue 1876 (the same front end); that
  Compute's PATH starts at `instance_resource` is inferred from the proto, unverified.
- a list where the field is not repeated: `... Unknown name "FIELD" at 'PATH': Proto field is not
  repeating, cannot start list.` (quoted in the same kind of reports).
- a value of the wrong JSON type: `Invalid value at 'PATH' (TYPE_STRING), 12` (the transcoder's
  wording for scalars; the exact text for an object given to a scalar field is unverified).
"""

from __future__ import annotations

import json
import re
from functools import cache
from importlib import resources
from typing import Any

from ..core import ApiError

_SCALAR = {"string": "TYPE_STRING", "boolean": "TYPE_BOOL", "integer": "TYPE_INT32", "number": "TYPE_DOUBLE"}
_FORMAT = {"int64": "TYPE_INT64", "uint64": "TYPE_UINT64", "uint32": "TYPE_UINT32", "int32": "TYPE_INT32",
           "double": "TYPE_DOUBLE", "float": "TYPE_FLOAT", "byte": "TYPE_BYTES"}
_INTEGER = re.compile(r"-?\d+")
# Characters in a resource's description: Compute refuses a longer one (the emulator stored 100 MB ones).
MAX_DESCRIPTION = 2048


@cache
def discovery() -> dict:
    """Compute v1's discovery document as google-api-python-client ships it (read once)."""
    doc = resources.files("googleapiclient.discovery_cache") / "documents" / "compute.v1.json"
    return json.loads(doc.read_text(encoding="utf-8"))


@cache
def request_type(resource: str, method: str) -> str | None:
    """The schema name of a method's body (`instances`, `insert` -> `Instance`), or None for none."""
    methods = discovery()["resources"].get(resource, {}).get("methods", {})
    return (methods.get(method, {}).get("request") or {}).get("$ref")


@cache
def api_method(http_method: str, path: str) -> str | None:
    """The discovery id (`compute.instances.setMachineType`) of the Compute method a request's
    path and verb name, or None when the real API has no such method either."""
    for verb, pattern, method_id in _routes():
        if verb == http_method and pattern.fullmatch(path):
            return method_id
    return None


@cache
def _routes() -> list[tuple[str, re.Pattern, str]]:
    out = []
    for resource in discovery()["resources"].values():
        for method in resource.get("methods", {}).values():
            parts = re.split(r"\{[^}]+\}", method.get("flatPath") or method["path"])
            out.append((method["httpMethod"], re.compile("[^/]+".join(map(re.escape, parts))), method["id"]))
    return out


@cache
def snake(name: str) -> str:
    """A JSON field name as the proto names it (`networkIP` -> `network_i_p`, as compute_v1 does)."""
    return re.sub(r"([A-Z])", lambda m: "_" + m.group(1).lower(), name)


def body_field(schema: str) -> str:
    """The request message's field that holds the body (`Instance` -> `instance_resource`)."""
    return snake(schema[0].lower() + schema[1:]) + "_resource"


def check_body(resource: str, method: str, body: Any) -> None:
    """Raise the front end's 400 if `body` has a field, or a value type, the method's schema lacks."""
    ref = request_type(resource, method)
    if ref is None or not isinstance(body, dict):
        return
    problems: list[tuple[str, str]] = []
    schemas = discovery()["schemas"]
    _check_object(schemas, schemas[ref], body, body_field(ref), problems)
    description = body.get("description")
    if isinstance(description, str) and len(description) > MAX_DESCRIPTION:
        # Compute's 'Invalid value for field' shape; the value is quoted short, never echoed whole.
        raise ApiError(400, "invalid", f"Invalid value for field 'resource.description': '{description[:40]}...'. "
                                       f"Must be at most {MAX_DESCRIPTION} characters long (it has {len(description)}).")
    if problems:
        message = "\n".join(text for _path, text in problems)
        violations = [{"field": path, "description": text} for path, text in problems]
        raise ApiError(400, "invalid", message, details=[
            {"@type": "type.googleapis.com/google.rpc.BadRequest", "fieldViolations": violations}])


def _check_object(schemas: dict, schema: dict, obj: dict, path: str, problems: list) -> None:
    props = schema.get("properties", {})
    for key, value in list(obj.items()):
        spec = props.get(key)
        if spec is None and "_" in key:
            # The proto field's own name is accepted beside its JSON name, as proto3's JSON mapping
            # says (SkyPilot sends `target_size` in instanceGroupManagers.insert).
            json_name = {snake(name): name for name in props}.get(key)
            if json_name is not None and json_name not in obj:
                del obj[key]
                obj[json_name] = value
                key, spec = json_name, props[json_name]
        if spec is None:
            problems.append((path, f'Invalid JSON payload received. Unknown name "{key}" at \'{path}\': Cannot find field.'))
            continue
        obj[key] = _check_value(schemas, spec, value, f"{path}.{snake(key)}", key, path, problems)


def _check_value(schemas: dict, spec: dict, value: Any, path: str, key: str, parent: str, problems: list) -> Any:
    """Record what is wrong with `value`; return it, with an enum name in its canonical case."""
    if value is None:  # JSON null: the field's default, as the transcoder takes it
        return value
    kind = spec.get("type")
    if kind == "array":
        if not isinstance(value, list):
            items = spec.get("items", {})
            message = "$ref" in items or items.get("type") == "object"
            problems.append((path, _bad_value(path, "TYPE_MESSAGE" if message else _scalar_name(items), value)))
            return value
        return [_check_value(schemas, spec.get("items", {}), item, f"{path}[{i}]", key, parent, problems)
                for i, item in enumerate(value)]
    if isinstance(value, list):
        problems.append((path, f'Invalid JSON payload received. Unknown name "{key}" at \'{parent}\': '
                               "Proto field is not repeating, cannot start list."))
        return value
    if "$ref" in spec or "properties" in spec:  # a message, named or inline (Firewall.allowed[])
        if not isinstance(value, dict):
            problems.append((path, _bad_value(path, "TYPE_MESSAGE", value)))
        else:
            _check_object(schemas, schemas[spec["$ref"]] if "$ref" in spec else spec, value, path, problems)
        return value
    if kind == "object":  # a map: string keys, values of `additionalProperties`
        if not isinstance(value, dict):
            problems.append((path, _bad_value(path, "TYPE_MESSAGE", value)))
            return value
        inner = spec.get("additionalProperties", {})
        for i, (k, item) in enumerate(list(value.items())):
            value[k] = _check_value(schemas, inner, item, f"{path}[{i}].value", key, parent, problems)
        return value
    if not _scalar_ok(spec, value):
        problems.append((path, _bad_value(path, _scalar_name(spec), value)))
    elif "enum" in spec and value not in spec["enum"]:
        # The front end knows only the enum's names, but not their case: SkyPilot sends nicType
        # "gVNIC" and real launches got gVNIC VMs (skypilot-org/skypilot PRs 4095, 5553).
        canonical = {name.lower(): name for name in spec["enum"]}.get(value.lower())
        if canonical is None:
            problems.append((path, _bad_value(path, "TYPE_ENUM", value)))
        return canonical or value
    return value


def _scalar_ok(spec: dict, value: Any) -> bool:
    kind, fmt = spec.get("type"), spec.get("format")
    if isinstance(value, dict):
        return False
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "integer" or fmt in ("int64", "uint64"):  # 64-bit integers travel as strings or numbers
        return (isinstance(value, int) and not isinstance(value, bool)) or (
            isinstance(value, str) and _INTEGER.fullmatch(value) is not None)
    if kind == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, str)


def _scalar_name(spec: dict) -> str:
    return _FORMAT.get(spec.get("format") or "", _SCALAR.get(spec.get("type") or "", "TYPE_STRING"))


def _bad_value(path: str, type_name: str, value: Any) -> str:
    return f"Invalid value at '{path}' ({type_name}), {json.dumps(value)}"
