"""A node's port through IAP TCP forwarding, on either target: what ssh's ProxyCommand and `forward` use.

On Google Cloud that is `gcloud compute start-iap-tunnel NODE PORT` (`--listen-on-stdin` as a
ProxyCommand, `--local-host-port` for a local port). gcloud cannot be pointed at the emulator's tunnel:
its only knob is a hidden `--iap-tunnel-url-override` for Google's integration tests, which still speaks
IAP's websocket relay protocol (relay.tunnel.cloudproxy.app: connect/reconnect, SID and ACK frames) with
OAuth credentials, none of which the emulator serves. So against the emulator gcpgpu opens the emulator's
own stand-in (gcpgpu/fakes/host/tunnel.py: one line naming the node and port, then the port's bytes), and
`python -m gcpgpu.cluster.tunnel ADDRESS PROJECT ZONE NODE PORT` is the ProxyCommand that relays it to
ssh's stdin and stdout. Nothing here imports more than the standard library (it starts once per ssh).
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import urllib.request

MAGIC = "GCPGPU-IAP-TUNNEL/1"


class TunnelRefused(Exception):
    """The tunnel said no (the node is not RUNNING, nothing listens on the port...): its one line."""


def tunnel_address(emulator: str) -> str:
    """HOST:PORT of the emulator's IAP stand-in, read from its /_emulator/info."""
    with urllib.request.urlopen(f"http://{emulator}/_emulator/info", timeout=10) as answer:  # noqa: S310 (loopback)
        address = json.loads(answer.read()).get("iap_tunnel")
    if not address:
        raise TunnelRefused(f"the emulator at {emulator} has no IAP tunnel (an older emulator: restart it)")
    return str(address)


def open_tunnel(address: str, project: str, zone: str, node: str, port: int) -> socket.socket:
    """A connection to `port` of `node` through the emulator's tunnel at `address`; TunnelRefused (its line)."""
    host, _, tport = address.rpartition(":")
    conn = socket.create_connection((host, int(tport)), timeout=15)
    try:
        conn.sendall(f"{MAGIC} {project} {zone} {node} {port}\n".encode())
        line = bytearray()
        while not line.endswith(b"\n") and len(line) < 1024:
            ch = conn.recv(1)
            if not ch:
                break
            line += ch
        text = line.decode("utf-8", "replace").strip()
        if text != "OK":
            raise TunnelRefused(text[4:] if text.startswith("ERR ") else f"the tunnel closed ({text or 'no answer'})")
        conn.settimeout(None)
        return conn
    except BaseException:
        conn.close()
        raise


def relay(a: socket.socket, b: socket.socket) -> None:
    """Copy bytes both ways between `a` and `b` until both directions end; closes both."""

    def pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        try:
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    other = threading.Thread(target=pump, args=(b, a), daemon=True, name="gcpgpu-relay")
    other.start()
    pump(a, b)
    other.join()
    a.close()
    b.close()


def relay_stdio(conn: socket.socket) -> None:
    """Copy stdin to `conn` and `conn` to stdout until the connection ends (ssh's ProxyCommand)."""

    def up() -> None:
        try:
            while data := os.read(0, 65536):
                conn.sendall(data)
        except OSError:
            pass
        try:
            conn.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    threading.Thread(target=up, daemon=True).start()
    try:
        while data := conn.recv(65536):
            view = memoryview(data)
            while view:
                view = view[os.write(1, view):]
    except OSError:
        pass


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 5 or not args[4].isdigit():
        print("usage: python -m gcpgpu.cluster.tunnel TUNNEL_ADDRESS PROJECT ZONE NODE PORT", file=sys.stderr)
        return 2
    address, project, zone, node, port = args
    try:
        conn = open_tunnel(address, project, zone, node, int(port))
    except (TunnelRefused, OSError) as e:
        print(f"gcpgpu: IAP tunnel to {node}:{port}: {e}", file=sys.stderr)
        return 1
    relay_stdio(conn)
    return 0


if __name__ == "__main__":
    sys.exit(main())
