"""Cloud Monitoring's filter language, as users write it in ListTimeSeries and dashboards.

    metric.type = "compute.googleapis.com/instance/network/sent_bytes_count"
      AND resource.type = "gce_instance"
      AND resource.labels.instance_id = one_of("123", "456")
      AND metric.labels.instance_name = starts_with("demo-")
      AND NOT metric.label.loadbalanced = "true"

Selectors: project, metric.type, resource.type, metric.label(s).KEY, resource.label(s).KEY,
metadata.user_labels.KEY, metadata.system_labels.KEY (KEY bare or quoted). Operators: = != : (has
substring) < <= > >=, with the functions starts_with, ends_with, has_substring, one_of and
monitoring.regex.full_match on the right of = or !=. Terms combine with AND, OR, NOT and
parentheses; terms side by side mean AND (the dashboards' own samples write it that way).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any


class FilterError(ValueError):
    """A filter that does not parse; the message says where and what was expected."""


_TOKEN = re.compile(
    r"""\s*(?:
      (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')
    | (?P<op>!=|>=|<=|=|:|<|>|\(|\)|,)
    | (?P<word>[A-Za-z_][A-Za-z0-9_.\-/]*\.?(?:"(?:[^"\\]|\\.)*")?|-?\d+(?:\.\d+)?)
    )""",
    re.VERBOSE,
)
_FUNCTIONS = {"starts_with", "ends_with", "has_substring", "one_of", "monitoring.regex.full_match"}
_KEYWORDS = {"AND", "OR", "NOT"}


def _unquote(text: str) -> str:
    body = text[1:-1]
    return re.sub(r"\\(.)", r"\1", body)


def _tokens(text: str) -> list[tuple[str, str, int]]:
    out: list[tuple[str, str, int]] = []
    pos = 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        match = _TOKEN.match(text, pos)
        if not match or match.end() == pos:
            raise FilterError(f"unexpected character {text[pos:].lstrip()[:1]!r} at position {pos}")
        kind = match.lastgroup or ""
        value = match.group(kind)
        out.append((kind, value, match.start(kind)))
        pos = match.end()
    return out


# ------------------------------------------------------------------------ the tree
@dataclass(frozen=True)
class Compare:
    selector: str  # normalized: "metric.type", "metric.labels.KEY", "resource.labels.KEY", ...
    op: str  # = != : < <= > >=
    function: str | None  # None for a literal
    values: tuple[str, ...]

    def __post_init__(self) -> None:
        # one_of over a cluster's 1,024 instance ids, tested against 8,192 series: a set, not a tuple scan.
        object.__setattr__(self, "value_set", frozenset(self.values))

    def test(self, get: Callable[[str], str | None]) -> bool:
        actual = get(self.selector)
        if self.op == "!=":
            return not self._positive(actual)
        return self._positive(actual)

    def _positive(self, actual: str | None) -> bool:
        if actual is None:
            return False
        if self.op == ":":
            return self.values[0] in actual
        if self.op in ("<", "<=", ">", ">="):
            try:
                a, b = float(actual), float(self.values[0])
            except ValueError:
                a, b = actual, self.values[0]  # type: ignore[assignment]
            return {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[self.op]
        fn = self.function
        if fn is None:
            return actual == self.values[0]
        if fn == "starts_with":
            return actual.startswith(self.values[0])
        if fn == "ends_with":
            return actual.endswith(self.values[0])
        if fn == "has_substring":
            return self.values[0] in actual
        if fn == "one_of":
            return actual in self.value_set  # type: ignore[attr-defined]
        return _regex(self.values[0]).fullmatch(actual) is not None


@dataclass(frozen=True)
class And:
    terms: tuple[Any, ...]

    def test(self, get: Callable[[str], str | None]) -> bool:
        return all(t.test(get) for t in self.terms)


@dataclass(frozen=True)
class Or:
    terms: tuple[Any, ...]

    def test(self, get: Callable[[str], str | None]) -> bool:
        return any(t.test(get) for t in self.terms)


@dataclass(frozen=True)
class Not:
    term: Any

    def test(self, get: Callable[[str], str | None]) -> bool:
        return not self.term.test(get)


Node = Compare | And | Or | Not


@lru_cache(maxsize=256)
def _regex(pattern: str) -> re.Pattern[str]:
    # RE2 and Python's re agree on the patterns people put in filters.
    return re.compile(pattern)


# ------------------------------------------------------------------------ parsing
def normalize_selector(name: str) -> str:
    """'resource.label.zone' and 'resource.labels."zone"' -> 'resource.labels.zone'."""
    for prefix, canonical in (
        ("metric.labels.", "metric.labels."),
        ("metric.label.", "metric.labels."),
        ("resource.labels.", "resource.labels."),
        ("resource.label.", "resource.labels."),
        ("metadata.user_labels.", "metadata.user_labels."),
        ("metadata.system_labels.", "metadata.system_labels."),
    ):
        if name.startswith(prefix):
            key = name[len(prefix):]
            if len(key) >= 2 and key[0] == key[-1] and key[0] in "\"'":
                key = _unquote(key)
            if not key:
                raise FilterError(f"selector {name!r} names no label")
            return canonical + key
    if name in ("metric.type", "resource.type", "project", "metric.display_name"):
        return name
    raise FilterError(
        f"unknown selector {name!r}: expected project, metric.type, resource.type, "
        "metric.labels.KEY, resource.labels.KEY or metadata.user_labels.KEY"
    )


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.toks = _tokens(text)
        self.i = 0

    def peek(self) -> tuple[str, str, int] | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self) -> tuple[str, str, int]:
        tok = self.peek()
        if tok is None:
            raise FilterError("the filter ends too early")
        self.i += 1
        return tok

    def expect(self, value: str) -> None:
        tok = self.take()
        if tok[1] != value:
            raise FilterError(f"expected {value!r} at position {tok[2]}, found {tok[1]!r}")

    def parse(self) -> Node:
        if not self.toks:
            raise FilterError("the filter is empty")
        node = self.or_expr()
        if self.peek() is not None:
            tok = self.peek()
            assert tok is not None
            raise FilterError(f"unexpected {tok[1]!r} at position {tok[2]}")
        return node

    def or_expr(self) -> Node:
        terms = [self.and_expr()]
        while (tok := self.peek()) is not None and tok[1] == "OR":
            self.take()
            terms.append(self.and_expr())
        return terms[0] if len(terms) == 1 else Or(tuple(terms))

    def and_expr(self) -> Node:
        terms = [self.unary()]
        while (tok := self.peek()) is not None and tok[1] not in ("OR", ")"):
            if tok[1] == "AND":
                self.take()
            terms.append(self.unary())
        return terms[0] if len(terms) == 1 else And(tuple(terms))

    def unary(self) -> Node:
        tok = self.peek()
        if tok is not None and tok[1] == "NOT":
            self.take()
            return Not(self.unary())
        if tok is not None and tok[1] == "(":
            self.take()
            node = self.or_expr()
            self.expect(")")
            return node
        return self.compare()

    def compare(self) -> Compare:
        kind, name, pos = self.take()
        if kind != "word" or name in _KEYWORDS or name[:1].isdigit() or name[:1] == "-":
            raise FilterError(f"expected a selector such as metric.type at position {pos}, found {name!r}")
        selector = normalize_selector(name)
        kind, op, pos = self.take()
        if kind != "op" or op not in ("=", "!=", ":", "<", "<=", ">", ">="):
            raise FilterError(f"expected =, !=, : or a comparison after {name} at position {pos}, found {op!r}")
        kind, value, pos = self.take()
        nxt = self.peek()
        if kind == "word" and nxt is not None and nxt[1] == "(":
            if value not in _FUNCTIONS:
                raise FilterError(f"unknown function {value!r} at position {pos}: expected one of "
                                  + ", ".join(sorted(_FUNCTIONS)))
            if op not in ("=", "!="):
                raise FilterError(f"{value}() needs = or != before it (position {pos})")
            self.take()
            args: list[str] = []
            while True:
                akind, arg, apos = self.take()
                if akind != "string":
                    raise FilterError(f"{value}() takes quoted strings; found {arg!r} at position {apos}")
                args.append(_unquote(arg))
                sep = self.take()
                if sep[1] == ")":
                    break
                if sep[1] != ",":
                    raise FilterError(f"expected , or ) in {value}() at position {sep[2]}")
            if value != "one_of" and len(args) != 1:
                raise FilterError(f"{value}() takes one string, got {len(args)}")
            if value == "monitoring.regex.full_match":
                try:
                    _regex(args[0])
                except re.error as e:
                    raise FilterError(f"bad regular expression {args[0]!r}: {e}") from e
            return Compare(selector, op, value, tuple(args))
        if kind == "string":
            return Compare(selector, op, None, (_unquote(value),))
        if kind == "word" and value not in _KEYWORDS:
            return Compare(selector, op, None, (value,))  # bare words and numbers: gauge labels, booleans
        raise FilterError(f"expected a value after {name} {op} at position {pos}")


@lru_cache(maxsize=512)
def parse(text: str) -> Node:
    """The filter's tree; FilterError when it does not parse."""
    return _Parser(text).parse()


def conjuncts(node: Node) -> tuple[Node, ...]:
    """The terms ANDed at the top level (the whole node if it is not an AND)."""
    return node.terms if isinstance(node, And) else (node,)


def equal_literal(node: Node, selector: str) -> list[str]:
    """Literal values the top-level AND pins `selector` to with `=` (e.g. the metric type)."""
    return [t.values[0] for t in conjuncts(node)
            if isinstance(t, Compare) and t.selector == selector and t.op == "=" and t.function is None]


def allowed_values(node: Node, selector: str) -> set[str] | None:
    """The values `selector` can take under the top-level AND (= or one_of), or None if unconstrained.

    Lets a backend skip generating series the filter would throw away anyway.
    """
    allowed: set[str] | None = None
    for t in conjuncts(node):
        if isinstance(t, Compare) and t.selector == selector and t.op == "=" and t.function in (None, "one_of"):
            values = set(t.values)
            allowed = values if allowed is None else allowed & values
    return allowed


def matcher(
    node: Node,
    *,
    project: str,
    metric_type: str,
    metric_labels: Mapping[str, str],
    resource_type: str,
    resource_labels: Mapping[str, str],
    user_labels: Mapping[str, str] | None = None,
    system_labels: Mapping[str, str] | None = None,
) -> bool:
    """Whether one time series' header matches the filter."""

    def get(selector: str) -> str | None:
        if selector == "metric.type":
            return metric_type
        if selector == "resource.type":
            return resource_type
        if selector == "project":
            return project
        if selector.startswith("metric.labels."):
            return metric_labels.get(selector[len("metric.labels."):])
        if selector.startswith("resource.labels."):
            return resource_labels.get(selector[len("resource.labels."):])
        if selector.startswith("metadata.user_labels."):
            return (user_labels or {}).get(selector[len("metadata.user_labels."):])
        if selector.startswith("metadata.system_labels."):
            return (system_labels or {}).get(selector[len("metadata.system_labels."):])
        return None

    return node.test(get)
