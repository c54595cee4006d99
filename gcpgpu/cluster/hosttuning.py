"""The host's TCP settings `cluster up` applies at boot (templates/startup.sh.j2), and what it says about them.

The seed guide tunes the TCP stack for training traffic that runs over TCP: 256 MiB socket buffers, a deep
netdev backlog and window scaling. They are kernel-wide, so they reach every NIC's TCP: A2's host NIC (which
carries its collectives) and the A3 families' host NICs (NCCL's bootstrap, data loading, checkpoints). The
GPUDirect paths are left to their published profiles (nccl/profiles.py, the plugins' own settings); RDMA
(A3 Ultra, A4) bypasses the kernel's TCP altogether. `--no-host-tuning` leaves the image's settings.
"""

from __future__ import annotations

from typing import Any

SYSCTLS: tuple[tuple[str, str], ...] = (
    ("net.core.rmem_max", "268435456"), ("net.core.wmem_max", "268435456"),
    ("net.ipv4.tcp_rmem", "4096 87380 268435456"), ("net.ipv4.tcp_wmem", "4096 65536 268435456"),
    ("net.core.netdev_max_backlog", "250000"), ("net.ipv4.tcp_window_scaling", "1"),
)


def of(spec: Any) -> tuple[tuple[str, str], ...]:
    """The settings the spec's nodes get: all of them, or none with --no-host-tuning."""
    return SYSCTLS if spec.host_tuning else ()


def notes(on: bool, machine: Any) -> list[str]:
    """The plan's line saying what the nodes' startup script sets (or that it sets nothing)."""
    if not on:
        return ["host tuning: off (--no-host-tuning): the image's TCP settings stay"]
    over = "the host NIC, which carries the collectives" if not machine.gpu_nics else "the host NIC(s)"
    return [f"host tuning: {', '.join(f'{k}={v}' for k, v in SYSCTLS)} at boot, for TCP over {over}; the "
            "GPUDirect NICs keep their NCCL profile's settings (--no-host-tuning leaves them all)"]
