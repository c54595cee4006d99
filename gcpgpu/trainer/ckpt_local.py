"""Where the local copy of the checkpoints goes, and which save mode --ckpt-mode auto picks.

`--ckpt-mode async` saves with DCP's asynchronous save into a folder on this machine, then copies the
finished step to --ckpt-dir (a Cloud Storage FUSE mount, as a rule) in the background; `sync` writes
straight into --ckpt-dir while the steps wait. The local folder's root is the first of:

  1. --ckpt-local-dir
  2. $GCPGPU_CKPT_LOCAL_DIR (a cluster job's agent sets it where the node's local SSDs are mounted)
  3. /mnt/localssd/gcpgpu-ckpt, when /mnt/localssd is a mount point: the RAID0 of the local SSDs that
     A2 Ultra, A3 and A4 nodes come with (the node's startup script mounts it there)
  4. only when async is asked for by name: a folder on the boot disk (the system's temporary folder)

A local disk "exists" when 1-3 find one, and then auto means async; otherwise auto means sync. A boot
disk is a network persistent disk of a few hundred MB/s and often too small for the optimizer's state
as well, so writing every checkpoint there first is left to an explicit `--ckpt-mode async`.

Each --ckpt-dir gets its own subfolder of the root (named by a hash of its path), so the jobs that run on
one node one after another never mix their steps. Standard library only: the choice is plain logic.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

MODES = ("auto", "sync", "async")
LOCAL_DIR_ENV = "GCPGPU_CKPT_LOCAL_DIR"
LOCAL_SSD = "/mnt/localssd"
LOCAL_SSD_DIR = LOCAL_SSD + "/gcpgpu-ckpt"


@dataclass(frozen=True)
class CkptPlace:
    """The resolved checkpoint setup: the mode, this --ckpt-dir's local folder (None: none), and why."""

    mode: str  # "sync" or "async"
    local_dir: Path | None
    why: str


def local_root(flag: str | None, environ: Mapping[str, str] | None = None,
               ismount: Callable[[str], bool] = os.path.ismount) -> tuple[str | None, str]:
    """(the root of the local copies or None, where it came from) by the order in the module's docstring, 1-3."""
    env = os.environ if environ is None else environ
    if flag:
        return flag, "--ckpt-local-dir"
    if env.get(LOCAL_DIR_ENV):
        return env[LOCAL_DIR_ENV], f"${LOCAL_DIR_ENV}"
    if ismount(LOCAL_SSD):
        return LOCAL_SSD_DIR, f"the local SSDs at {LOCAL_SSD}"
    return None, ""


def folder_for(root: str | Path, ckpt_dir: str | Path) -> Path:
    """This --ckpt-dir's own folder under a local root."""
    key = hashlib.sha256(os.path.abspath(os.fspath(ckpt_dir)).encode()).hexdigest()[:16]
    return Path(root) / key


def resolve(mode: str, ckpt_dir: str, local_flag: str | None, environ: Mapping[str, str] | None = None,
            ismount: Callable[[str], bool] = os.path.ismount) -> CkptPlace:
    """--ckpt-mode (auto, sync, async) and --ckpt-local-dir made concrete for --ckpt-dir."""
    root, source = local_root(local_flag, environ, ismount)
    if mode == "auto":
        mode = "async" if root else "sync"
    if mode == "sync":
        local = folder_for(root, ckpt_dir) if root else None
        why = (f"a local copy is read on resume if it is in {local}" if local else
               f"no local disk: no --ckpt-local-dir, no ${LOCAL_DIR_ENV}, nothing mounted at {LOCAL_SSD}")
        return CkptPlace("sync", local, f"sync ({why})")
    if not root:
        root, source = os.path.join(tempfile.gettempdir(), "gcpgpu-ckpt"), "the boot disk"
    local = folder_for(root, ckpt_dir)
    return CkptPlace("async", local, f"async: saved to {local} ({source}), uploaded to {ckpt_dir} in the background")


def vertex_checkpoint_dir(environ: dict[str, str] | None = None) -> str | None:
    """Vertex's AIP_CHECKPOINT_DIR as a local path: gs://bucket/x is mounted at /gcs/bucket/x (Cloud Storage FUSE)."""
    d = (os.environ if environ is None else environ).get("AIP_CHECKPOINT_DIR")
    if not d:
        return None
    return "/gcs/" + d[len("gs://"):] if d.startswith("gs://") else d
