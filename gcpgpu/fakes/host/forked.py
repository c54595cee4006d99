"""Start the emulator's own Python helpers from a template process that has imported them already.

A node agent, a Slurm node's supervisor and a metrics reporter are each `python -m MODULE ...`: a fresh
interpreter that spends about 3 s of CPU importing gcpgpu and Google's clients (compute_v1's whole
package alone takes 2) before it does anything. An emulated cluster starts one agent per node, again after every preemption,
and a reporter beside every job, so on a small machine those imports were much of a test run's CPU.
The same holds for the launcher each node of a bundled-trainer job starts (gcpgpu.trainer.torchrun:
torchrun's own code), which spends about 1.6 s of CPU importing torch before it launches its worker, and
for a Vertex AI replica's `python -m gcpgpu.trainer` (with CLUSTER_SPEC it is that launcher: it runs
torchrun in its own process). Their workers are still started by torchrun itself, as fresh interpreters,
exactly as on a real node, so torch reads each worker's environment as it imports.

Here they are forked instead from one forkserver per emulator process (multiprocessing's, which
imported PRELOAD once when first asked). Each child is still a process of its own, as on a real node:
its own session (so the runner's group signals, kills and /proc scans treat it as they treat a
subprocess), its own environment and working folder, stdin from /dev/null, stdout and stderr into the
pipes the runner reads, and the module run as `__main__` with the arguments it was given. It dies with
the forkserver (PR_SET_PDEATHSIG), which ends when the emulator's process does, however that ends.

GCPGPU_EMULATOR_FORK=0 in the emulator's environment starts them as plain subprocesses again.
"""

from __future__ import annotations

import atexit
import contextlib
import io
import multiprocessing
import multiprocessing.util  # noqa: F401 - its exit hook registered before this module's
import os
import signal
import subprocess
import sys
import threading
import time
import traceback
from multiprocessing import reduction
from pathlib import Path
from typing import Any

from gcpgpu.trainer.argv import MODULE as TRAINER_MODULE
from gcpgpu.trainer.argv import TORCHRUN_MODULE

MODULES = ("gcpgpu.node.agent", "gcpgpu.node.reporter", "gcpgpu.slurm.node", TORCHRUN_MODULE)
# Imported once by the forkserver: the modules, the Google clients they load when they first call
# (gcpgpu.node.warm: the few Compute services they use, not all of google.cloud.compute_v1's ~100), and
# torchrun's code with torch (where torch is installed: multiprocessing skips a preload it cannot import).
PRELOAD = (*MODULES, "gcpgpu.gcp.clients", "gcpgpu.node.warm", "torch.distributed.run", __name__)
_PR_SET_PDEATHSIG = 1

_lock = threading.Lock()
_context: Any = None


def enabled() -> bool:
    return sys.platform.startswith("linux") and os.environ.get("GCPGPU_EMULATOR_FORK", "1") != "0"


def module_of(argv: list[str], env: dict[str, str] | None = None) -> str | None:
    """The module of a `python -m MODULE ...` line this process's Python would run, when it is one of MODULES,
    or the bundled trainer when `env` makes it Vertex AI's launcher (CLUSTER_SPEC, not yet a worker)."""
    if len(argv) < 3 or argv[0] != sys.executable or argv[1] != "-m":
        return None
    if argv[2] in MODULES:
        return argv[2]
    if argv[2] == TRAINER_MODULE and env is not None and "CLUSTER_SPEC" in env and "LOCAL_RANK" not in env:
        return argv[2]
    return None


def _forkserver() -> Any:
    global _context
    with _lock:
        if _context is None:
            ctx = multiprocessing.get_context("forkserver")
            ctx.set_forkserver_preload(list(PRELOAD))
            _context = ctx
        return _context


