"""`docker exec` on an emulated node: a command started inside a running job's sandbox, as into its container.

On a real node `sudo docker exec -i gcpgpu-job-ID CMD` starts CMD in the job's container: its file system
(/workdir, /gcs, the mounts), its environment (NODE_RANK, NNODES, MASTER_ADDR... as `docker run --env` gave
them) and its user, with the caller's terminal. Here each node's sshd sandbox holds a `docker` (and a
`sudo` that just runs its command: every login is the sandbox's one user) that sends the request, with its
stdin, stdout and stderr as descriptors (SCM_RIGHTS), over a unix socket bound into that node's sandbox
alone; so a node can reach only its own job. The emulator then enters the job's sandbox namespaces
(user, mount, UTS, IPC, pid) with util-linux's nsenter, as the job's user inside it, in /workdir, with
no_new_privs and the container's environment only, and answers the command's exit status.
"""

from __future__ import annotations

import array
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

# (instance id, container name) -> (pid of the job's sandbox, the container's environment), or a reason
Find = Callable[[str, str], "tuple[int, dict[str, str]] | str"]
SHIM = '''#!/bin/sh
exec "{python}" -c 'import sys; from gcpgpu.fakes.host.nsexec import client; sys.exit(client(sys.argv[1:]))' "$@"
'''
SUDO = '''#!/bin/sh
while [ $# -gt 0 ]; do case "$1" in -*) shift ;; *) break ;; esac; done
exec "$@"
'''


def write_shims(folder: Path) -> None:
    """`docker` and `sudo` in `folder` (the node's bin, first on its sessions' PATH)."""
    folder.mkdir(exist_ok=True)
    for name, text in (("docker", SHIM.format(python=sys.executable)), ("sudo", SUDO)):
        path = folder / name
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
            path.chmod(0o755)


def sandbox_process(pid: int) -> int | None:
    """The job's command inside the sandbox bwrap `pid` started: the process that is pid 2 in its own pid
    namespace (bwrap's init is 1), else the first found in another pid namespace."""
    ours = os.readlink("/proc/self/ns/pid")
    found: list[int] = []
    todo = [pid]
    while todo:
        parent = todo.pop()
        try:
            kids = Path(f"/proc/{parent}/task/{parent}/children").read_text().split()
        except OSError:
            continue
        for kid in map(int, kids):
            todo.append(kid)
            try:
                if os.readlink(f"/proc/{kid}/ns/pid") == ours:
                    continue
                nspid = next(line.split()[1:] for line in Path(f"/proc/{kid}/status").read_text().splitlines()
                             if line.startswith("NSpid:"))
            except (OSError, StopIteration):
                continue
            if nspid and nspid[-1] == "2":
                return kid
            found.append(kid)
    return found[0] if found else None


def inside_ids(pid: int) -> tuple[int, int]:
    """The uid and gid process `pid` has inside its user namespace."""
    st = os.stat(f"/proc/{pid}")
    out = []
    for kind, outer in (("uid", st.st_uid), ("gid", st.st_gid)):
        inner = outer
        for line in Path(f"/proc/{pid}/{kind}_map").read_text().splitlines():
            first, lower, count = map(int, line.split())
            if lower <= outer < lower + count:
                inner = first + outer - lower
        out.append(inner)
    return out[0], out[1]


def enter_argv(pid: int, env: dict[str, str], argv: list[str], workdir: str | None) -> list[str]:
    """nsenter into `pid`'s namespaces as its user, in its working folder (the job's /workdir) or `workdir`."""
    uid, gid = inside_ids(pid)
    pairs = [f"{k}={v}" for k, v in sorted(env.items())]
    into = ["/bin/sh", "-c", 'cd "$0" && exec "$@"', workdir] if workdir else []
    return [shutil.which("nsenter") or "nsenter", f"--target={pid}", "--user", "--mount", "--uts", "--ipc", "--pid",
            f"--setuid={uid}", f"--setgid={gid}", "--wd", "--", shutil.which("setpriv") or "setpriv",
            "--no-new-privs", "--", "/usr/bin/env", "-i", *pairs, *into, *argv]


