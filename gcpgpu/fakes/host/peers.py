"""Who is on the other end of a request to the emulator: one of its users' sandboxed commands, or not.

A sandbox (sandbox.py) shares this machine's network, so a job's command reaches the emulator's port as the
laptop's `gcpgpu` does, with no credentials either way. What tells them apart is the kernel's: the client's
socket (found in /proc/net/tcp by the request's two ports) is held by a process in a pid namespace other
than the emulator's, which is what every sandbox has (--unshare-pid) and no process of the laptop has.

It fails closed: a connection whose socket is gone by the time it is looked up (a client that sent and
closed at once) or cannot be found counts as a sandbox's.
"""

from __future__ import annotations

import os

_TABLES = ("/proc/net/tcp", "/proc/net/tcp6")


def _inode(client_port: int, server_port: int) -> int:
    """The inode of the client's end of the loopback connection client_port -> server_port (0: none, or closed)."""
    for table in _TABLES:
        try:
            with open(table, encoding="ascii") as f:
                next(f, None)
                for line in f:
                    fields = line.split()
                    if len(fields) < 10:
                        continue
                    local, remote = fields[1], fields[2]
                    if int(local.rsplit(":", 1)[1], 16) == client_port and int(remote.rsplit(":", 1)[1], 16) == server_port:
                        return int(fields[9])
        except OSError:
            continue
    return 0


def _own_namespace() -> str:
    return os.readlink("/proc/self/ns/pid")


def _holders_elsewhere(inode: int) -> bool:
    """Whether a process outside this pid namespace holds socket `inode`."""
    ours = _own_namespace()
    wanted = f"socket:[{inode}]"
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.readlink(f"/proc/{entry}/ns/pid") == ours:
                continue
            fds = os.listdir(f"/proc/{entry}/fd")
        except OSError:  # gone, or not ours to read
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{entry}/fd/{fd}") == wanted:
                    return True
            except OSError:
                continue
    return False


def from_sandbox(environ: dict) -> bool:
    """Whether the request whose WSGI environ this is came from a sandboxed process (see the module's doc)."""
    try:
        client, server = int(environ["REMOTE_PORT"]), int(environ["SERVER_PORT"])
    except (KeyError, TypeError, ValueError):
        return False  # not a socket of this machine's (an in-process call: a batch's part is judged as its whole)
    inode = _inode(client, server)
    if not inode:
        return True
    held = _holders_elsewhere(inode)
    # Still open at the end (the same socket): whoever held it through the scan was seen.
    return held or _inode(client, server) != inode