class _Fd:
    """A file descriptor handed to the child (sent to the forkserver with the process, as multiprocessing
    sends a socket's)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def __reduce__(self) -> tuple:
        return _Fd._rebuild, (reduction.DupFd(self.fd),)

    @staticmethod
    def _rebuild(dup: Any) -> int:
        return dup.detach()


class Forked:
    """A forked helper, with what the runner uses of a subprocess.Popen."""

    def __init__(self, process: Any, args: list[str], stdout: io.BufferedReader, stderr: io.BufferedReader) -> None:
        self._process = process
        self.args = args
        self.pid: int = process.pid
        self.stdout = stdout
        self.stderr = stderr
        self.returncode: int | None = None
        self._lock = threading.Lock()

    def poll(self) -> int | None:
        with self._lock:  # the runner's threads ask at once; only one may close
            if self.returncode is None:
                self.returncode = self._process.exitcode
                if self.returncode is not None:
                    # multiprocessing keeps the forkserver's sentinel and a copy of the data pipe open until the
                    # Process is collected, and the emulator keeps its runs (and so this) for their logs: two pipes
                    # per helper for ever. Its exit code is all that is wanted of it from now on.
                    _close(self._process)
            return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        # poll()'s own steps, not join(): a join would read the sentinel a poll() in another thread may close.
        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
            time.sleep(0.02)
        return code


_closing = threading.Lock()
_exiting = False


def _close(process: Any) -> None:
    with _closing:
        if not _exiting:
            process.close()


@atexit.register  # after multiprocessing's own exit hook, so run before it: that one joins every child it lists
def _stop_closing() -> None:
    """No Process is closed once the interpreter exits: one closed between multiprocessing's listing of the
    children and its join() of each failed that join ("process object is closed")."""
    global _exiting
    with _closing:
        _exiting = True


def start(argv: list[str], env: dict[str, str], cwd: str | os.PathLike) -> Forked:
    """Fork `argv` (a `python -m MODULE ...` line module_of() accepts) from the forkserver; it returns once
    the child is in its own session, with its output going to the pipes returned."""
    module = module_of(argv, env)
    if module is None:
        raise ValueError(f"not a forkable command: {argv[:3]}")
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    ready_r, ready_w = os.pipe()
    try:
        process = _forkserver().Process(
            target=_child, args=(module, argv[3:], env, str(cwd), _Fd(out_w), _Fd(err_w), _Fd(ready_w)),
            name=f"gcpgpu-{module}", daemon=True)
        process.start()
    except BaseException:
        for fd in (out_r, err_r, ready_r):
            os.close(fd)
        raise
    finally:
        for fd in (out_w, err_w, ready_w):
            os.close(fd)
    try:
        os.read(ready_r, 1)  # b"x" once it has its own session; b"" if it died first (its exit code says why)
    finally:
        os.close(ready_r)
    return Forked(process, argv, open(out_r, "rb"), open(err_r, "rb"))


def _child(module: str, args: list[str], env: dict[str, str], cwd: str, out: int, err: int, ready: int) -> None:
    """In the forked child: become what `python -m MODULE ARGS` started by the runner would be, run it, exit."""
    os.setsid()
    # multiprocessing hands each child the forkserver's "alive" pipe (for children that start processes of their
    # own): held here, it would keep the forkserver from seeing the emulator's process end, and so this from dying.
    from multiprocessing import forkserver

    server = forkserver._forkserver  # type: ignore[attr-defined]
    if getattr(server, "_forkserver_alive_fd", None) is not None:
        os.close(server._forkserver_alive_fd)
        server._forkserver_alive_fd = None
    with contextlib.suppress(Exception):  # die with the forkserver, which dies with the emulator's process
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    null = os.open(os.devnull, os.O_RDONLY)
    for src, dst in ((null, 0), (out, 1), (err, 2)):
        os.dup2(src, dst)
        os.close(src)
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    # The runner starts Python unbuffered: each line reaches the log as it is printed.
    sys.stdin = open(0, closefd=False)  # noqa: SIM115
    sys.stdout = io.TextIOWrapper(open(1, "wb", buffering=0, closefd=False), write_through=True)  # noqa: SIM115
    sys.stderr = io.TextIOWrapper(open(2, "wb", buffering=0, closefd=False), write_through=True,  # noqa: SIM115
                                  errors="backslashreplace")
    os.write(ready, b"x")
    os.close(ready)
    sys.argv = [str(Path(module.replace(".", "/")).name), *args]
    # Preloaded, the module run (a package's __main__) would be found in sys.modules by runpy, which then warns on
    # stderr (a line in every helper's log) that running it again "may result in unpredictable behaviour". What it
    # imports stays loaded.
    package = hasattr(sys.modules.get(module), "__path__")
    sys.modules.pop(f"{module}.__main__" if package else module, None)
    code = 0
    try:
        import runpy

        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as e:
        code = _exit_code(e)
    except BaseException:  # as the interpreter would: the traceback on stderr, exit 1
        traceback.print_exc()
        code = 1
    try:
        atexit._run_exitfuncs()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _exit_code(e: SystemExit) -> int:
    if e.code is None:
        return 0
    if isinstance(e.code, int):
        return e.code
    print(e.code, file=sys.stderr)
    return 1
