"""Users' own commands, run for real on emulated cluster nodes and Vertex AI replicas.

A job whose command is not the bundled trainer runs as the training image would run it: through
containers/entrypoint.sh (which unpacks GCPGPU_WORKDIR into /workdir, runs GCPGPU_SETUP, points
GCPGPU_MOUNTS at /gcs/BUCKET/..., reads GCPGPU_SECRETS and exports the rendezvous), inside
bubblewrap so the paths a script names on the cloud mean the same here:

    /                  a tmpfs: nothing of this machine but what is bound below
    /usr /etc /bin /lib*, this checkout, the emulator's Python   read-only
    /gcs               the emulator's Cloud Storage folder (one folder per bucket), read-write
    /workdir           a private, empty folder per node or replica
    each GCPGPU_MOUNTS target   its gs://BUCKET/PATH folder, bound read-only when "ro" (as a node's
                       read-only Cloud Storage FUSE mount is); the entrypoint finds it mounted and leaves it
    /tmp /proc /dev    private

The network is shared (replicas meet on 127.0.0.1, as the bundled trainer's do). The process dies
with the emulator (--die-with-parent) and every process of the job lives in its own pid namespace,
so a lost node's kill leaves nothing behind.

Running a command that arrives over HTTP is code execution on this machine: only when the
emulator's owner allowed it (`gcpgpu emulator start --run-user-commands`, mock_gcp(), the pytest
fixture `gcp`, make demo), and only where bwrap exists; otherwise `refusal()` says why in one line
and the job fails with it.
"""

from __future__ import annotations

import json
import posixpath
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

PKG_ROOT = Path(__file__).resolve().parents[3]  # the folder holding gcpgpu/ (a checkout or site-packages)
# An address nothing listens on: launch.py's metadata lookups fail at once and it goes on without them
# (no machine type, no token; the emulator's Secret Manager needs none).
NO_METADATA = "http://127.0.0.1:9/computeMetadata/v1"
NOT_ALLOWED = ("this emulator does not run users' commands (code execution on its machine): start it with "
               "'gcpgpu emulator start --run-user-commands' (mock_gcp() and the pytest fixture gcp allow it)")
NO_BWRAP = ("this emulator cannot run users' commands here: bubblewrap (bwrap) is not installed; install it "
            "(apt-get install bubblewrap) and restart the emulator")


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
                 address: Callable[[], str | None] | None = None) -> None:
        self.allowed = allowed
        self._gcs_root = gcs_root  # the emulator's storage folder of buckets (it may be made lazily)
        self.address = address  # HOST:PORT of the emulator once it serves (its Secret Manager)
        self.bwrap = shutil.which("bwrap")

    def refusal(self) -> str | None:
        """Why a user's command cannot run here, in one line; None when it can."""
        if not self.allowed:
            return NOT_ALLOWED
        if not self.bwrap:
            return NO_BWRAP
        return None

    def argv_env(self, command: list[str], env: dict[str, str], private: Path) -> tuple[list[str], dict[str, str]]:
        """The local command line and environment that run `command` through the image's entrypoint in a
        sandbox whose /workdir is `private` (made here). `env` is the container's environment plus what
        the platform gives (NNODES... on a cluster node, CLUSTER_SPEC on Vertex AI)."""
        if self.refusal() is not None or self._gcs_root is None:
            raise RuntimeError(self.refusal() or "no storage folder for /gcs")
        gcs = self._gcs_root()
        gcs.mkdir(parents=True, exist_ok=True)
        private.mkdir(parents=True, exist_ok=True)
        python = Path(sys.executable)
        venv_bin = str(python.parent)
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
        # The private /tmp first: a checkout or venv that lives under /tmp (a CI clone) is bound over it.
        argv = [self.bwrap or "bwrap", "--die-with-parent", "--unshare-pid", "--unshare-ipc", *system,
                "--tmpfs", "/tmp", *binds, "--proc", "/proc", "--dev", "/dev", "--bind", str(gcs), "/gcs",
                "--bind", str(private), "/workdir", *mount_binds(env.get("GCPGPU_MOUNTS", ""), gcs),
                "--chdir", "/workdir",
                "/bin/bash", str(entrypoint()), *command]
        address = self.address() if self.address is not None else None
        out = dict(env)
        out.update({
            "PATH": f"{venv_bin}:/usr/local/bin:/usr/bin:/bin",
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
        return argv, out


# Targets a job may not cover (the contract's reserved mount points); job submit refuses them first.
RESERVED = ("/", "/workdir", "/gcs", "/usr", "/bin", "/lib", "/etc", "/proc", "/sys", "/dev", "/tmp")


def mount_binds(raw: str, gcs: Path) -> list[str]:
    """bwrap binds for GCPGPU_MOUNTS: each target onto its bucket folder under `gcs`. A mount this cannot
    place safely (bad JSON, a reserved target, a '..' in its path, nothing to read) is left to the
    entrypoint, which says what is wrong with it."""
    try:
        mounts = json.loads(raw) if raw.strip() else []
    except ValueError:
        return []
    binds: list[str] = []
    for mount in mounts if isinstance(mounts, list) else []:
        if not isinstance(mount, dict):
            continue
        source, target = mount.get("source"), mount.get("target")
        if not isinstance(source, str) or not source.startswith("gs://") or not isinstance(target, str):
            continue
        target = posixpath.normpath(target)
        parts = [p for p in source[len("gs://"):].split("/") if p not in ("", ".")]
        if not target.startswith("/") or target.startswith("//") or not parts or ".." in parts or any(
                target == r or target.startswith(r.rstrip("/") + "/") for r in RESERVED if r != "/") or target == "/":
            continue
        local = gcs.joinpath(*parts)
        if mount.get("ro"):
            if local.is_dir():
                binds += ["--ro-bind", str(local), target]
        else:
            local.mkdir(parents=True, exist_ok=True)
            binds += ["--bind", str(local), target]
    return binds
