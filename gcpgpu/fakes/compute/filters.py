"""Compute Engine's list `filter` grammar, enough for what users and gcloud write.

    name = my-vm            labels.cluster = demo           status != RUNNING
    name eq 'node-.*'       (zone eq '.*us-central1-a') (status = RUNNING)
    labels.rank:*           a = 1 AND (b = 2 OR c = 3)      NOT status = TERMINATED

`=`/`!=` compare as strings, `*` matching any run of characters; `eq`/`ne` take a regular
expression that must match the whole value; `:` is "has" (`:*` tests presence); terms next to
each other are ANDed. Fields are dotted paths into the resource's JSON.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable
from typing import Any

from ..core import ApiError

Predicate = Callable[[dict], bool]

_TOKEN = re.compile(
    r"""\s*(?:
        (?P<lp>\() | (?P<rp>\)) |
        (?P<op>!=|<=|>=|=|<|>|:|\beq\b|\bne\b) |
        (?P<str>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*') |
        (?P<word>[^\s()=!<>:"']+)
    )""",
    re.X,
)


def _tokens(text: str) -> list[tuple[str, str]]:
    out, pos = [], 0
    text = text.strip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise _bad(text)
        pos = m.end()
        kind = m.lastgroup
        value = m.group(kind)
        if kind == "str":
            # Only the quote itself is escaped. Every other backslash belongs to the RE2 pattern
            # (gcloud sends `network eq ".*\bdefault\b.*"`); decoding escapes turned \b into a
            # backspace and such filters matched nothing.
            quote = value[0]
            value = value[1:-1].replace("\\" + quote, quote)
        elif kind == "word" and value.upper() in ("AND", "OR", "NOT"):
            kind = value.upper()
        out.append((kind, value))
    return out


def _bad(text: str) -> ApiError:
    return ApiError(400, "invalid", f"Invalid value for field 'filter': '{text}'. Invalid list filter expression.")


def lookup(resource: Any, path: str) -> Any:
    """Follow a dotted path; lists fan out (any element may match)."""
    cur: Any = resource
    for part in path.split("."):
        if isinstance(cur, list):
            return [lookup(item, part) for item in cur]
        if not isinstance(cur, dict) or part not in cur:
            return None
        cur = cur[part]
    return cur


def _scalar_str(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def _compare(value: Any, op: str, literal: str) -> bool:
    if isinstance(value, list):
        flat = [v for v in value if v is not None]
        if op in ("!=", "ne"):
            return all(_compare(v, op, literal) for v in flat)
        return any(_compare(v, op, literal) for v in flat)
    if op == ":":
        if literal == "*":
            return value is not None
        if isinstance(value, dict):
            return literal in value
        return value is not None and fnmatch.fnmatchcase(_scalar_str(value), f"*{literal}*" if "*" not in literal else literal)
    if value is None:
        return op in ("!=", "ne")
    text = _scalar_str(value)
    if op in ("=", "!="):
        hit = fnmatch.fnmatchcase(text, literal) if "*" in literal else text == literal
        # Links match their last segment too: `zone = us-central1-a` matches a zone URL.
        if not hit and "/" in text:
            hit = text.rsplit("/", 1)[-1] == literal
        return hit if op == "=" else not hit
    if op in ("eq", "ne"):
        try:
            hit = re.fullmatch(literal, text) is not None
        except re.error as e:
            raise ApiError(400, "invalid", f"Invalid regular expression '{literal}' in filter: {e}") from e
        return hit if op == "eq" else not hit
    try:
        a, b = float(text), float(literal)
    except ValueError:
        a, b = text, literal  # type: ignore[assignment]
    return {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[op]


def parse(text: str | None) -> Predicate:
    """Compile a filter into a predicate over resource dicts; raises ApiError(400) when malformed."""
    if not text or not text.strip():
        return lambda _r: True
    toks = _tokens(text)
    pos = 0

    def peek() -> str | None:
        return toks[pos][0] if pos < len(toks) else None

    def take(kind: str | None = None) -> tuple[str, str]:
        nonlocal pos
        if pos >= len(toks) or (kind and toks[pos][0] != kind):
            raise _bad(text)
        pos += 1
        return toks[pos - 1]

    def expr() -> Predicate:
        left = conj()
        while peek() == "OR":
            take("OR")
            right = conj()
            left = (lambda a, b: lambda r: a(r) or b(r))(left, right)
        return left

    def conj() -> Predicate:
        left = unary()
        while peek() in ("AND", "lp", "word", "NOT", "str"):
            if peek() == "AND":
                take("AND")
            right = unary()
            left = (lambda a, b: lambda r: a(r) and b(r))(left, right)
        return left

    def unary() -> Predicate:
        if peek() == "NOT":
            take("NOT")
            inner = unary()
            return lambda r: not inner(r)
        if peek() == "lp":
            take("lp")
            inner = expr()
            take("rp")
            return inner
        kind, field = take()
        if kind not in ("word", "str"):
            raise _bad(text)
        negate = field.startswith("-")
        field = field.lstrip("-")
        _, op = take("op")
        kind, literal = take()
        if kind not in ("word", "str"):
            raise _bad(text)
        pred = (lambda f, o, lit: lambda r: _compare(lookup(r, f), o, lit))(field, op, literal)
        return (lambda p: lambda r: not p(r))(pred) if negate else pred

    result = expr()
    if pos != len(toks):
        raise _bad(text)
    return result
