"""Users' own commands, run for real on emulated cluster nodes and Vertex AI replicas.

A job whose command is not the bundled trainer runs as the training image would run it: through
containers/entrypoint.sh (which unpacks GCPGPU_WORKDIR into /workdir, runs GCPGPU_SETUP, points
GCPGPU_MOUNTS at /gcs/BUCKET/..., reads GCPGPU_SECRETS and exports the rendezvous), inside
bubblewrap so the paths a script names on the cloud mean the same here:

    /                  a tmpfs: nothing of this machine but what is bound below
    /usr /etc /bin /lib*, this checkout, the emulator's Python   read-only (when the emulator runs as
                       root, /etc's files only root may read are hidden behind empty ones)
    /gcs               the emulator's Cloud Storage folder (one folder per bucket), read-write
    /workdir           a private, empty folder per node or replica
    each GCPGPU_MOUNTS target   its gs://BUCKET/PATH folder, bound read-only when "ro" (as a node's
                       read-only Cloud Storage FUSE mount is); the entrypoint finds it mounted and leaves it
    each gcpgpu-storage path    on a cluster node, its Filestore or Lustre instance's (or Hyperdisk ML
                       disk's) folder, read-only when "ro" (shared_mounts.py)
    /tmp /proc /dev    private

The command runs in its own user namespace as an unprivileged user (the image's uid 10001 when the
emulator runs as root, else the emulator's own uid) with every capability dropped and no way to make
another user namespace, whoever started the emulator: it can neither remount what is bound read-only
nor mount anything. It has its own pid, IPC, UTS and cgroup namespaces, so a lost node's kill leaves
nothing behind; the network is shared (replicas meet on 127.0.0.1, as the bundled trainer's do, and the
emulator's Secret Manager is there). It dies with the emulator (--die-with-parent), and it has no
terminal to reach (the runner starts it in a session of its own with stdin from /dev/null). What it may ask
the emulator is a job's due and no more (secretmanager/grants.py, host/peers.py): its own secrets, with the
token it is given; no munge key, no other job's secret, no other API.

Nothing a job wrote is trusted outside the sandbox. Each mount is opened by walking from the storage
folder one name at a time without following links, right before bwrap starts, and bound by its open
descriptor (--bind-fd): a link a job planted in a bucket (`ln -s /home/me /gcs/b/evil`) refuses the
job in one line instead of binding this machine's folder, and nothing can swap a folder for a link
between the check and the bind. The job's environment reaches only the sandbox (through --setenv in a
memfd bwrap reads with --args, never its command line): bwrap itself starts with an empty one, so a
job's LD_PRELOAD or GCONV_PATH cannot load anything into it.
"""

from __future__ import annotations

import errno
import functools
import json
import os
import posixpath
import shutil
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from .runner import Launch, ReplicaSpec
from .storage import PathRefused

PKG_ROOT = Path(__file__).resolve().parents[3]  # the folder holding gcpgpu/ (a checkout or site-packages)
# An address nothing listens on: launch.py's metadata lookups fail at once and it goes on without them
# (no machine type, no token; the emulator's Secret Manager needs none).
NO_METADATA = "http://127.0.0.1:9/computeMetadata/v1"
NOT_ALLOWED = ("this emulator does not run users' commands (code execution on its machine): start it with "
               "'gcpgpu emulator start --run-user-commands' (mock_gcp() and the pytest fixture gcp allow it)")
NO_BWRAP = ("this emulator cannot run users' commands here: bubblewrap (bwrap) is not installed; install it "
            "(apt-get install bubblewrap) and restart the emulator")
OLD_BWRAP = ("this emulator cannot run users' commands here: its bubblewrap (bwrap) is too old to bind a folder by "
             "descriptor (--bind-fd, bubblewrap 0.5 or later); upgrade it and restart the emulator")
# The image's own user (containers/Dockerfile: trainer): who a command runs as when the emulator is root.
SANDBOX_UID = SANDBOX_GID = 10001
# Empty files bound over what only root may read in /etc, when the emulator runs as root: the sandbox's
# user is root's uid outside it, so the owner's bits would let it read them.
_ROOT_ONLY_SCAN = "/etc"


