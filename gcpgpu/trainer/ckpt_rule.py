"""When a checkpoint folder counts: the one rule the trainer's checkpoints and a user's GCPGPU_CKPT_DIR share.

A checkpoint is a folder step_NNNNNNNN/ (the step, eight digits) and is complete once its `.metadata`
file exists. DCP writes that file last, after every rank's shards; a copy (the trainer's background
upload, the entrypoint's upload of GCPGPU_CKPT_DIR, a restore) copies it last too. A folder without it
is half written or half copied and never counts: not for a resume, not as the newest. Standard library
only, so the image's entrypoint side (gcpgpu.node.ckptsync) reads it without torch.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

NAME = re.compile(r"^step_(\d{8})$")
COMMIT = ".metadata"  # DCP's metadata file: written last, so its presence marks a complete checkpoint


def folder(root: str | Path, step: int) -> Path:
    return Path(root) / f"step_{step:08d}"


def complete(folder: Path) -> bool:
    return bool(NAME.match(folder.name)) and (folder / COMMIT).is_file()


def completed(root: str | Path) -> list[Path]:
    """The complete checkpoints in root, oldest first (none when root is not a folder)."""
    root = Path(root)
    if not root.is_dir():
        return []
    return sorted((p for p in root.iterdir() if complete(p)), key=lambda p: p.name)


def latest(ckpt_dir: str | Path) -> Path | None:
    """The newest complete checkpoint in ckpt_dir, or None."""
    done = completed(ckpt_dir)
    return done[-1] if done else None


def same_save(a: Path, b: Path) -> bool:
    """Whether b is a whole copy of the complete checkpoint a: the same `.metadata` bytes (which hold DCP's id
    of the save) and every file of a, in its subfolders too, at its size in b."""
    try:
        if (a / COMMIT).read_bytes() != (b / COMMIT).read_bytes():
            return False
        return all((b / f.relative_to(a)).is_file() and (b / f.relative_to(a)).stat().st_size == f.stat().st_size
                   for f in a.rglob("*") if f.is_file())
    except OSError:
        return False


def fastest_copy(path: Path, local_dir: Path | None) -> Path:
    """Where to read the complete checkpoint `path` (in --ckpt-dir) from: its local copy when that is the
    same save, whole (same_save), else `path` itself."""
    local = local_dir / path.name if local_dir else None
    return local if local is not None and same_save(path, local) else path


def copy_file(src: Path, dst: Path, chunk: int = 16 << 20) -> None:
    """Copy one file and sync it: on a Cloud Storage FUSE mount the object is uploaded when it is closed."""
    with src.open("rb") as fin, dst.open("wb") as fout:
        shutil.copyfileobj(fin, fout, chunk)
        fout.flush()
        os.fsync(fout.fileno())


def copy_folder(src: Path, dst: Path) -> None:
    """Copy the complete checkpoint src to dst by the rule: dst uncommitted first (an older save of the same
    step), every other file, then `.metadata` as `.metadata.tmp` renamed, so dst counts only once whole."""
    (dst / COMMIT).unlink(missing_ok=True)
    dst.mkdir(parents=True, exist_ok=True)
    for f in sorted(src.rglob("*")):
        if f.is_file() and f != src / COMMIT:
            (dst / f.relative_to(src)).parent.mkdir(parents=True, exist_ok=True)
            copy_file(f, dst / f.relative_to(src))
    copy_file(src / COMMIT, dst / (COMMIT + ".tmp"))
    os.replace(dst / (COMMIT + ".tmp"), dst / COMMIT)
