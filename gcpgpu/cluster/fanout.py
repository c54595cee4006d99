"""`cluster ssh NAME --all -- CMD`: one command on many nodes at once, each line said with its rank.

At most CONCURRENCY ssh sessions run at a time (1,024 nodes: 64 at once, each through its own IAP
tunnel), each with stdin from /dev/null (no node reads the terminal, nor another node's input), in batch
mode (a missing key fails the node, never prompts). Every line a node prints, stdout and stderr alike,
comes out as `RANK: line` as it arrives (a whole line at a time, never two nodes' bytes in one line);
then one summary line: how many nodes ran it, and each that failed with its exit status (255: ssh
itself failed, unreachable node or refused key).
"""

from __future__ import annotations

import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from .nodessh import Reach
from .observe import Node

CONCURRENCY = 64


@dataclass(frozen=True)
class Outcome:
    node: Node
    code: int


def run_all(reach: Reach, nodes: list[Node], command: list[str], concurrency: int = CONCURRENCY) -> list[Outcome]:
    """Run `command` on every node of `nodes`, at most `concurrency` at once; each node's exit status."""
    width = len(str(max(n.rank or 0 for n in nodes)))
    lock = threading.Lock()

    def one(node: Node) -> Outcome:
        proc = subprocess.Popen(reach.argv(node, command, batch=True), stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        assert proc.stdout is not None
        prefix = f"{node.rank:>{width}}: ".encode()
        for line in iter(proc.stdout.readline, b""):
            with lock:
                sys.stdout.buffer.write(prefix + line.rstrip(b"\r\n") + b"\n")
                sys.stdout.flush()
        return Outcome(node, proc.wait())

    with ThreadPoolExecutor(max_workers=max(1, min(concurrency, len(nodes))), thread_name_prefix="gcpgpu-ssh") as pool:
        return list(pool.map(one, nodes))


def summary(outcomes: list[Outcome]) -> tuple[str, bool]:
    """The summary line, and whether every node succeeded."""
    failed = [o for o in outcomes if o.code != 0]
    if not failed:
        return f"all {len(outcomes)} nodes exited 0", True
    said = ", ".join(f"rank {o.node.rank} ({o.node.name}) exited {o.code}"
                     + (" (ssh failed)" if o.code == 255 else "") for o in failed[:20])
    more = f" and {len(failed) - 20} more" if len(failed) > 20 else ""
    return f"{len(failed)} of {len(outcomes)} nodes failed: {said}{more}", False
