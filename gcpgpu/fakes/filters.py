"""The filter grammar Google's newer APIs share (AIP-160, and Cloud Logging's query language).

    expr    := seq { [AND] seq }          juxtaposition is AND
    seq     := unary { OR unary }         OR binds tighter than AND, as AIP-160 and Logging define
    unary   := (NOT | -) unary | '(' expr ')' | field op value
    field   := name { '.' (name | "quoted") }    e.g. labels."ml.googleapis.com/task_name"
    op      := = != < <= > >= :

What a comparison means is the caller's: `compare(field, op, value)` returns a predicate, or raises
the caller's error for a field or operator the API does not support.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

Predicate = Callable[[Any], bool]
Compare = Callable[[list[str], str, str], Predicate]

_TOKEN = re.compile(
    r'\s*(?:(?P<lp>\()|(?P<rp>\))|(?P<op><=|>=|!=|=|<|>|:)'
    r'|(?P<field>[A-Za-z_][\w-]*(?:\.(?:[A-Za-z_][\w-]*|"(?:[^"\\]|\\.)*"))+)'
    r'|(?P<str>"(?:[^"\\]|\\.)*")|(?P<word>[^\s()<>=!:"]+))'
)


class FilterError(ValueError):
    """A filter that does not parse; the message says where."""


def parse(text: str, compare: Compare) -> Predicate:
    """A predicate for `text` (empty: everything matches); FilterError when it does not parse."""
    tokens: list[tuple[str, str]] = []
    pos = 0
    text = text or ""
    while text[pos:].strip():
        m = _TOKEN.match(text, pos)
        if not m:
            raise FilterError(f"unexpected character at position {pos}")
        kind = m.lastgroup or ""
        tokens.append((kind, m.group(kind)))
        pos = m.end()
    if not tokens:
        return lambda item: True
    parser = _Parser(tokens, compare)
    pred = parser.conjunction()
    if parser.i != len(tokens):
        raise FilterError(f"unexpected {tokens[parser.i][1]!r}")
    return pred


def field_path(token: str) -> list[str]:
    """'labels."a.b/c".x' -> ['labels', 'a.b/c', 'x']."""
    return [json.loads(p) if p.startswith('"') else p for p in re.findall(r'"(?:[^"\\]|\\.)*"|[^.]+', token)]


class _Parser:
    def __init__(self, tokens: list[tuple[str, str]], compare: Compare) -> None:
        self.tokens, self.compare, self.i = tokens, compare, 0

    def peek(self) -> tuple[str, str] | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def take(self) -> tuple[str, str]:
        tok = self.peek()
        if tok is None:
            raise FilterError("unexpected end of filter")
        self.i += 1
        return tok

    def conjunction(self) -> Predicate:
        parts = [self.disjunction()]
        while (tok := self.peek()) is not None and tok[0] != "rp":
            if tok == ("word", "AND"):
                self.i += 1
            parts.append(self.disjunction())
        return lambda item: all(p(item) for p in parts)

    def disjunction(self) -> Predicate:
        parts = [self.unary()]
        while self.peek() == ("word", "OR"):
            self.i += 1
            parts.append(self.unary())
        return lambda item: any(p(item) for p in parts)

    def unary(self) -> Predicate:
        tok = self.peek()
        if tok in (("word", "NOT"), ("word", "-")):
            self.i += 1
            inner = self.unary()
            return lambda item: not inner(item)
        if tok is not None and tok[0] in ("word", "field") and tok[1].startswith("-") and len(tok[1]) > 1:
            self.tokens[self.i] = (tok[0], tok[1][1:])
            inner = self.unary()
            return lambda item: not inner(item)
        if tok is not None and tok[0] == "lp":
            self.i += 1
            inner = self.conjunction()
            if self.take()[0] != "rp":
                raise FilterError("missing ')'")
            return inner
        return self.comparison()

    def comparison(self) -> Predicate:
        kind, field = self.take()
        if kind not in ("word", "field"):
            raise FilterError(f"expected a field name, got {field!r}")
        okind, op = self.take()
        if okind != "op":
            raise FilterError(f"expected an operator after {field}")
        vkind, raw = self.take()
        if vkind not in ("str", "word", "field"):
            raise FilterError(f"expected a value after {field}{op}")
        value = json.loads(raw) if vkind == "str" else raw
        return self.compare(field_path(field), op, value)
