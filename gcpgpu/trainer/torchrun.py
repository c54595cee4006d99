"""`python -m gcpgpu.trainer.torchrun ARGS`: torchrun's own code (torch.distributed.run as `__main__`, as
`python -m torch.distributed.run ARGS` runs it), ended as the trainer ends (exit_now): without the
interpreter's teardown of torch's objects, which takes a torchrun about 1 s of CPU (3.7 s of wall on a busy
machine, strace) after its last agent step, holding back the end of every node that launches with it.

Exit codes are torchrun's: its SystemExit's code, or 1 with the traceback on stderr when an exception (a
worker's ChildFailedError, the SignalException of a SIGTERM) leaves it, as the interpreter would say it.
"""

from __future__ import annotations

import runpy
import sys

from gcpgpu.trainer.__main__ import exit_now

TORCHRUN = "torch.distributed.run"


def main() -> int:
    # Imported ahead (the emulator's forkserver preloads it), it would make runpy warn on stderr before it runs.
    sys.modules.pop(TORCHRUN, None)
    try:
        runpy.run_module(TORCHRUN, run_name="__main__", alter_sys=True)
    except SystemExit as e:
        if e.code is None or isinstance(e.code, int):
            return e.code or 0
        print(e.code, file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        raise  # the interpreter's own ending: killed by SIGINT, as torchrun would be
    except BaseException:  # noqa: BLE001 - what the interpreter does with an uncaught exception
        sys.excepthook(*sys.exc_info())
        return 1
    return 0


if __name__ == "__main__":
    exit_now(main())
