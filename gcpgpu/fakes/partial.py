"""Partial responses: the `fields` system parameter (or its header, X-Goog-FieldMask) that every Google
REST API honours, so a client that asks for a few fields of 1,000 VMs gets (and parses) only those.

Syntax (Google's "partial response" performance guide): a comma-separated list of field paths;
`a/b` selects b inside a; `a(b,c)` selects b and c inside a; in a list each element is selected
alike; `*` matches every key of a map (aggregatedList's `items/*/instances(name,status)`). A field
not named is left out, `kind` included.
"""

from __future__ import annotations

from typing import Any

from .core import ApiError

Tree = dict[str, "Tree | None"]  # None: the whole value


class FieldMaskError(ValueError):
    pass


def parse(spec: str) -> Tree:
    """The selection tree of a `fields` value; FieldMaskError on a malformed one."""
    tree, rest = _list(spec.replace(" ", ""), 0)
    if rest != len(spec.replace(" ", "")):
        raise FieldMaskError(f"Invalid field selection {spec!r}")
    return tree


def _list(s: str, i: int) -> tuple[Tree, int]:
    tree: Tree = {}
    while True:
        start = i
        while i < len(s) and s[i] not in ",()":
            i += 1
        path = s[start:i].split("/")
        if not all(path):
            raise FieldMaskError(f"Invalid field selection {s!r}")
        sub: Tree | None = None
        if i < len(s) and s[i] == "(":
            sub, i = _list(s, i + 1)
            if i >= len(s) or s[i] != ")":
                raise FieldMaskError(f"Invalid field selection {s!r}: unbalanced parentheses")
            i += 1
        _merge(tree, path, sub)
        if i < len(s) and s[i] == ",":
            i += 1
            continue
        return tree, i


def _merge(tree: Tree, path: list[str], sub: Tree | None) -> None:
    node = tree
    for name in path[:-1]:
        child = node.get(name, {})
        if child is None:
            return  # the whole of it is already selected
        node[name] = child
        node = child
    last = path[-1]
    if sub is None or node.get(last, {}) is None:
        node[last] = None
        return
    existing = node.setdefault(last, {})
    assert existing is not None
    for key, value in sub.items():
        _merge(existing, [key], value)


def select(value: Any, tree: Tree | None) -> Any:
    """`value` reduced to the fields `tree` names."""
    if tree is None:
        return value
    if isinstance(value, list):
        return [select(v, tree) for v in value]
    if not isinstance(value, dict):
        return value
    out: dict[str, Any] = {}
    for key, sub in tree.items():
        for k in (value if key == "*" else [key] if key in value else []):
            out[k] = select(value[k], sub)
    return out


def partial_response(body: dict, spec: str) -> dict:
    """A JSON response body reduced to `fields`; a malformed mask is the API's 400 invalidParameter."""
    try:
        return select(body, parse(spec))
    except FieldMaskError as e:
        raise ApiError(400, "invalidParameter", str(e)) from None
