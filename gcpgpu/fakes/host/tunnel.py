"""The emulator's stand-in for IAP TCP forwarding: the one way to a node's ports, on 127.0.0.1.

On Google Cloud, `gcloud compute start-iap-tunnel NODE PORT` (and `gcloud compute ssh --tunnel-through-iap`)
reaches a node with no external IP through IAP: a websocket to tunnel.cloudproxy.app, which connects to
the node's internal address on PORT. Here a plain TCP listener on 127.0.0.1 does the same. A client opens
a connection and sends one line naming the target:

    GCPGPU-IAP-TUNNEL/1 PROJECT ZONE INSTANCE PORT\\n

and reads one line back: `OK` (the connection is the node's port from the next byte on, both ways) or
`ERR <why>` (then it is closed). Port 22 of a RUNNING node is that node's real sshd (guest/sshd.py),
started for this connection and for nobody else; any other port is the node's listener on that port,
which on the emulator is 127.0.0.1:PORT (every emulated node shares this machine's loopback).

Like every endpoint of the emulator it binds 127.0.0.1 and has no credentials of its own; what guards it
is the same as for its HTTP port (gate.py, host/peers.py): a web page cannot speak this first line (a
browser's request starts `GET` or `POST`), and a connection from a sandboxed job's command is refused,
as a node's own program cannot open an IAP tunnel. The key exchange and the keys are sshd's.
"""

from __future__ import annotations

import socket
import sys
import threading
from collections.abc import Callable

from .peers import from_sandbox

MAGIC = "GCPGPU-IAP-TUNNEL/1"
MAX_HEADER = 512
HEADER_TIMEOUT_S = 10.0
CHUNK = 65536


def relay(a: socket.socket, b: socket.socket) -> None:
    """Copy bytes both ways between `a` and `b` until both directions end; closes both."""

    def pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(CHUNK):
                dst.sendall(data)
        except OSError:
            pass
        try:
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    other = threading.Thread(target=pump, args=(b, a), daemon=True, name="iap-relay")
    other.start()
    pump(a, b)
    other.join()
    a.close()
    b.close()


def read_line(conn: socket.socket, limit: int = MAX_HEADER) -> str:
    """One line from `conn`, read a byte at a time so nothing after it is taken; '' at EOF or past `limit`."""
    out = bytearray()
    while len(out) < limit:
        ch = conn.recv(1)
        if not ch:
            return ""
        if ch == b"\n":
            return out.decode("utf-8", "replace")
        out += ch
    return ""


class IapTunnel:
    """The listener. `ssh(project, zone, instance)` readies a node's sshd and returns what hands it a
    connection (or raises ValueError with one line); `running(project, zone, instance)` says why a node's
    ports cannot be reached (not RUNNING, no such instance), or None."""

    def __init__(self, ssh: Callable[[str, str, str], Callable[[socket.socket], None]],
                 running: Callable[[str, str, str], str | None]) -> None:
        self.ssh = ssh
        self.running = running
        self._sock: socket.socket | None = None
        self.port: int | None = None
        self._thread: threading.Thread | None = None

    def start(self, host: str = "127.0.0.1") -> IapTunnel:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, 0))
        sock.listen(128)
        self._sock, self.port = sock, sock.getsockname()[1]
        self._thread = threading.Thread(target=self._accept, name="emulator-iap-tunnel", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        sock, self._sock = self._sock, None
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()

    def _accept(self) -> None:
        while (sock := self._sock) is not None:
            try:
                conn, _addr = sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True, name="emulator-iap-conn").start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            conn.settimeout(HEADER_TIMEOUT_S)
            words = read_line(conn).split()
            conn.settimeout(None)
            if len(words) != 5 or words[0] != MAGIC:
                conn.close()
                return
            if from_sandbox({"REMOTE_PORT": conn.getpeername()[1], "SERVER_PORT": conn.getsockname()[1]}):
                self._refuse(conn, "a job's command cannot open an IAP tunnel")
                return
            _magic, project, zone, name, port_text = words
            port = int(port_text) if port_text.isdigit() else 0
            if not 1 <= port <= 65535:
                self._refuse(conn, f"port {port_text} is not 1-65535")
                return
            why = self.running(project, zone, name)
            if why is not None:
                self._refuse(conn, why)
                return
            if port == 22:
                try:
                    start = self.ssh(project, zone, name)
                except ValueError as e:
                    self._refuse(conn, str(e))
                    return
                try:
                    conn.sendall(b"OK\n")
                finally:  # sshd holds its own copy of the socket and speaks from here on (on a dead one, it ends)
                    start(conn)
                conn.close()
                return
            try:
                target = socket.create_connection(("127.0.0.1", port), timeout=5)
            except OSError as e:
                self._refuse(conn, f"nothing answers on port {port} of {name} ({e.strerror or e})")
                return
            target.settimeout(None)
            conn.sendall(b"OK\n")
            relay(conn, target)
        except OSError:
            conn.close()
        except Exception as e:  # an emulator bug: one line here, the client sees its connection end
            print(f"gcpgpu emulator: IAP tunnel: {type(e).__name__}: {e}", file=sys.stderr)
            conn.close()

    @staticmethod
    def _refuse(conn: socket.socket, why: str) -> None:
        try:
            conn.sendall(f"ERR {' '.join(why.split())}\n".encode())
        finally:
            conn.close()
