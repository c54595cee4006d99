"""Each emulated node's OpenSSH server: the system's real sshd, one per connection, in the node's sandbox.

A real node runs sshd on port 22 of its internal address, which only IAP TCP forwarding reaches (the
node has no external IP; the firewall lets only IAP's range in). Here nothing listens at all: the
emulator's stand-in for IAP (host/tunnel.py) hands each connection for port 22 of a RUNNING node to a new
`/usr/sbin/sshd -i -f CONFIG` (inetd mode) started here, so the node's sshd is reachable through that
tunnel and no other way. It runs unprivileged, inside bubblewrap with the same options as the node's jobs
(host/sandbox.py: the unprivileged user without capabilities, /gcs, the node's shared file systems at their
mount points, /tmp, /proc, /dev private), its hostname and /etc/hostname the node's name.

What it accepts: only the keys in the node's `ssh-keys` metadata and the project's (unless the node sets
`block-project-ssh-keys`), each for the user the entry names, as Google's guest agent does; written to
the node's folder when the connection starts, so a key added to metadata a moment ago already works and
one removed no longer does. No password, no keyboard-interactive, no root, no agent or X11 forwarding;
local port forwarding (`ssh -L`) as on a node. Every user maps to the sandbox's one uid, home /home/USER.

What differs from a node's shell: the emulator has no per-user accounts (every user is the sandbox's
uid, without sudo), and /workdir is the node's current job's working folder (empty when no job runs)
rather than absent from the host as on a real node. `docker exec` into the job's container, what `job
attach` runs (as `sudo docker exec`), is served by the node's engine (guest/engine.py).

A node that stops being RUNNING (stopped, deleted, preempted) ends its sessions at once (watch()).
Host keys are generated once per instance id into the emulator's storage root and kept with it.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from ..host.procs import descendants, kill_family
from ..host.sandbox import SANDBOX_GID, SANDBOX_UID, UserCommands, launch
from ..host.shared_mounts import SharedStorage
from ..host.storage import PathRefused

if TYPE_CHECKING:
    from ..compute.backend import ComputeBackend

SSHD = "/usr/sbin/sshd"
NODE_DIR = "/run/gcpgpu-node"  # where the node's ssh folder is bound inside the sandbox
NO_SSHD = ("this emulator cannot run a node's sshd: OpenSSH's server is not installed (apt-get install "
           "openssh-server), so nothing reaches a node's port 22")
USER = re.compile(r"[a-z_][a-z0-9_.-]{0,31}")
RESERVED_USERS = {"root", "sshd", "nobody", "daemon"}
WATCH_S = 0.25
CONFIG = f"""\
HostKey {NODE_DIR}/ssh_host_ed25519_key
AuthorizedKeysFile {NODE_DIR}/keys/%u
StrictModes no
UsePAM no
PasswordAuthentication no
KbdInteractiveAuthentication no
PubkeyAuthentication yes
PermitRootLogin no
PermitUserEnvironment no
AllowAgentForwarding no
AllowTcpForwarding local
X11Forwarding no
PermitTunnel no
PidFile none
LogLevel ERROR
SetEnv PATH={NODE_DIR}/bin:/usr/local/bin:/usr/bin:/bin
Subsystem sftp internal-sftp
"""


def keys_from(items: dict[str, str], project_items: dict[str, str]) -> dict[str, list[str]]:
    """user -> public keys, from a node's `ssh-keys` metadata and the project's (unless the node blocks
    the project's), each line `USER:TYPE KEY [COMMENT]` as gcloud writes it; a malformed line is skipped."""
    raw = [items.get("ssh-keys") or "", items.get("sshKeys") or ""]
    if (items.get("block-project-ssh-keys") or "").strip().lower() not in ("true", "1", "yes"):
        raw += [project_items.get("ssh-keys") or "", project_items.get("sshKeys") or ""]
    out: dict[str, list[str]] = {}
    for line in "\n".join(raw).splitlines():
        user, sep, key = line.strip().partition(":")
        words = key.split()
        if not sep or not USER.fullmatch(user) or user in RESERVED_USERS or len(words) < 2 \
                or not re.fullmatch(r"(ssh|ecdsa|sk)-[\w@.-]+", words[0]) or not re.fullmatch(r"[A-Za-z0-9+/=]+", words[1]):
            continue
        out.setdefault(user, []).append(f"{words[0]} {words[1]}")
    return out


class NodeSsh:
    """The sshd sessions of emulated nodes; one per emulator."""

    def __init__(self, compute: ComputeBackend, user: UserCommands, root: Callable[[], Path],
                 shared: SharedStorage, workdir: Callable[[str], Path | None] = lambda iid: None,
                 engine: Callable[[str, Path], str | None] | None = None) -> None:
        self.compute = compute
        self.user = user
        self._root = root  # the emulator's storage root: node folders (host keys) live under it
        self.shared = shared
        self.workdir = workdir  # instance id -> its current job's working folder, if a job runs there
        self.engine = engine  # (instance id, node folder) -> the path of its engine socket (docker exec)
        self.sessions: dict[str, list[tuple[str, subprocess.Popen]]] = {}  # instance id -> (project, sshd)
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    def refusal(self) -> str | None:
        """Why no node's sshd can run here (one line), or None."""
        why = self.user.refusal()
        if why is not None:
            return why
        return None if os.access(SSHD, os.X_OK) else NO_SSHD

    def folder(self, iid: str) -> Path:
        """The node's ssh folder: its host key (made once), config, users and their keys."""
        path = self._root() / "ssh" / re.sub(r"[^0-9A-Za-z_-]", "_", iid)
        (path / "keys").mkdir(parents=True, exist_ok=True)
        (path / "home").mkdir(exist_ok=True)
        (path / "empty").mkdir(exist_ok=True)
        os.chmod(path, 0o700)
        key = path / "ssh_host_ed25519_key"
        if not key.exists():
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"node {iid}", "-f", str(key)],
                           check=True, capture_output=True, timeout=30)
        _put(path / "sshd_config", CONFIG)
        return path

    def _users(self, folder: Path, keys: dict[str, list[str]]) -> None:
        uid, gid = (SANDBOX_UID, SANDBOX_GID) if os.geteuid() == 0 else (os.getuid(), os.getgid())
        for old in (folder / "keys").iterdir():
            if old.name not in keys and not old.name.startswith("."):  # (".NAME.N": another session's write)
                old.unlink(missing_ok=True)
        lines = ["root:x:0:0:root:/root:/usr/sbin/nologin", "sshd:x:65533:65534::/run/sshd:/usr/sbin/nologin",
                 "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin"]
        for name, found in sorted(keys.items()):
            _put(folder / "keys" / name, "".join(k + "\n" for k in found))
            (folder / "home" / name).mkdir(exist_ok=True)
            lines.append(f"{name}:x:{uid}:{gid}::/home/{name}:/bin/bash")
        _put(folder / "passwd", "\n".join(lines) + "\n")
        _put(folder / "group", f"root:x:0:\nnogroup:x:65534:\nnode:x:{gid}:\n")

    def running(self, project: str, zone: str, name: str) -> str | None:
        """Why node `name`'s ports cannot be reached (one line), or None when it is RUNNING."""
        try:
            inst = self.compute.get(project, f"zones/{zone}/instances", name)
        except Exception:
            return f"instance {name} was not found in project {project}, zone {zone}"
        if inst.get("status") != "RUNNING":
            return f"instance {name} is {inst.get('status')}, not RUNNING: nothing listens on its ports"
        return None

    def connect(self, project: str, zone: str, name: str) -> Callable[[socket.socket], None]:
        """Ready a new sshd of node `name`: what starts it on a connection and returns when it ends.
        ValueError (one line) when it cannot be."""
        why = self.refusal()
        if why is not None:
            raise ValueError(why)
        inst = self.compute.get(project, f"zones/{zone}/instances", name)
        if inst.get("status") != "RUNNING":
            raise ValueError(f"instance {name} is {inst.get('status')}, not RUNNING: nothing listens on its port 22")
        iid = str(inst["id"])
        items = {i.get("key"): i.get("value") or "" for i in (inst.get("metadata") or {}).get("items", [])}
        project_items = self.compute.project_metadata(project)
        folder = self.folder(iid)
        self._users(folder, keys_from(items, project_items))
        try:
            shared = self.shared.mounts(inst)
        except PathRefused as e:
            raise ValueError(str(e)) from None
        argv, env, fds = self._argv(iid, name, folder, shared)

        def start(conn: socket.socket) -> None:
            try:
                proc = subprocess.Popen(argv, stdin=conn.fileno(), stdout=conn.fileno(), stderr=None,
                                        env=env, pass_fds=fds, start_new_session=True, close_fds=True)
            finally:
                for fd in fds:
                    os.close(fd)
            with self._lock:
                self.sessions.setdefault(iid, []).append((project, proc))
                if self._thread is None:
                    self._thread = threading.Thread(target=self._watch, name="emulator-node-sshd", daemon=True)
                    self._thread.start()
            # This thread lives as long as the session: bwrap's --die-with-parent is a parent-death signal,
            # which fires when the thread that started it ends (sessions were SIGKILLed at random before).
            proc.wait()

        return start

    def _argv(self, iid: str, name: str, folder: Path, shared: list) -> tuple[list[str], dict[str, str], list[int]]:
        bwrap = self.user.bwrap or "bwrap"
        gcs = self._root() / "gcs"
        gcs.mkdir(parents=True, exist_ok=True)
        before = self.user._options(gcs, self.workdir(iid) or folder / "empty")
        before += ["--hostname", name, "--ro-bind", str(folder), NODE_DIR, "--ro-bind", str(folder / "passwd"),
                   "/etc/passwd", "--ro-bind", str(folder / "group"), "/etc/group", "--bind", str(folder / "home"),
                   "/home", "--dir", "/run/sshd"]
        hostname = folder / "hostname"
        _put(hostname, name + "\n")
        if Path("/etc/hostname").exists():
            before += ["--ro-bind", str(hostname), "/etc/hostname"]
        if self.engine is not None and (sock := self.engine(iid, folder)) is not None:
            before += ["--bind", sock, f"{NODE_DIR}-engine.sock"]
        after = [SSHD, "-i", "-e", "-f", f"{NODE_DIR}/sshd_config"]
        argv, _env, fds = launch(bwrap, before, [], gcs, after, {"PATH": "/usr/sbin:/usr/bin:/bin"}, shared,
                                 self._root())
        return argv, {}, fds

    def _watch(self) -> None:
        """End the sessions of every node no longer RUNNING (stopped, deleted, lost), and forget ended ones."""
        while not self._stop.wait(WATCH_S):
            try:
                self._sweep()
            except Exception as e:  # a VM changing under the scan (or a reset): look again next time
                print(f"gcpgpu emulator: node sshd: {type(e).__name__}: {e}", file=sys.stderr)

    def _sweep(self) -> None:
        with self._lock:
            held = {iid: list(s) for iid, s in self.sessions.items()}
        if not held:
            return
        running: set[str] = set()
        for project in {p for s in held.values() for p, _ in s}:
            running |= {i["id"] for i in self.compute.instance_summaries(project) if i["status"] == "RUNNING"}
        for iid, sessions in held.items():
            for _project, proc in sessions:
                if iid not in running and proc.poll() is None:
                    self._kill(proc)
        with self._lock:
            self.sessions = {iid: kept for iid, s in self.sessions.items()
                             if (kept := [(p, proc) for p, proc in s if proc.poll() is None])}

    @staticmethod
    def _kill(proc: subprocess.Popen) -> None:
        family = descendants(proc.pid)
        try:
            os.killpg(proc.pid, 9)
        except OSError:
            pass
        kill_family(family)
        proc.wait(5)

    def alive(self, iid: str) -> list[int]:
        """The pids of node `iid`'s sshd sessions still running (tests read it)."""
        with self._lock:
            return [p.pid for _project, p in self.sessions.get(iid, []) if p.poll() is None]

    def reset(self) -> None:
        with self._lock:
            held, self.sessions = self.sessions, {}
        for sessions in held.values():
            for _project, proc in sessions:
                if proc.poll() is None:
                    self._kill(proc)


def _put(path: Path, text: str) -> None:
    """Write `text` to `path` whole or not at all (another session's sshd may be reading it), when it differs."""
    try:
        if path.read_text() == text:
            return
    except OSError:
        pass
    tmp = path.with_name(f".{path.name}.{threading.get_ident()}")
    tmp.write_text(text)
    os.replace(tmp, path)
