"""Run the real CLI as a child process many times over, each child forked from one that has imported it once.

A fresh `python -c "from gcpgpu.cli import main; main()" ARGV` spends about 0.4 s of CPU importing the CLI and
the modules its command reaches before it refuses a bad input in a millisecond; a table of two hundred inputs
paid that two hundred times. Here one template process (started per test module) imports them once, and each
run is os.fork() of it: still a process of its own, with the environment, working folder, address-space limit
and arguments the test gives, stdin from /dev/null and its own stdout and stderr, running `main()` exactly as
`python -c` would, exit code included. The template is a plain interpreter of its own (not pytest's process,
whose emulator runs gRPC threads that a fork would leave in a bad state), and it starts no thread.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import gcpgpu

# Imported once by the template; a command's module that is not listed is imported by the child as before.
PRELOAD = ("gcpgpu.cli", "gcpgpu.cli.cluster.group", "gcpgpu.cli.job", "gcpgpu.cli.cluster.autostop", "gcpgpu.cli.progress",
           "gcpgpu.cluster.apply", "gcpgpu.cluster.spec", "gcpgpu.specfile", "gcpgpu.catalog")

_TEMPLATE = r"""
import importlib, json, os, resource, select, signal, sys, tempfile, traceback
# What the imports print (a warning, say) a fresh child would print too: kept, and written to each child's stderr.
stderr, said = os.dup(2), tempfile.TemporaryFile()
os.dup2(said.fileno(), 2)
for name in json.loads(sys.argv[1]):
    importlib.import_module(name)
from gcpgpu.cli import main
sys.stderr.flush()
os.dup2(stderr, 2)
said.seek(0)
said = said.read()

requests, replies = os.fdopen(0, "rb", buffering=0), os.fdopen(os.dup(1), "w")
while line := requests.readline():
    ask = json.loads(line)
    out, err = (os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600) for p in (ask["out"], ask["err"]))
    pid = os.fork()
    if pid == 0:  # the child: what `python -c "...; main()" ARGV` with stdin from /dev/null would be
        code = 1
        try:
            if ask["limit"]:
                resource.setrlimit(resource.RLIMIT_AS, (ask["limit"], ask["limit"]))
            os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
            os.dup2(out, 1)
            os.dup2(err, 2)
            os.write(2, said)
            sys.stdin = open(0, closefd=False)
            os.environ.clear()
            os.environ.update(ask["env"])
            os.chdir(ask["cwd"])
            sys.argv = ["-c", *ask["argv"]]
            try:
                main()
                code = 0
            except SystemExit as e:
                if e.code is None or isinstance(e.code, int):
                    code = e.code or 0
                else:
                    print(e.code, file=sys.stderr)
        except BaseException:
            traceback.print_exc()
        finally:
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except Exception:
                    pass
            os._exit(code)
    os.close(out)
    os.close(err)
    fd = os.pidfd_open(pid)
    done = bool(select.select([fd], [], [], ask["timeout"])[0])
    if not done:
        os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    replies.write(json.dumps({"code": os.waitstatus_to_exitcode(status), "timed_out": not done}) + "\n")
    replies.flush()
"""


@dataclass
class Done:
    """What subprocess.run(..., capture_output=True) gives back, of one forked run."""

    returncode: int
    stdout: bytes
    stderr: bytes


class CliForks:
    """One template process; run() forks it once per CLI invocation. Close it with close()."""

    def __init__(self) -> None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(gcpgpu.__file__).parents[1]),
                                                            os.environ.get("PYTHONPATH", "")])}
        self._folder = tempfile.TemporaryDirectory(prefix="gcpgpu-cli-forks-")
        self._proc = subprocess.Popen([sys.executable, "-c", _TEMPLATE, json.dumps(PRELOAD)], env=env,
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def run(self, argv: list[str], *, env: dict[str, str], cwd: str | os.PathLike = ".", limit: int = 0,
            timeout: float = 60.0) -> Done:
        """`python -c "from gcpgpu.cli import main; main()" ARGV` under RLIMIT_AS `limit` (0: none); raises
        subprocess.TimeoutExpired when it runs past `timeout` seconds (it is killed then)."""
        out, err = (Path(self._folder.name) / name for name in ("stdout", "stderr"))
        ask = {"argv": argv, "env": env, "cwd": str(Path(cwd).resolve()), "limit": limit, "timeout": timeout,
               "out": str(out), "err": str(err)}
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._proc.stdin.write(json.dumps(ask) + "\n")
        self._proc.stdin.flush()
        line = self._proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the CLI's template process ended (exit {self._proc.wait()})")
        got = json.loads(line)
        if got["timed_out"]:
            raise subprocess.TimeoutExpired(argv, timeout)
        return Done(got["code"], out.read_bytes(), err.read_bytes())

    def close(self) -> None:
        if self._proc.stdin is not None:
            self._proc.stdin.close()
        try:
            self._proc.wait(30)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        if self._proc.stdout is not None:
            self._proc.stdout.close()
        self._folder.cleanup()
