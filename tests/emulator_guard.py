"""Proof that nothing run against the emulator reaches Google Cloud or the user's own gcloud/ssh setup.

`Guard` gives a process tree what it needs to be watched:
- gcloud, ssh, scp and ssh-keygen stubs first on PATH, each recording its arguments, its
  CLOUDSDK_CONFIG and its parent's command line, and doing nothing;
- a sitecustomize.py first on PYTHONPATH that installs an audit hook in every Python process started
  with that environment (gcpgpu, the emulator, the trainers it runs): a socket connection to an
  address that is not loopback is recorded and refused (OSError), and so is starting gcloud or ssh;
- a HOME of its own (a user's gcloud configuration with a project in it), so that `~/.ssh` or a
  change to the user's gcloud configuration shows.
The same hook can watch this test process (`watch_this_process`), for the CLI run in-process and the
in-process emulator.
"""

from __future__ import annotations

import ipaddress
import json
import os
import socket
import stat
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

TOOLS = ("gcloud", "ssh", "scp", "ssh-keygen")

_HOOK = '''
import ipaddress, json, os, socket, sys

_LOG = os.environ.get("GCPGPU_GUARD_LOG")
_TOOLS = {"gcloud", "ssh", "scp", "ssh-keygen"}


def _loopback(host):
    if host in ("localhost", "", None):
        return True
    try:
        return ipaddress.ip_address(str(host).split("%")[0]).is_loopback
    except ValueError:
        return False


def _record(what):
    with open(_LOG, "a") as f:
        f.write(json.dumps({"pid": os.getpid(), "argv": sys.argv[:4], **what}) + "\\n")


def _hook(event, args):
    if event == "socket.connect":
        sock, address = args[0], args[1]
        if sock.family in (socket.AF_INET, socket.AF_INET6) and not _loopback(address[0]):
            _record({"connect": str(address[0]), "port": address[1]})
            raise OSError(f"guard: connection to {address[0]} refused (not loopback)")
    elif event == "subprocess.Popen":
        executable = os.path.basename(str(args[0] or (args[1] or [""])[0]))
        if executable in _TOOLS:
            _record({"exec": executable, "args": [str(a) for a in (args[1] or [])][:6]})
            raise OSError(f"guard: {executable} refused")


if _LOG:
    sys.addaudithook(_hook)
'''


# A stand-in for gcloud, ssh, scp, ssh-keygen: records the call and does nothing, except that
# `gcloud config set SECTION/KEY VALUE` writes the property where gcloud would ($CLOUDSDK_CONFIG's
# active configuration), so what reads gcloud's configuration afterwards sees it.
_STUB = """#!{python}
import configparser, os, sys
from pathlib import Path

args = sys.argv[1:]
try:
    parent = " ".join(Path(f"/proc/{{os.getppid()}}/cmdline").read_bytes().decode().replace("\\0", " ").split())
except OSError:
    parent = "?"
with open({calls!r}, "a") as log:
    log.write("\\t".join(["{tool} " + " ".join(args), os.environ.get("CLOUDSDK_CONFIG", ""), parent]) + "\\n")
if "{tool}" == "gcloud" and args[:2] == ["config", "set"] and os.environ.get("CLOUDSDK_CONFIG"):
    folder = Path(os.environ["CLOUDSDK_CONFIG"])
    name = os.environ.get("CLOUDSDK_ACTIVE_CONFIG_NAME") or "default"
    path = folder / "configurations" / f"config_{{name}}"
    path.parent.mkdir(parents=True, exist_ok=True)
    props = configparser.ConfigParser(interpolation=None)
    props.read(path)
    section, _, key = args[2].rpartition("/")
    section = section or "core"
    if not props.has_section(section):
        props.add_section(section)
    props.set(section, key, args[3])
    with open(path, "w") as f:
        props.write(f)
"""


def _loopback(host: object) -> bool:
    if host in ("localhost", "", None):
        return True
    try:
        return ipaddress.ip_address(str(host).split("%")[0]).is_loopback
    except ValueError:
        return False


_watching: list[list[dict]] = []  # the records of the active in-process watch (audit hooks cannot be removed)


