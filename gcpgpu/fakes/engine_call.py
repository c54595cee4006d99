"""What a Slurm task on an emulated node runs in place of `docker run`: `python -m gcpgpu.fakes.engine_call
SOCKET CALL.json` hands the call to the emulator's container engine (jobs/slurm_engine.py, which says what
the call holds and how the process runs), stays attached while the process runs, and exits with its exit
code. A SIGTERM to it (scancel, a preemption) asks the engine to stop the process; it exits once the
process has. It lives outside gcpgpu.fakes.jobs so that a task's start imports nothing of the job emulator
(about 0.25 s of CPU a task), and runpy finds no copy of it already imported to warn about.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m gcpgpu.fakes.engine_call SOCKET CALL.json", file=sys.stderr)
        return 2
    with open(args[1]) as f:
        call = f.read()
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(args[0])

    def stop(_signum: int, _frame: object) -> None:
        conn.sendall(b"stop\n")  # the process stops; its end comes back as usual

    signal.signal(signal.SIGTERM, stop)
    conn.sendall(call.encode().rstrip(b"\n") + b"\n")
    reply = conn.makefile("rb").readline()
    try:
        said = json.loads(reply) if reply else {"exit": 1, "error": "the emulator went away"}
    except ValueError:
        said = {"exit": 1, "error": "the emulator's answer was not understood"}
    if said.get("error"):
        print(f"gcpgpu emulator: {said['error']}", file=sys.stderr, flush=True)
    code = int(said.get("exit", 1))
    return code if 0 <= code < 256 else 1


if __name__ == "__main__":
    os.umask(0o077)
    sys.exit(main())
