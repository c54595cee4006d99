"""A replica's processes: how each starts (spawn), and as /proc shows them: every descendant, each known by
(pid, start time) so that a pid reused since is never signalled. The runner (runner.py) starts and stops
replicas and what they started with these."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess

from . import forked


def spawn(argv: list[str], env: dict[str, str], cwd: str | os.PathLike, fds: list[int]) -> subprocess.Popen | forked.Forked:
    """A replica's or sidecar's process, in its own session with its output piped: forked from the emulator's
    template process when it is one of gcpgpu's own helpers (forked.py), else a fresh subprocess."""
    if not fds and forked.enabled() and forked.module_of(argv, env):
        return forked.start(argv, env, cwd)
    # It dies with the emulator's process, even one killed outright (a missing program still fails as itself).
    setpriv = shutil.which("setpriv")
    if setpriv and shutil.which(os.path.join(cwd, argv[0]), path=env.get("PATH", os.defpath)):
        argv = [setpriv, "--pdeathsig", "KILL", "--", *argv]
    return subprocess.Popen(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, pass_fds=fds,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)


def signal_group(pid: int, sig: int) -> None:
    """`sig` to the process group of a replica (or sidecar) session. SIGKILL, a dead host, reaches
    every process it started too, whatever session they moved to: torchrun starts its workers in
    sessions of their own, which a group signal misses (they would go on training on a host that no
    longer exists). A SIGTERM stays with the group: torchrun passes it on to its workers itself."""
    family = descendants(pid) if sig == signal.SIGKILL else set()
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)
    kill_family(family)


def kill_family(family: set[tuple[int, int]]) -> None:
    """SIGKILL each (pid, start time) that is still that process (a pid reused since is left alone)."""
    for pid, start in family:
        if start_time(pid) == start:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)


def _stat(pid: int | str) -> list[bytes] | None:
    """/proc/PID/stat's fields after the command name (which may hold spaces and parentheses)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    return stat[stat.rfind(b")") + 2:].split()


def start_time(pid: int) -> int | None:
    """When `pid` started (field 22 of its stat), None once it has exited (a zombie included)."""
    fields = _stat(pid)
    return int(fields[19]) if fields and fields[0] != b"Z" else None


def descendants(pid: int) -> set[tuple[int, int]]:
    """Every live descendant of `pid` as (pid, start time), read from /proc before anything is
    signalled (so none is reparented away first); empty where there is no /proc."""
    parents: dict[int, list[tuple[int, int]]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return set()
    for entry in entries:
        if entry.isdigit() and (fields := _stat(entry)):
            parents.setdefault(int(fields[1]), []).append((int(entry), int(fields[19])))
    out: set[tuple[int, int]] = set()
    todo = [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            out.add(child)
            todo.append(child[0])
    return out
