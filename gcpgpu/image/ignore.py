"""gitignore patterns (.gitignore, .gcpgpuignore) read and matched as git matches them, in bounded time.

A pattern is cut at its slashes into segments. Within a segment, '*' runs are split off and the pieces
between them (literal bytes, '?', [classes], each one byte wide) are found leftmost, in order: a piece is a
fixed-width regular expression, so nothing backtracks beyond one piece. A '**' segment (zero or more
folders; one or more at the pattern's end) is matched over the path's segments by dynamic programming, one
row per pattern segment. Time is bounded by (pattern length x path length), whatever the pattern holds:
'**/' twenty times or '*a*a*a*a*a*a*a*a*a*a*a*a*b' cost no more than any other pattern of their length.

Where git's rules are odd, git's behaviour is kept (checked against `git check-ignore`): a pattern with an
unclosed '[' ('[]', '[!]', '[\\]') or an unknown '[:class:]' matches nothing; '[z-a]' matches 'z' alone;
bytes, not characters, are matched ('?' is one byte of UTF-8); trailing unescaped spaces are dropped.
Ignore files are read whole up to MAX_IGNORE_BYTES; a bigger one is refused in one line.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

from gcpgpu.errors import UsageProblem

MAX_IGNORE_BYTES = 2**20  # a few hundred patterns are a long ignore file; a bigger one is not a list of patterns
_STARSTAR = "**"  # a whole segment of two or more stars: zero or more folders
_STARSTAR_PLUS = "**\\/"  # one before an escaped slash: git gives it no empty match, so one or more folders
_DEEP = (_STARSTAR, _STARSTAR_PLUS)
_ASCII = {
    "alnum": "0-9A-Za-z", "alpha": "A-Za-z", "blank": " \t", "cntrl": "\x00-\x1f\x7f", "digit": "0-9",
    "graph": "!-~", "lower": "a-z", "print": " -~", "space": " \t\n\r\x0b\x0c", "upper": "A-Z", "xdigit": "0-9A-Fa-f",
}
_CLASSES = {name.encode(): frozenset(ord(c) for c in map(chr, range(128)) if re.fullmatch(f"[{chars}]", c))
            for name, chars in _ASCII.items()}
_CLASSES[b"punct"] = frozenset(c for c in range(0x21, 0x7f) if not chr(c).isalnum())


class _Never(Exception):
    """The pattern can match nothing (git aborts its match: an unclosed '[', an unknown [:class:])."""


def _bracket(p: bytes, i: int) -> tuple[set[int], bool, int]:
    """The class opening at p[i] == '[': (its bytes, negated, the index after its ']'). As git reads one: the
    first byte is a member even if it is ']', a range's first byte is a member itself, '\\' escapes."""
    j = i + 1
    negated = j < len(p) and p[j] in b"!^"
    j += negated
    members: set[int] = set()
    prev: int | None = None
    first = True
    while True:
        if j >= len(p):
            raise _Never
        c = p[j]
        if c == ord("]") and not first:
            return members, negated, j + 1
        first = False
        if c == ord("\\"):
            j += 1
            if j >= len(p):
                raise _Never
            members.add(p[j])
            prev = p[j]
        elif c == ord("-") and prev is not None and j + 1 < len(p) and p[j + 1] != ord("]"):
            j += 1
            hi = p[j]
            if hi == ord("\\"):
                j += 1
                if j >= len(p):
                    raise _Never
                hi = p[j]
            members.update(range(prev, hi + 1))
            prev = None
        elif c == ord("[") and j + 1 < len(p) and p[j + 1] == ord(":"):
            end = p.find(b"]", j + 2)
            if end < 0:
                raise _Never
            if end - (j + 2) < 1 or p[end - 1] != ord(":"):  # no ':]': the '[' is a member like any byte
                members.add(c)
                prev = c
            else:
                name = p[j + 2:end - 1]
                if name not in _CLASSES:
                    raise _Never
                members |= _CLASSES[name]
                prev = None
                j = end
        else:
            members.add(c)
            prev = c
        j += 1


def _byte_class(members: set[int]) -> bytes:
    if not members:
        return b"(?!)"
    if len(members) == 1:
        return re.escape(bytes(members))
    out, run = [], sorted(members)
    start = last = run[0]
    for b in [*run[1:], None]:
        if b is not None and b == last + 1:
            last = b
            continue
        out.append(b"\\x%02x" % start + (b"-\\x%02x" % last if last > start else b""))
        if b is not None:
            start = last = b
    return b"[" + b"".join(out) + b"]"


class _One:
    """A token one byte wide that is not a literal byte ('?', a [class]): its regular expression."""

    def __init__(self, expr: bytes) -> None:
        self.expr = expr


