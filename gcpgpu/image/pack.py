"""A user's folder packed into one deterministic tar.gz: `job submit --workdir` stages it (jobs/workdir.py)
and the image's entrypoint unpacks it into /workdir on every node or replica (node/workspace.py);
`container build --context` bakes the same files into an image (image/user_layer.py). What is packed follows the folder's .gitignore files (git's own
rules through `git ls-files` inside a git work tree, else a reader of the same syntax) and a
.gcpgpuignore at its top (gitignore syntax), so data sets and checkpoints stay out.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import re
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gcpgpu import specfile
from gcpgpu.errors import UsageProblem

MAX_PACKED = 100 * 2**20  # bytes: a folder of code; data belongs in a bucket (--mount)
IGNORE_FILE = ".gcpgpuignore"
_ALWAYS_SKIPPED = (".git",)


@dataclass(frozen=True)
class Packed:
    data: bytes
    files: tuple[tuple[str, int], ...]  # (path inside /workdir, size in bytes), sorted
    sha256: str


class _Rules:
    """gitignore patterns of one file, matched against paths relative to the file's folder."""

    def __init__(self, text: str, base: str = "") -> None:
        self.base = base  # the folder holding the file, relative to the workdir ("" for its top)
        self.rules: list[tuple[re.Pattern[str], bool, bool]] = []  # (pattern, negated, folders only)
        for raw in text.splitlines():
            line = raw.rstrip()
            if not line or line.startswith("#"):
                continue
            negated = line.startswith("!")
            line = line[1:] if negated else line
            if line.startswith("\\"):
                line = line[1:]
            dir_only = line.endswith("/")
            line = line.rstrip("/")
            if not line:
                continue
            anchored = "/" in line
            line = line.lstrip("/")
            body = _translate(line)
            self.rules.append((re.compile(("" if anchored else "(?:.*/)?") + body + "$"), negated, dir_only))

    def verdict(self, rel: str, is_dir: bool) -> bool | None:
        """True: ignored, False: re-included by a '!' rule, None: no rule speaks of `rel`."""
        if self.base:
            if not rel.startswith(self.base + "/"):
                return None
            rel = rel[len(self.base) + 1:]
        found = None
        for pattern, negated, dir_only in self.rules:
            if (is_dir or not dir_only) and pattern.match(rel):
                found = not negated
        return found


def _translate(pattern: str) -> str:
    out, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        elif pattern[i] == "[" and "]" in pattern[i + 1:]:
            end = pattern.index("]", i + 2 if pattern[i + 1:i + 2] in ("!", "]") else i + 1)
            inner = pattern[i + 1:end]
            out.append("[" + ("^" + inner[1:] if inner.startswith("!") else inner) + "]")
            i = end + 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return "".join(out)


def _ignored(rules: list[_Rules], rel: str, is_dir: bool) -> bool:
    verdict = False
    for r in rules:
        v = r.verdict(rel, is_dir)
        if v is not None:
            verdict = v
    return verdict


