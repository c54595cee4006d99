"""objects.list and buckets.list semantics, pure: prefix, delimiter, offsets, matchGlob and pages.

With a delimiter, names that go on past it after the prefix are rolled up into `prefixes` (each once);
items and prefixes share one order (UTF-8 bytes) and one page, as Google pages them, so a page of
maxResults holds at most that many of both together. The page token is the last key of the page.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable

from .names import bad_request

DEFAULT_PAGE = 1000


def entries(names: Iterable[str], prefix: str = "", delimiter: str = "", start_offset: str = "",
            end_offset: str = "", match_glob: str = "", include_trailing: bool = False) -> list[tuple[str, bool]]:
    """(key, is_prefix) for what objects.list returns, in order; `names` must be sorted."""
    glob = glob_regex(match_glob) if match_glob else None
    out: list[tuple[str, bool]] = []
    rolled: set[str] = set()
    for name in names:
        if not name.startswith(prefix) or (start_offset and _b(name) < _b(start_offset)) \
                or (end_offset and _b(name) >= _b(end_offset)) or (glob and not glob.fullmatch(name)):
            continue
        rest = name[len(prefix):]
        cut = rest.find(delimiter) if delimiter else -1
        if cut >= 0:
            rolled_up = prefix + rest[:cut + len(delimiter)]
            if rolled_up not in rolled:
                rolled.add(rolled_up)
                out.append((rolled_up, True))
            if include_trailing and rolled_up == name:
                out.append((name, False))
            continue
        out.append((name, False))
    return sorted(out, key=lambda e: (_b(e[0]), not e[1]))


def page(keys: list[tuple[str, bool]], page_token: str = "", max_results: str | int | None = None
         ) -> tuple[list[tuple[str, bool]], str | None]:
    """One page after `page_token`, and the token of the next (None on the last page)."""
    size = _page_size(max_results)
    if page_token:
        after = _token_key(page_token)
        keys = [k for k in keys if _b(k[0]) > _b(after)]
    if len(keys) <= size:
        return keys, None
    return keys[:size], base64.urlsafe_b64encode(keys[size - 1][0].encode("utf-8", "surrogatepass")).decode()


def _page_size(value: str | int | None) -> int:
    if value in (None, ""):
        return DEFAULT_PAGE
    try:
        size = int(value)
    except (TypeError, ValueError):
        raise bad_request(f"Invalid value for maxResults: {value!r}") from None
    if size < 0:
        raise bad_request(f"Invalid value for maxResults: {value!r}")
    return min(size, DEFAULT_PAGE) or DEFAULT_PAGE


def _token_key(token: str) -> str:
    try:
        return base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode("utf-8", "surrogatepass")
    except (ValueError, UnicodeDecodeError):
        raise bad_request(f"Invalid pageToken: {token!r}") from None


def _b(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


def glob_regex(pattern: str) -> re.Pattern:
    """matchGlob: '*' within one '/' segment, '**' across them, '?', '[...]' classes and '{a,b}' choices."""
    out, i, depth = [], 0, 0
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
            continue
        if pattern.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            end = pattern.find("]", i + 2)
            if end < 0:
                raise bad_request(f"Invalid matchGlob {pattern!r}: '[' is not closed")
            body = pattern[i + 1:end]
            out.append("[" + ("^" + body[1:] if body.startswith("!") else body).replace("\\", "\\\\") + "]")
            i = end
        elif c == "{":
            out.append("(?:")
            depth += 1
        elif c == "}" and depth:
            out.append(")")
            depth -= 1
        elif c == "," and depth:
            out.append("|")
        else:
            out.append(re.escape(c))
        i += 1
    if depth:
        raise bad_request(f"Invalid matchGlob {pattern!r}: '{{' is not closed")
    return re.compile("".join(out), re.DOTALL)