_ANY = _One(b"[\\x00-\\xff]")
_TOKEN = re.compile(rb"\*+|\?|\[|\\/|\\.?|/|[^*?\[\\/]+", re.DOTALL)
Token = bytes | _One | None  # a literal run, one byte's expression, or a '*' run


class _Segment:
    """One segment's pattern: HEAD*MID*...*TAIL, each piece of fixed width (literal bytes, or a regular
    expression without repetition). It matches when HEAD starts the text, TAIL ends it, and each MID is found
    after the one before, leftmost (an earlier place never loses a match): nothing backtracks, so the cost is
    at most (pattern length x text length)."""

    def __init__(self, tokens: list[Token]) -> None:
        pieces: list[list[bytes | _One]] = [[]]
        for tok in tokens:
            if tok is None:
                if pieces[-1] or len(pieces) == 1:
                    pieces.append([])
            else:
                pieces[-1].append(tok)
        self.starred = len(pieces) > 1
        self.widths = [sum(len(t) if isinstance(t, bytes) else 1 for t in piece) for piece in pieces]
        self.pieces: list[bytes | re.Pattern[bytes]] = [
            b"".join(piece) if all(isinstance(t, bytes) for t in piece)  # type: ignore[misc]
            else re.compile(b"".join(re.escape(t) if isinstance(t, bytes) else t.expr for t in piece), re.DOTALL)
            for piece in pieces]
        self.head, self.tail, self.middles = self.pieces[0], self.pieces[-1], self.pieces[1:-1]
        self.head_width, self.tail_width = self.widths[0], self.widths[-1]

    def match(self, text: bytes) -> bool:
        head, tail = self.head, self.tail
        if not self.starred:
            return text == head if isinstance(head, bytes) else head.fullmatch(text) is not None
        end = len(text) - self.tail_width  # where TAIL must start
        if end < self.head_width:
            return False
        if not (text.startswith(head) if isinstance(head, bytes) else head.match(text)):
            return False
        if not (text.endswith(tail) if isinstance(tail, bytes) else tail.fullmatch(text, end)):
            return False
        pos = self.head_width
        for middle in self.middles:
            if isinstance(middle, bytes):
                at = text.find(middle, pos, end)
                if at < 0:
                    return False
                pos = at + len(middle)
            else:
                found = middle.search(text, pos, end)
                if found is None:
                    return False
                pos = found.end()
        return True


def _segments(p: bytes) -> list[_Segment | str]:
    """A pattern cut at its slashes: each segment a _Segment, or _STARSTAR (a whole segment of stars);
    runs of '**' segments fold into one (zero or more folders twice over is zero or more folders)."""
    out: list[_Segment | str] = []
    current: list[Token] | str = []
    i, n = 0, len(p)
    while True:
        tok = _TOKEN.match(p, i) if i < n else None
        if tok is None or tok.group() in (b"/", b"\\/"):  # the segment ends
            if current == _STARSTAR and tok is not None and tok.group() == b"\\/":
                out.append(_STARSTAR_PLUS)
            elif current != _STARSTAR:
                out.append(_Segment(current))  # type: ignore[arg-type]
            elif not out or out[-1] != _STARSTAR:
                out.append(_STARSTAR)
            if tok is None:
                return out
            current, i = [], tok.end()
            continue
        assert isinstance(current, list)
        text, i = tok.group(), tok.end()
        if text[0] == ord("*"):
            whole = len(text) >= 2 and not current and (i == n or p.startswith(b"/", i) or p.startswith(b"\\/", i))
            current = _STARSTAR if whole else [*current, None]
        elif text == b"?":
            current.append(_ANY)
        elif text == b"[":
            members, negated, i = _bracket(p, i - 1)
            current.append(_One(_byte_class(set(range(256)) - members if negated else members)))
        elif text[0] == ord("\\"):
            if len(text) == 1:
                raise _Never  # a trailing backslash escapes nothing: git matches nothing with it
            current.append(text[1:])
        else:
            current.append(text)


def _trim_trailing_spaces(line: bytes) -> bytes:
    """Trailing spaces go unless the first of them is escaped with a backslash (as git reads a line)."""
    cut, i = None, 0
    while i < len(line):
        if line[i] == ord(" "):
            cut = i if cut is None else cut
        elif line[i] == ord("\\"):
            i += 1
            cut = None
            if i >= len(line):
                break
        else:
            cut = None
        i += 1
    return line if cut is None else line[:cut]


