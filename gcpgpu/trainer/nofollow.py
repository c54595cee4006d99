"""Checkpoint folders reached without following a link swapped in after the trainer started.

The trainer writes into --ckpt-dir and prunes it, and on a shared bucket something else may write there too (on
the emulator, a user's sandboxed command sees the same bucket folder and may replace `ckpt/` or a `step_*`
folder by a link to anywhere on the machine the trainer runs on). So each folder is pinned where its links
lead when the trainer starts (pin: the links there then are the user's own), and every later use walks
to it from / one name at a time with O_NOFOLLOW: a link found on the way was swapped in since, and refuses
the save (SwappedLink) instead of writing through it. Writes go through the folder's open descriptor
(/proc/self/fd/N on Linux), so nothing can swap the folder between the walk and the write; removals go by
descriptors too (rm -rf that follows no link inside), and a link where a folder was is removed
itself, never what it leads to. Standard library only.
"""

from __future__ import annotations

import errno
import os
import stat
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

_PINNED: dict[str, str] = {}  # absolute path as given -> where it led when pinned
_LOCK = threading.Lock()
_DIR = os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0)


class SwappedLink(OSError):
    """A checkpoint folder's path holds a link that was not there when the trainer started: never followed."""


def pin(path: str | Path) -> Path:
    """Pin `path` where its links lead now (the trainer's start); later uses follow no link on the way there."""
    key = os.path.abspath(path)
    with _LOCK:
        return Path(_PINNED.setdefault(key, os.path.realpath(key)))


def real(path: str | Path) -> Path:
    """Where `path` leads as pinned: itself or below the nearest pinned folder above it (else pinned now)."""
    key = os.path.abspath(path)
    probe = key
    with _LOCK:
        while True:
            if probe in _PINNED:
                rest = os.path.relpath(key, probe)
                return Path(_PINNED[probe]) / rest if rest != "." else Path(_PINNED[probe])
            parent = os.path.dirname(probe)
            if parent == probe:
                break
            probe = parent
    return pin(key)


def _enter(fd: int, name: str, shown: str, create: bool) -> int:
    """The descriptor of folder `name` in the folder `fd`, following no link (made first when `create`)."""
    try:
        return os.open(name, _DIR | os.O_NOFOLLOW, dir_fd=fd)
    except FileNotFoundError:
        if not create:
            raise
        try:
            os.mkdir(name, dir_fd=fd)
        except FileExistsError:
            pass  # another rank made it
        return _enter(fd, name, shown, create=False)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK) and stat.S_ISLNK(
                os.lstat(name, dir_fd=fd).st_mode):
            raise SwappedLink(errno.ELOOP, f"{shown}: {name!r} on its way is a link now, which it was not when "
                              "the trainer started; the trainer follows none into a checkpoint folder") from None
        raise


def open_dir(path: str | Path, create: bool = False) -> int:
    """A descriptor of the folder `path` (as pinned), reached from / without following any link; the folders
    missing on the way are made when `create`. SwappedLink when a link stands on the way."""
    target = real(path)
    fd = os.open("/", _DIR)
    try:
        for name in target.parts[1:]:
            nxt = _enter(fd, name, str(path), create)
            os.close(fd)
            fd = nxt
        return fd
    except BaseException:
        os.close(fd)
        raise


def through(fd: int, fallback: Path) -> Path:
    """A path that reaches the open folder `fd` itself (Linux: /proc/self/fd/N), else `fallback`."""
    proc = Path(f"/proc/self/fd/{fd}")
    return proc if proc.is_dir() else fallback


@contextmanager
def opened(path: str | Path, create: bool = False) -> Iterator[tuple[int, Path]]:
    """(descriptor, a path through it) of the folder `path`, held open for the writes inside the block."""
    fd = open_dir(path, create)
    try:
        yield fd, through(fd, real(path))
    finally:
        os.close(fd)


def remove_at(fd: int, name: str, first: str | None = None) -> None:
    """Remove `name` from the folder `fd` without following a link: a folder (its file `first` first), or a link
    or file where one was, itself. Nothing there is no error."""
    try:
        mode = os.lstat(name, dir_fd=fd).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(mode):
        os.unlink(name, dir_fd=fd)
        return
    if first is not None:
        try:
            inner = os.open(name, _DIR | os.O_NOFOLLOW, dir_fd=fd)
        except OSError:
            inner = None
        if inner is not None:
            try:
                os.unlink(first, dir_fd=inner)
            except (FileNotFoundError, IsADirectoryError):
                pass
            finally:
                os.close(inner)
    _rmtree_at(fd, name)


def _rmtree_at(fd: int, name: str) -> None:
    """rm -rf of the folder `name` in the folder `fd`, by descriptors: a link inside is removed, never followed
    (shutil.rmtree's dir_fd needs Python 3.11). What cannot be removed stays, as rm -rf's errors would."""
    try:
        inner = os.open(name, _DIR | os.O_NOFOLLOW, dir_fd=fd)
    except OSError:
        return
    try:
        with os.scandir(inner) as entries:
            names = [(e.name, e.is_dir(follow_symlinks=False)) for e in entries]
        for child, is_dir in names:
            try:
                _rmtree_at(inner, child) if is_dir else os.unlink(child, dir_fd=inner)
            except OSError:
                pass
    finally:
        os.close(inner)
    try:
        os.rmdir(name, dir_fd=fd)
    except OSError:
        pass


def remove(path: str | Path, first: str | None = None) -> None:
    """Remove the folder `path` (remove_at) through its parent, reached without following a link."""
    path = Path(path)
    try:
        fd = open_dir(path.parent)
    except FileNotFoundError:
        return
    try:
        remove_at(fd, path.name, first)
    finally:
        os.close(fd)
