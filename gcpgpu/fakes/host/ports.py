"""Loopback ports for what emulated nodes listen on (a job's rendezvous, Slurm's daemons).

A port asked of the kernel (bind to port 0) comes from its ephemeral range, the same range every outgoing
connection on the machine takes its local port from: in the moment between choosing such a port and the
job's process listening on it, another process's connection may take it (EADDRINUSE in torchrun's store,
seen with two test workers busy). These are picked at random below that range instead, where outgoing
connections never land, and checked free on 127.0.0.1 when picked.
"""

from __future__ import annotations

import random
import socket

LOWEST = 20000


def _ephemeral_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def free_block(count: int = 1) -> int:
    """A port P such that P .. P+count-1 are free on 127.0.0.1 now, below the ephemeral range."""
    top = max(_ephemeral_low(), LOWEST + 1000) - count
    for _ in range(200):
        base = random.randrange(LOWEST, top)
        socks = []
        try:
            for port in range(base, base + count):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError(f"no {count} free ports in a row on 127.0.0.1")
