"""`cluster forward NAME PORT[:LOCAL]`: a node's port on this machine's localhost, through IAP, until Ctrl-C.

On Google Cloud: `gcloud compute start-iap-tunnel NODE PORT --local-host-port=localhost:LOCAL`. Against the
emulator: a listener on 127.0.0.1:LOCAL here that opens the emulator's tunnel (tunnel.py) for each
connection it accepts. Either way the local port is checked free before anything is asked of the cloud,
and it is held from that check on (the emulator's) so nothing else takes it in between.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import threading

from gcpgpu.errors import UsageProblem

from .observe import Node


def parse_ports(spec: str) -> tuple[int, int]:
    """PORT[:LOCAL] as two ports 1-65535 (LOCAL defaults to PORT); one line naming the field otherwise."""
    remote, _, local = spec.partition(":")
    out = []
    for what, text in (("PORT", remote), ("LOCAL", local or remote)):
        if not text.isdigit() or not 1 <= int(text) <= 65535:
            raise UsageProblem(f"{what} {text!r} in {spec!r}: give a port 1-65535 (PORT or PORT:LOCAL, e.g. 6006 or "
                               "6006:16006)")
        out.append(int(text))
    return out[0], out[1]


def hold_local(port: int) -> socket.socket:
    """A listening socket on 127.0.0.1:`port`; one line when something else holds it."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind(("127.0.0.1", port))
        sock.listen(64)
    except OSError as e:
        sock.close()
        raise UsageProblem(f"local port {port} is in use ({e.strerror}): give PORT:LOCAL with a free LOCAL port") \
            from None
    return sock


def serve_emulated(listener: socket.socket, tunnel: str, project: str, node: Node, port: int,
                   stop: threading.Event | None = None) -> None:
    """Accept on `listener` and relay each connection to `node`:`port` through the emulator's tunnel, until
    `stop` is set or Ctrl-C; a connection the tunnel refuses is closed with one line on stderr."""
    from .tunnel import TunnelRefused, open_tunnel, relay

    listener.settimeout(0.5)

    def one(conn: socket.socket) -> None:
        try:
            far = open_tunnel(tunnel, project, node.zone, node.name, port)
        except (TunnelRefused, OSError) as e:
            print(f"gcpgpu: {node.name}:{port}: {e}", file=sys.stderr)
            conn.close()
            return
        relay(conn, far)

    try:
        while stop is None or not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            conn.settimeout(None)
            threading.Thread(target=one, args=(conn,), daemon=True, name="gcpgpu-forward").start()
    finally:
        listener.close()


def gcloud_argv(project: str, node: Node, port: int, local: int) -> list[str]:
    return ["gcloud", "compute", "start-iap-tunnel", node.name, str(port), f"--local-host-port=localhost:{local}",
            f"--zone={node.zone}", f"--project={project}"]


def run_gcloud(argv: list[str]) -> int:
    """gcloud's tunnel until it ends or Ctrl-C (then 0: the user asked it to stop)."""
    proc = subprocess.Popen(argv)
    try:
        return proc.wait()
    except KeyboardInterrupt:
        proc.wait()
        return 0