class Pattern:
    """One line of an ignore file: '!' re-includes, a trailing '/' speaks of folders only, a pattern with a '/'
    is matched against the path from the ignore file's folder, one without against the last component."""

    def __init__(self, line: bytes) -> None:
        self.negated = line.startswith(b"!")
        line = line[1:] if self.negated else line
        self.dir_only = line.endswith(b"/")
        line = line[:-1] if self.dir_only else line
        self.anchored = b"/" in line
        line = line[1:] if line.startswith(b"/") else line
        self.empty = not line
        # git compares the part before the first wildcard byte by byte and matches the rest on its own, so a
        # '**' right after it counts as a folder boundary even mid-name: 'b-**/x' is 'b-' then '**/x'.
        self.prefix = b""
        quirk = re.match(rb"([^*?\[\\]+)\*\*+(?=$|/|\\/)", line) if self.anchored else None
        if quirk and not quirk.group(1).endswith(b"/"):
            self.prefix, rest = quirk.group(1), line[quirk.end():]
            line = b"**" + rest
        try:
            segments = _segments(line)
        except _Never:
            segments = None
        if segments is not None and not self.anchored:  # one segment; '**' there is a '*' ("**" matches any name)
            segments = [_Segment([None]) if s in _DEEP else s for s in segments]
        self.segments = segments
        self.fixed = None if segments is None else sum(1 for s in segments if s not in _DEEP)

    def matches(self, rel: bytes, name: bytes) -> bool:
        """Whether the pattern matches `rel` (the path from the ignore file's folder), `name` its last component."""
        segments = self.segments
        if segments is None:
            return False
        if not self.anchored:
            return segments[0].match(name)  # type: ignore[union-attr]
        if self.prefix:
            if not rel.startswith(self.prefix):
                return False
            rel = rel[len(self.prefix):]
        parts = rel.split(b"/")
        n = len(parts)
        if self.fixed > n or (self.fixed == len(segments) and self.fixed != n):  # type: ignore[operator]
            return False
        # row[j]: segments[i:] match parts[j:], computed from the last segment back.
        row = [False] * n + [True]
        for i in range(len(segments) - 1, -1, -1):
            segment = segments[i]
            if segment in _DEEP:
                if i == len(segments) - 1:
                    row = [j < n for j in range(n + 1)]  # a trailing '**': one or more components
                else:
                    seen, skip = False, segment == _STARSTAR_PLUS
                    for j in range(n, -1, -1):
                        now = row[j]
                        row[j] = seen or (now and not skip)
                        seen = seen or now
            else:
                row = [j < n and row[j + 1] and segment.match(parts[j]) for j in range(n + 1)]  # type: ignore[union-attr]
            if not any(row):
                return False
        return row[0]


class Rules:
    """The patterns of one ignore file, matched against paths relative to the file's folder."""

    def __init__(self, text: bytes, base: str = "") -> None:
        self.base = base  # the folder holding the file, relative to the packed folder ("" for its top)
        text = text[3:] if text.startswith(b"\xef\xbb\xbf") else text
        # The last pattern that matches decides, so of equal lines only the last can: the others are dropped.
        lines: dict[bytes, None] = {}
        for raw in text.split(b"\n"):
            line = raw[:-1] if raw.endswith(b"\r") else raw
            if line and not line.startswith(b"#"):
                line = _trim_trailing_spaces(line) if line.endswith(b" ") else line
                lines.pop(line, None)
                lines[line] = None
        self.patterns = [p for p in map(Pattern, lines) if not p.empty]

    def verdict(self, rel: str, is_dir: bool) -> bool | None:
        """True: ignored, False: re-included by a '!' rule, None: no rule speaks of `rel`."""
        if self.base:
            if not rel.startswith(self.base + "/"):
                return None
            rel = rel[len(self.base) + 1:]
        path = rel.encode("utf-8", "surrogateescape")
        name = path.rpartition(b"/")[2]
        for pattern in reversed(self.patterns):  # the last pattern that matches decides
            if (is_dir or not pattern.dir_only) and pattern.matches(path, name):
                return not pattern.negated
        return None


def ignored(rules: list[Rules], rel: str, is_dir: bool) -> bool:
    """Whether the deepest ignore file that speaks of `rel` ignores it (the files in the order they apply)."""
    for r in reversed(rules):
        v = r.verdict(rel, is_dir)
        if v is not None:
            return v
    return False


def read(path: Path) -> bytes:
    """An ignore file's bytes: a regular file of at most MAX_IGNORE_BYTES, else one line naming it and the cap."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except OSError as e:
        raise UsageProblem(f"{path}: cannot read this ignore file ({e.strerror})") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise UsageProblem(f"{path}: an ignore file must be a regular file of gitignore patterns")
        data = f.read(MAX_IGNORE_BYTES + 1) if st.st_size <= MAX_IGNORE_BYTES else b""
    if st.st_size > MAX_IGNORE_BYTES or len(data) > MAX_IGNORE_BYTES:
        raise UsageProblem(f"{path}: {max(st.st_size, len(data))} bytes, over the {MAX_IGNORE_BYTES // 2**20} MiB "
                           "cap for an ignore file (gitignore patterns, one a line)")
    return data