def entrypoint() -> Path:
    """containers/entrypoint.sh, in the wheel (gcpgpu/_bundled) or at the checkout's top."""
    for candidate in (PKG_ROOT / "gcpgpu" / "_bundled" / "containers", PKG_ROOT / "containers"):
        if (candidate / "entrypoint.sh").is_file():
            return candidate / "entrypoint.sh"
    raise FileNotFoundError("gcpgpu's containers/entrypoint.sh is missing from this installation")


def is_user_command(command: list, args: list) -> bool:
    """Whether a container runs a user's command: one given as its command, or its arguments when
    they are a command line (the image's entrypoint execs arguments that do not start with '-',
    which is how `job submit` keeps the entrypoint in front of a user's code, setup and mounts)."""
    return bool(command) or bool(args and not str(args[0]).startswith("-"))


class UserCommands:
    """Whether and how the emulator runs users' commands; one per emulator."""

    def __init__(self, allowed: bool = False, gcs_root: Callable[[], Path] | None = None,
                 address: Callable[[], str | None] | None = None,
                 token: Callable[[str], str] | None = None) -> None:
        self.allowed = allowed
        self.token = token  # GCPGPU_SECRETS -> the job's Secret Manager token (secretmanager/grants.py)
        self._gcs_root = gcs_root  # the emulator's storage folder of buckets (it may be made lazily)
        self.address = address  # HOST:PORT of the emulator once it serves (its Secret Manager)
        self.bwrap = shutil.which("bwrap")

    def refusal(self) -> str | None:
        """Why a user's command cannot run here, in one line; None when it can."""
        if not self.allowed:
            return NOT_ALLOWED
        if not self.bwrap:
            return NO_BWRAP
        if "--bind-fd" not in _bwrap_help(self.bwrap):
            return OLD_BWRAP
        return None

    def replica(self, task: str, command: list[str], env: dict[str, str], private: Path,
                shared: list[Mount] | None = None, shared_root: Path | None = None) -> ReplicaSpec:
        """The replica that runs `command` through the image's entrypoint in a sandbox whose /workdir is
        `private` (made here). `env` is the container's environment plus what the platform gives (NNODES...
        on a cluster node, CLUSTER_SPEC on Vertex AI). Its mounts are opened when it starts (`prepare`):
        GCPGPU_MOUNTS' buckets, and `shared`, the node's file systems (shared_mounts.py), whose folders are
        found from `shared_root` (the emulator's storage root) the same way."""
        if self.refusal() is not None or self._gcs_root is None or self.bwrap is None:
            raise RuntimeError(self.refusal() or "no storage folder for /gcs")
        bwrap = self.bwrap
        gcs = self._gcs_root()
        gcs.mkdir(parents=True, exist_ok=True)
        private.mkdir(parents=True, exist_ok=True)
        before = self._options(gcs, private)
        after = ["--chdir", "/workdir", "/bin/bash", str(entrypoint()), *command]
        mounts = parse_mounts(env.get("GCPGPU_MOUNTS", ""))
        job_env = self._env(env)

        def prepare(base: dict[str, str]) -> Launch:
            return launch(bwrap, before, mounts, gcs, after, {**base, **job_env}, shared or [], shared_root)

        return ReplicaSpec(task, [bwrap, *before, *after], job_env, prepare)

    def _options(self, gcs: Path, private: Path) -> list[str]:
        """bwrap's options up to the mounts: namespaces, the unprivileged user, the file system."""
        python = Path(sys.executable)
        binds: list[str] = []
        # The emulator's Python: its venv (or prefix) and the interpreter it links to, wherever they live.
        for path in sorted({sys.prefix, sys.base_prefix, str(python.resolve().parents[1]), str(PKG_ROOT)}):
            if Path(path).is_dir() and not path.startswith(("/usr", "/etc")) and path != "/":
                binds += ["--ro-bind", path, path]
        system = ["--tmpfs", "/", "--ro-bind", "/usr", "/usr", "--ro-bind", "/etc", "/etc"]
        for name in ("bin", "lib", "lib64", "lib32", "sbin"):
            top = Path("/") / name
            if top.is_symlink():
                system += ["--symlink", str(top.readlink()), str(top)]
            elif top.is_dir():
                system += ["--ro-bind", str(top), str(top)]
        user = ["--unshare-user", "--cap-drop", "ALL"]
        if os.geteuid() == 0:  # root outside: an unprivileged uid inside, and root's own files in /etc hidden
            user += ["--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_GID)]
            files, folders = _root_only(_ROOT_ONLY_SCAN)
            for path in files:
                system += ["--ro-bind", "/dev/null", path]
            for path in folders:  # an empty folder in its place
                system += ["--tmpfs", path, "--remount-ro", path]
        if "--disable-userns" in _bwrap_help(self.bwrap or "bwrap"):
            user.append("--disable-userns")  # no nested namespace where it would hold capabilities again
        spaces = ["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try", "--die-with-parent"]
        # The private /tmp first: a checkout or venv that lives under /tmp (a CI clone) is bound over it.
        return [*user, *spaces, *system, "--tmpfs", "/tmp", *binds, "--proc", "/proc", "--dev", "/dev",
                "--bind", str(gcs), "/gcs", "--bind", str(private), "/workdir"]

    def _env(self, env: dict[str, str]) -> dict[str, str]:
        out = dict(env)
        address = self.address() if self.address is not None else None
        out.update({
            "PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin",
            "HOME": "/tmp",
            "GCPGPU_PYTHON": sys.executable,
            # CPU and loopback here: plain sockets, one process per node or replica.
            "GCPGPU_NCCL_FLAVOR": "none",
            "GCPGPU_SKIP_NCCL_CHECK": "1",  # this machine has none of the GPU machine's NICs
            "NPROC_PER_NODE": "1",
            "GCPGPU_METADATA_URL": NO_METADATA,
        })
        if address:
            out["GCPGPU_SECRETMANAGER_URL"] = f"http://{address}"
            if self.token is not None:  # what the job's own credentials reach: its --secrets, nothing else
                out["GCPGPU_SECRETMANAGER_TOKEN"] = self.token(env.get("GCPGPU_SECRETS", ""))
        return out


@functools.cache
def _bwrap_help(bwrap: str) -> str:
    """bwrap's --help: which options this bubblewrap has (--bind-fd came in 0.5, --disable-userns in 0.8)."""
    try:
        return subprocess.run([bwrap, "--help"], capture_output=True, text=True, timeout=10, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


@functools.cache
def _root_only(top: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Files under `top` that only their owner may read (/etc/shadow...), and folders that only their owner
    may enter (munge's /etc/munge: a bind over a file in one fails, since the sandbox cannot look inside),
    found once per emulator."""
    found, closed = [], []
    for folder, dirs, files in os.walk(top):
        for name in list(dirs):
            path = os.path.join(folder, name)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if stat.S_ISDIR(st.st_mode) and (st.st_mode & 0o005) != 0o005:
                closed.append(path)
                dirs.remove(name)
        for name in files:
            path = os.path.join(folder, name)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode) and not st.st_mode & 0o004:
                found.append(path)
    return tuple(sorted(found)), tuple(sorted(closed))


# Targets a job may not cover (the contract's reserved mount points); job submit refuses them first.
RESERVED = ("/", "/workdir", "/gcs", "/usr", "/bin", "/lib", "/etc", "/proc", "/sys", "/dev", "/tmp")


class Mount(NamedTuple):
    """One GCPGPU_MOUNTS entry the sandbox binds: its gs:// source, the bucket path's names, the target."""

    source: str
    parts: tuple[str, ...]
    target: str
    ro: bool


def parse_mounts(raw: str) -> list[Mount]:
    """The GCPGPU_MOUNTS entries to bind: each target onto its bucket folder. A mount this cannot place
    safely (bad JSON, a reserved target, a '..' in its path) is left to the entrypoint, which says what is
    wrong with it; so is a read-only one with nothing to read, found when the replica starts (`launch`)."""
    try:
        mounts = json.loads(raw) if raw.strip() else []
    except ValueError:
        return []
    out = []
    for mount in mounts if isinstance(mounts, list) else []:
        if not isinstance(mount, dict):
            continue
        source, target = mount.get("source"), mount.get("target")
        if not isinstance(source, str) or not source.startswith("gs://") or not isinstance(target, str):
            continue
        target = posixpath.normpath(target)
        parts = tuple(p for p in source[len("gs://"):].split("/") if p not in ("", "."))
        if not target.startswith("/") or target.startswith("//") or not parts or ".." in parts or any(
                target == r or target.startswith(r.rstrip("/") + "/") for r in RESERVED if r != "/") or target == "/":
            continue
        out.append(Mount(source, parts, target, bool(mount.get("ro"))))
    return out


def launch(bwrap: str, before: list[str], mounts: list[Mount], gcs: Path, after: list[str],
           env: dict[str, str], shared: list[Mount] | None = None, shared_root: Path | None = None) -> Launch:
    """The bwrap command line with each mount bound by a descriptor opened now, and `env` for the sandbox
    in a memfd (--args): bwrap itself starts with an empty environment. PathRefused, with every descriptor
    closed, when a mount's path leads out of `gcs` (a shared one's out of `shared_root`) through a link, or
    a shared file system's folder is missing."""
    fds: list[int] = []
    try:
        binds: list[str] = []
        for mount in mounts:
            fd = open_inside(gcs, mount, make=not mount.ro)
            if fd is not None:  # a read-only mount with nothing to read: the entrypoint says so
                fds.append(fd)
                binds += ["--ro-bind-fd" if mount.ro else "--bind-fd", str(fd), mount.target]
        for mount in shared or []:
            fd = open_inside(shared_root, mount, make=False) if shared_root is not None else None
            if fd is None:
                raise PathRefused(f"{mount.source} on {mount.target}: its folder in the emulator is missing")
            fds.append(fd)
            binds += ["--ro-bind-fd" if mount.ro else "--bind-fd", str(fd), mount.target]
        args = os.memfd_create("gcpgpu-sandbox-env")  # close-on-exec: only pass_fds hands it on
        fds.append(args)
        pairs = [word for key, value in sorted(env.items()) for word in ("--setenv", key, value)]
        data = memoryview(b"".join(os.fsencode(word) + b"\0" for word in pairs))
        while data:
            data = data[os.write(args, data):]
        os.lseek(args, 0, os.SEEK_SET)
        return [bwrap, "--args", str(args), *before, *binds, *after], {}, fds
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def open_inside(gcs: Path, mount: Mount, make: bool) -> int | None:
    """The bucket folder of `mount` (or a shared file system's folder), opened from `gcs` one name at a time without following a link, made
    (as a folder the job will fill) where missing when `make`; None when missing and not `make`."""
    fd = os.open(gcs, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for i, part in enumerate(mount.parts):
            try:
                try:
                    step = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    if not make:
                        return None
                    try:
                        os.mkdir(part, dir_fd=fd)
                    except FileExistsError:
                        pass
                    step = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as e:
                where = "gs://" + "/".join(mount.parts[: i + 1]) if mount.source.startswith("gs://") else (
                    f"its folder {'/'.join(mount.parts[: i + 1])}")
                why = ("is a link (or a file), not a folder of the bucket" if e.errno in (errno.ELOOP, errno.ENOTDIR)
                       else f"cannot be opened ({e.strerror})")
                raise PathRefused(f"{'GCPGPU_MOUNTS: ' if mount.source.startswith('gs://') else ''}{mount.source} "
                                  f"on {mount.target}: {where} {why}; refused, a mount is bound only from inside "
                                  "the emulator's storage") from None
            os.close(fd)
            fd = step
        out, fd = fd, -1
        return out
    finally:
        if fd >= 0:
            os.close(fd)