def _in_process_hook(event: str, args: tuple) -> None:
    if not _watching:
        return
    if event == "socket.connect":
        sock, address = args[0], args[1]
        if sock.family in (socket.AF_INET, socket.AF_INET6) and not _loopback(address[0]):
            _watching[-1].append({"connect": str(address[0]), "port": address[1]})
            raise OSError(f"guard: connection to {address[0]} refused (not loopback)")
    elif event == "subprocess.Popen":
        executable = os.path.basename(str(args[0] or (args[1] or [""])[0]))
        if executable in TOOLS:
            _watching[-1].append({"exec": executable, "args": [str(a) for a in (args[1] or [])][:6]})
            raise OSError(f"guard: {executable} refused")


_installed = False


@contextmanager
def watch_this_process() -> Iterator[list[dict]]:
    """Record (and refuse) non-loopback connections and gcloud/ssh starts made by this process."""
    global _installed
    if not _installed:
        sys.addaudithook(_in_process_hook)
        _installed = True
    records: list[dict] = []
    _watching.append(records)
    try:
        yield records
    finally:
        _watching.remove(records)


class Guard:
    """A watched environment under `root`; `env()` for subprocesses, `problems()` after they ran."""

    def __init__(self, root: Path, project: str = "my-project") -> None:
        self.root = root
        self.bin = root / "bin"
        self.site = root / "site"
        self.home = root / "home"
        self.log = root / "guard.log"
        self.calls = root / "calls.log"
        for folder in (self.bin, self.site, self.home):
            folder.mkdir(parents=True, exist_ok=True)
        (self.site / "sitecustomize.py").write_text(_HOOK)
        for tool in TOOLS:
            stub = self.bin / tool
            stub.write_text(_STUB.format(python=sys.executable, tool=tool, calls=str(self.calls)))
            stub.chmod(stub.stat().st_mode | stat.S_IEXEC)
        # The user's own gcloud configuration: a project, nothing pointed at any emulator.
        user_config = self.home / ".config" / "gcloud"
        (user_config / "configurations").mkdir(parents=True)
        (user_config / "active_config").write_text("default")
        (user_config / "configurations" / "config_default").write_text(f"[core]\nproject = {project}\n")
        self._home_before = self._snapshot()

    def _snapshot(self) -> dict[str, bytes]:
        return {str(p.relative_to(self.home)): p.read_bytes() for p in self.home.rglob("*") if p.is_file()
                and not str(p.relative_to(self.home)).startswith(".cache/")}

    def pythonpath(self, root: Path) -> str:
        rest = os.environ.get("PYTHONPATH")
        return os.pathsep.join([str(self.site), str(root), *([rest] if rest else [])])

    def env(self, root: Path, **extra: str) -> dict[str, str]:
        """An environment for `bash -c`: the stubs and a `gcpgpu` first on PATH, the hook, HOME."""
        gcpgpu = self.bin / "gcpgpu"
        if not gcpgpu.exists():
            gcpgpu.write_text(f"#!{sys.executable}\nimport sys\nfrom gcpgpu.cli import main\nsys.exit(main())\n")
            gcpgpu.chmod(gcpgpu.stat().st_mode | stat.S_IEXEC)
            python = self.bin / "python"  # a script, not a link: a link would leave the venv behind
            python.write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
            python.chmod(python.stat().st_mode | stat.S_IEXEC)
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("CLOUDSDK_", "GOOGLE_", "GCPGPU_", "XDG_", "PYTEST_"))}
        env.update(PATH=f"{self.bin}{os.pathsep}{env.get('PATH', '')}", PYTHONPATH=self.pythonpath(root),
                   HOME=str(self.home), GCPGPU_GUARD_LOG=str(self.log), **extra)
        return env

    def problems(self, allow_gcloud_under: Path | None = None) -> list[str]:
        """What reached past the emulator: non-loopback connections, gcloud/ssh run by the tool (gcloud
        only from the user's shell and in `allow_gcloud_under`), and changes under HOME."""
        found = []
        if self.log.exists():
            found += [f"guarded: {json.loads(line)}" for line in self.log.read_text().splitlines()]
        for line in self.calls.read_text().splitlines() if self.calls.exists() else []:
            call, config, parent = line.split("\t")
            by_tool = Path((parent.split() or [""])[0]).name.startswith("python")  # not the user's shell
            ok = (call.startswith("gcloud ") and not by_tool and allow_gcloud_under is not None
                  and Path(config).is_relative_to(allow_gcloud_under))
            if not ok:
                found.append(f"ran {call!r} (CLOUDSDK_CONFIG={config or '-'}, parent: {parent.strip()})")
        after = self._snapshot()
        found += [f"HOME: {name} changed" for name in sorted(set(after) | set(self._home_before))
                  if after.get(name) != self._home_before.get(name)]
        return found