class Engine:
    """One unix socket per node (made when its first session starts) that serves that node's `docker exec`."""

    def __init__(self, find: Find) -> None:
        self.find = find
        self._dir: Path | None = None
        self._socks: dict[str, socket.socket] = {}
        self._lock = threading.Lock()

    def socket_for(self, iid: str, folder: Path) -> str | None:
        """The path of node `iid`'s engine socket (its listener started once), with its shims in `folder`/bin."""
        write_shims(folder / "bin")
        with self._lock:
            if self._dir is None:
                self._dir = Path(tempfile.mkdtemp(prefix="gcpgpu-engine-"))  # short: a unix socket's path is
            path = self._dir / iid[-40:]
            if iid not in self._socks:
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                path.unlink(missing_ok=True)
                sock.bind(str(path))
                sock.listen(16)
                self._socks[iid] = sock
                threading.Thread(target=self._accept, args=(iid, sock), daemon=True, name="emulator-engine").start()
            return str(path)

    def reset(self) -> None:
        with self._lock:
            socks, self._socks = self._socks, {}
        for sock in socks.values():
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def _accept(self, iid: str, sock: socket.socket) -> None:
        while True:
            try:
                conn, _ = sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(iid, conn), daemon=True, name="emulator-engine-exec").start()

    def _serve(self, iid: str, conn: socket.socket) -> None:
        fds: list[int] = []
        try:
            fdarr = array.array("i")
            data, anc, _flags, _addr = conn.recvmsg(65536, socket.CMSG_SPACE(3 * fdarr.itemsize))
            for level, kind, payload in anc:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    fdarr.frombytes(payload[: len(payload) - len(payload) % fdarr.itemsize])
            fds = list(fdarr)
            ask = json.loads(data.decode())
            found = self.find(iid, str(ask.get("container", "")))
            if isinstance(found, str) or len(fds) != 3 or not ask.get("argv"):
                why = found if isinstance(found, str) else "docker exec needs a command and its stdin, stdout, stderr"
                conn.sendall(json.dumps({"error": why}).encode())
                return
            pid, env = found
            env = {**env, **dict(e.split("=", 1) for e in ask.get("env", []) if "=" in e)}
            proc = subprocess.Popen(enter_argv(pid, env, [str(a) for a in ask["argv"]], ask.get("workdir")),
                                    stdin=fds[0], stdout=fds[1], stderr=fds[2], start_new_session=True, env={})
            for fd in fds:
                os.close(fd)
            fds = []
            threading.Thread(target=self._hangup, args=(conn, proc), daemon=True).start()
            conn.sendall(json.dumps({"code": proc.wait()}).encode())
        except (OSError, ValueError) as e:
            try:
                conn.sendall(json.dumps({"error": f"{type(e).__name__}: {e}"}).encode())
            except OSError:
                pass
        finally:
            for fd in fds:
                os.close(fd)
            conn.close()

    @staticmethod
    def _hangup(conn: socket.socket, proc: subprocess.Popen) -> None:
        """The caller went away (its session ended): so does what it started."""
        try:
            conn.recv(1)
        except OSError:
            pass
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, 9)
            except OSError:
                pass


def client(args: list[str]) -> int:
    """`docker exec [-i] [-t] [-e K=V] [-w DIR] CONTAINER CMD...` on an emulated node (the shim runs it)."""
    if not args or args[0] != "exec":
        print("docker: this emulated node's docker only runs 'docker exec' into a job's container", file=sys.stderr)
        return 125
    rest, env, workdir = args[1:], [], None
    while rest and rest[0].startswith("-"):
        flag = rest.pop(0)
        if flag in ("-e", "--env", "-w", "--workdir", "-u", "--user") and rest:
            value = rest.pop(0)
            env += [value] if flag in ("-e", "--env") else []
            workdir = value if flag in ("-w", "--workdir") else workdir
        elif flag.startswith("--env="):
            env.append(flag.split("=", 1)[1])
    if len(rest) < 2:
        print('"docker exec" requires at least 2 arguments: CONTAINER COMMAND [ARG...]', file=sys.stderr)
        return 125
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect("/run/gcpgpu-node-engine.sock")
    except OSError as e:
        print(f"Cannot connect to the Docker daemon: {e}", file=sys.stderr)
        return 125
    ask = {"container": rest[0], "argv": rest[1:], "env": env, "workdir": workdir}
    sock.sendmsg([json.dumps(ask).encode()], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [0, 1, 2]))])
    answer = json.loads(sock.recv(65536).decode() or '{"error": "the engine hung up"}')
    if "error" in answer:
        print(f"Error response from daemon: {answer['error']}", file=sys.stderr)
        return 1
    return int(answer["code"])
