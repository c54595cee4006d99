"""Request bodies checked against a Google API's published schema, as Google's front end does.

The schema is data, not code written here: the API's discovery document that google-api-python-client
ships (`googleapiclient/discovery_cache/documents/NAME.json`), read once and cached. A method is found
by its verb and path (the document's `flatPath`, below its `servicePath`); its body type is its
`request.$ref`. Every REST service the emulator serves is checked here (server.py's REST_SCHEMAS);
Compute's own rules (compute/schema.py) add its body field's name and its description limit.

What the real front end answers (the JSON-to-proto transcoder every Google API sits behind):
- a field the message does not have: 400 INVALID_ARGUMENT, `Invalid JSON payload received.
  Unknown name "FIELD" at 'PATH': Cannot find field.`, one line per unknown field, each also a
  `google.rpc.BadRequest` field violation with `field` PATH. PATH names proto fields in snake_case,
  with `[i]` after a repeated or map field, and starts at the request message's body field (Compute's
  `instance_resource`; the body type's own name in snake_case for the other APIs, e.g. Filestore's
  `instance`, which is inferred from their protos, unverified). Source: the error bodies quoted in
  google-gemini/gemini-cli issue 13972, danny-avila/LibreChat issue 11761 and decolua/9router issue 1876.
- a list where the field is not repeated: `... Unknown name "FIELD" at 'PATH': Proto field is not
  repeating, cannot start list.` (quoted in the same kind of reports).
- a value of the wrong JSON type: `Invalid value at 'PATH' (TYPE_STRING), 12` (the transcoder's
  wording for scalars; the exact text for an object given to a scalar field is unverified).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from functools import cache
from importlib import resources
from typing import Any

from .core import ApiError

_SCALAR = {"string": "TYPE_STRING", "boolean": "TYPE_BOOL", "integer": "TYPE_INT32", "number": "TYPE_DOUBLE"}
_FORMAT = {"int64": "TYPE_INT64", "uint64": "TYPE_UINT64", "uint32": "TYPE_UINT32", "int32": "TYPE_INT32",
           "double": "TYPE_DOUBLE", "float": "TYPE_FLOAT", "byte": "TYPE_BYTES"}
_INTEGER = re.compile(r"-?\d+")


@cache
def discovery(name: str) -> dict:
    """An API's discovery document as google-api-python-client ships it (`compute.v1`, `file.v1`; read once)."""
    doc = resources.files("googleapiclient.discovery_cache") / "documents" / f"{name}.json"
    return json.loads(doc.read_text(encoding="utf-8"))


def _methods(resource: dict) -> Iterator[dict]:
    yield from resource.get("methods", {}).values()
    for inner in resource.get("resources", {}).values():
        yield from _methods(inner)


@cache
def _routes(name: str) -> list[tuple[str, re.Pattern, int, dict]]:
    """(verb, path pattern below the service path, literal characters, method) of every method."""
    out = []
    for method in _methods(discovery(name)):
        path = method.get("flatPath") or method["path"]
        parts = re.split(r"\{[^}]+\}", path)
        out.append((method["httpMethod"], re.compile("[^/]+".join(map(re.escape, parts))), sum(map(len, parts)), method))
    return out


@cache
def method_of(name: str, http_method: str, path: str) -> dict | None:
    """The discovery method a request's verb and path (below the API's servicePath) name, or None when
    the real API has no such method either. Of several that match, the one with the most literal text
    (`secrets/{s}:addVersion`, not a `{name}` that swallows the verb)."""
    found = [(size, m) for verb, pattern, size, m in _routes(name) if verb == http_method and pattern.fullmatch(path)]
    return max(found, key=lambda f: f[0])[1] if found else None


@cache
def snake(name: str) -> str:
    """A JSON field name as the proto names it (`networkIP` -> `network_i_p`, as compute_v1 does)."""
    return re.sub(r"([A-Z])", lambda m: "_" + m.group(1).lower(), name)