def _git_files(root: Path) -> list[str] | None:
    """The files git would keep (tracked, and untracked ones no ignore rule names), or None outside a git
    work tree. `git ls-files` applies every .gitignore, .git/info/exclude and the global excludes, and
    skips ignored folders without walking them (a data/ of millions of files costs nothing)."""
    try:
        inside = subprocess.run(["git", "-C", str(root), "rev-parse", "--is-inside-work-tree"],
                                capture_output=True, text=True, timeout=30)
        if inside.returncode != 0 or inside.stdout.strip() != "true":
            return None
        done = subprocess.run(["git", "-C", str(root), "ls-files", "-z", "--cached", "--others",
                               "--exclude-standard", "--", "."], capture_output=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    return sorted({p for p in done.stdout.decode("utf-8", "surrogateescape").split("\0") if p})


def list_files(root: Path) -> list[str]:
    """The workdir's files to pack (relative POSIX paths, sorted), ignore files applied."""
    root = root.resolve()
    own = _Rules((root / IGNORE_FILE).read_text(errors="replace")) if (root / IGNORE_FILE).is_file() else None
    git = _git_files(root)
    picked: list[str] = []
    if git is not None:
        for rel in git:
            parts = rel.split("/")
            if own is not None and any(_ignored([own], "/".join(parts[:i]), True) for i in range(1, len(parts))):
                continue
            if own is not None and _ignored([own], rel, False):
                continue
            picked.append(rel)
    else:
        rules: list[_Rules] = [own] if own is not None else []
        for folder, dirs, files in os.walk(root):
            here = Path(folder).relative_to(root).as_posix()
            here = "" if here == "." else here
            if (Path(folder) / ".gitignore").is_file():
                rules.append(_Rules((Path(folder) / ".gitignore").read_text(errors="replace"), here))
            # gitignore rules on a folder hide everything under it; a later '!' cannot bring a file back.
            dirs[:] = sorted(d for d in dirs if d not in _ALWAYS_SKIPPED
                             and not _ignored(rules, f"{here}/{d}".lstrip("/"), True))
            picked += [f"{here}/{f}".lstrip("/") for f in files if not _ignored(rules, f"{here}/{f}".lstrip("/"), False)]
    out = []
    for rel in picked:
        path = root / rel
        # A link is packed as the file it names, and only when that file lies inside the workdir.
        if not path.is_file() or (path.is_symlink() and not path.resolve().is_relative_to(root)):
            continue
        if rel.startswith("/") or ".." in rel.split("/"):
            continue
        out.append(rel)
    return sorted(set(out))


class _Capped(io.RawIOBase):
    """A byte sink that stops packing as soon as the compressed size passes the cap."""

    def __init__(self) -> None:
        self.buf = io.BytesIO()

    def writable(self) -> bool:
        return True

    def write(self, b: Any) -> int:
        n = self.buf.write(b)
        if self.buf.tell() > MAX_PACKED:
            raise OverflowError
        return n


def pack(root: str | Path, where: str = "--workdir") -> Packed:
    """The workdir as a deterministic tar.gz (sorted entries, mtime 0, uid/gid 0): the same files give the
    same bytes and so the same object name. Refused in one line over MAX_PACKED."""
    root = Path(root).resolve()
    names = list_files(root)
    if not names:
        raise UsageProblem(f"{where} {str(root)!r}: every file is ignored (.gitignore, {IGNORE_FILE}); nothing to pack")
    sizes = [(rel, (root / rel).stat().st_size) for rel in names]
    sink = _Capped()
    try:
        with gzip.GzipFile(fileobj=sink, mode="wb", mtime=0, compresslevel=6) as gz, \
                tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for rel, _ in sizes:
                path = root / rel
                info = tarfile.TarInfo(rel)
                info.size = path.stat().st_size
                info.mtime = 0
                info.mode = 0o755 if path.stat().st_mode & 0o111 else 0o644
                info.uid = info.gid = 0
                info.uname = info.gname = ""
                with path.open("rb") as f:
                    tar.addfile(info, f)
    except OverflowError:
        biggest = sorted(sizes, key=lambda s: (-s[1], s[0]))[:3]
        shown = ", ".join(f"{rel} ({mib(n)})" for rel, n in biggest)
        raise UsageProblem(f"{where} {str(root)!r} packs to over {mib(MAX_PACKED)} (the cap); biggest: {shown}; "
                           f"leave them out with {root / IGNORE_FILE} (gitignore syntax) and --mount data from a "
                           "bucket") from None
    data = sink.buf.getvalue()
    return Packed(data=data, files=tuple(sizes), sha256=hashlib.sha256(data).hexdigest())


def mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"


def check_folder(value: Any, where: str = "--workdir") -> str:
    """An existing, non-empty folder -> its absolute path."""
    shown = specfile.shown(value)
    if not isinstance(value, str) or not value.strip():
        raise UsageProblem(f"{where} is empty: give the folder with your code, e.g. {where} .")
    if not os.path.exists(value):
        raise UsageProblem(f"{where} {shown} does not exist: give the folder with your code")
    if not os.path.isdir(value):
        raise UsageProblem(f"{where} {shown} is not a folder: give the folder with your code (its files "
                           "land in /workdir)")
    try:
        empty = not os.listdir(value)
    except OSError as e:
        raise UsageProblem(f"{where} {shown} cannot be read: {e.strerror}") from None
    if empty:
        raise UsageProblem(f"{where} {shown} is empty: give the folder with your code")
    return os.path.abspath(value)
