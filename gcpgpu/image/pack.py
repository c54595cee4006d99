"""A user's folder packed into one deterministic tar.gz: `job submit --workdir` stages it (jobs/workdir.py)
and the image's entrypoint unpacks it into /workdir on every node or replica (node/workspace.py);
`container build --context` bakes the same files into an image (image/user_layer.py). What is packed
follows the folder's .gitignore files (git's own rules through `git ls-files` inside a git work tree, else
image/ignore.py, which matches as git does in bounded time) and a .gcpgpuignore at its top (gitignore
syntax, image/ignore.py), so data sets and checkpoints stay out. Every path is resolved, each component,
and kept only when it lies under the folder: a link out, or a tracked file under a folder that became a
link out, is left out (and named: Packed.skipped).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gcpgpu import specfile
from gcpgpu.errors import UsageProblem
from gcpgpu.image.ignore import Rules, ignored, read

MAX_PACKED = 100 * 2**20  # bytes: a folder of code; data belongs in a bucket (--mount)
IGNORE_FILE = ".gcpgpuignore"
_ALWAYS_SKIPPED = (".git",)


@dataclass(frozen=True)
class Packed:
    data: bytes
    files: tuple[tuple[str, int], ...]  # (path inside /workdir, size in bytes), sorted
    sha256: str
    skipped: tuple[str, ...] = ()  # paths left out because they lead out of the folder (links), sorted


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
    return select(root)[0]


def select(root: Path) -> tuple[list[str], list[str]]:
    """(the files to pack, the paths left out because they lead out of the folder), both relative POSIX
    paths, sorted; ignore files applied."""
    root = root.resolve()
    own = Rules(read(root / IGNORE_FILE)) if (root / IGNORE_FILE).is_file() else None
    git = _git_files(root)
    picked: list[str] = []
    if git is not None:
        for rel in git:
            parts = rel.split("/")
            if own is not None and any(ignored([own], "/".join(parts[:i]), True) for i in range(1, len(parts))):
                continue
            if own is not None and ignored([own], rel, False):
                continue
            picked.append(rel)
    else:
        rules: list[Rules] = [own] if own is not None else []
        for folder, dirs, files in os.walk(root):
            here = Path(folder).relative_to(root).as_posix()
            here = "" if here == "." else here
            if (Path(folder) / ".gitignore").is_file():
                rules.append(Rules(read(Path(folder) / ".gitignore"), here))
            # gitignore rules on a folder hide everything under it; a later '!' cannot bring a file back.
            dirs[:] = sorted(d for d in dirs if d not in _ALWAYS_SKIPPED
                             and not ignored(rules, f"{here}/{d}".lstrip("/"), True))
            picked += [f"{here}/{f}".lstrip("/") for f in files if not ignored(rules, f"{here}/{f}".lstrip("/"), False)]
    out, outside = set(), set()
    for rel in picked:
        if rel.startswith("/") or ".." in rel.split("/"):
            continue
        # Every component resolved, not just the last: a link is packed as the file it names, and only when
        # that file lies inside the folder (git lists a tracked a/f.py even after a/ became a link elsewhere).
        real = Path(os.path.realpath(root / rel))
        if not real.is_relative_to(root):
            outside.add(rel)
        elif real.is_file():
            out.add(rel)
    return sorted(out), sorted(outside)


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
    names, outside = select(root)
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
    return Packed(data=data, files=tuple(sizes), sha256=hashlib.sha256(data).hexdigest(), skipped=tuple(outside))


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