def check(name: str, ref: str | None, body: Any, path: str) -> None:
    """Raise the front end's 400 if `body` (of schema `ref` in API `name`, its PATH starting at `path`) has a
    field, or a value type, the schema lacks. Enum names are put in their canonical case in `body`."""
    if ref is None or not isinstance(body, dict):
        return
    problems: list[tuple[str, str]] = []
    schemas = discovery(name)["schemas"]
    _check_object(schemas, schemas[ref], body, path, problems)
    if problems:
        message = "\n".join(text for _path, text in problems)
        violations = [{"field": where, "description": text} for where, text in problems]
        raise ApiError(400, "invalid", message, details=[
            {"@type": "type.googleapis.com/google.rpc.BadRequest", "fieldViolations": violations}])


# Every REST service the emulator serves but Compute (whose handler checks with its own rules, compute/schema.py):
# (its paths here, what to strip to leave the path below the API's servicePath, its discovery document).
# Managed Lustre is left out: google-api-python-client ships no discovery document for it. Cloud Build is
# served over gRPC only, where the client's own protos hold what a request may say.
REST_SCHEMAS: list[tuple[re.Pattern, str, str]] = [(re.compile(p), strip, name) for p, strip, name in [
    (r"^/v1/projects/[^/]+/locations/[^/]+/(customJobs|operations)", "/", "aiplatform.v1"),
    (r"^/v2/entries:list$", "/", "logging.v2"),
    (r"^/monitoring/v3/", "/monitoring/", "monitoring.v3"),
    (r"^/monitoring/v1/", "/monitoring/", "monitoring.v1"),
    (r"^/storage/v1/", "/storage/v1/", "storage.v1"),  # not its media paths (/upload/...): their body is data
    (r"^/v1/projects/[^/]+/secrets(?:[/:]|$)", "/", "secretmanager.v1"),
    (r"^/v1/projects/[^/]+/locations/[^/]+/repositories/", "/", "artifactregistry.v1"),
    (r"^/filestore/v1/", "/filestore/", "file.v1"),
    (r"^/servicenetworking/v1/", "/servicenetworking/", "servicenetworking.v1"),
    # The Billing Catalog has GET methods only: its answers are checked instead (fakes/billing/catalog.py).
    (r"^/v1/services(/|$)", "/", "cloudbilling.v1"),
]]


def check_served(request: Any) -> None:
    """check_request for whichever REST service the emulator serves at a (werkzeug) request's path (none
    for Compute's). A form or multipart body is the handler's to read: its stream is left alone."""
    if request.method not in ("POST", "PUT", "PATCH") or request.mimetype in ("multipart/related",
                                                                               "multipart/form-data",
                                                                               "application/x-www-form-urlencoded"):
        return
    for pattern, strip, name in REST_SCHEMAS:
        if pattern.match(request.path):
            check_request(name, request.method, request.path.removeprefix(strip), request.get_data())
            return


def check_request(name: str, http_method: str, path: str, data: bytes) -> None:
    """Check a request to API `name` (path below its servicePath) whose body is JSON: a body that is not
    JSON is the front end's parse error; one with a field its method's schema lacks, its 400."""
    if http_method not in ("POST", "PUT", "PATCH") or not data:
        return
    method = method_of(name, http_method, path)
    ref = ((method or {}).get("request") or {}).get("$ref")
    if ref is None:
        return
    try:
        body = json.loads(data)
    except ValueError as e:
        raise ApiError(400, "parseError", "Invalid JSON payload received.") from e
    check(name, ref, body, snake(ref[0].lower() + ref[1:]))


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
    if "enum" in spec and isinstance(value, int) and not isinstance(value, bool):
        # An enum's number: proto3's JSON mapping reads it (the client libraries' REST transports send
        # `$alt=json;enum-encoding=int`); one past the enum's values is refused as a bad value.
        if not 0 <= value < len(spec["enum"]):
            problems.append((path, _bad_value(path, "TYPE_ENUM", value)))
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
