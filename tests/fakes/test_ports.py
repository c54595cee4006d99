"""Emulated nodes listen on ports picked below the kernel's ephemeral range, where no outgoing connection's
local port can take them between the pick and the listen (gcpgpu/fakes/host/ports.py)."""

from __future__ import annotations

import socket

from gcpgpu.fakes.host import ports


def test_a_block_is_free_and_below_the_ephemeral_range():
    low = ports._ephemeral_low()
    for count in (1, 3):
        base = ports.free_block(count)
        assert ports.LOWEST <= base and base + count <= low
        socks = [socket.socket() for _ in range(count)]
        try:
            for i, s in enumerate(socks):
                s.bind(("127.0.0.1", base + i))  # each one free when picked
        finally:
            for s in socks:
                s.close()
