"""Where a cluster job's outputs live in the emulator: folders that outlive the job, as buckets and disks do.

On a real node a job's --output-dir is gs://BUCKET/PATH (the node mounts the bucket with Cloud
Storage FUSE at /gcs/BUCKET) or a path on the node. Here:

    gs://BUCKET/PATH, /gcs/BUCKET/PATH  ->  ROOT/gcs/BUCKET/PATH               one per emulator: every node,
                                                                                every job sees the same bucket
    /any/node/path                      ->  ROOT/nodes/INSTANCE_ID/any/node/path  that node's own disk: gone
                                                                                with the instance, never shared

ROOT is a folder kept for the emulator's life (next to its --state-file when it has one, so it
outlives a restart too); reset empties it. A second job on the same cluster therefore finds the
first one's checkpoints, and a node that is deleted and created again starts with an empty disk.

Nothing a job names lands outside ROOT: paths are resolved by their text, '.' and empty segments
dropped and '..' stopped at the bucket's or the disk's top (gs://b/../../x is ROOT/gcs/x), and a
relative path is taken from the node's / as the container's working directory is.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
import threading
from pathlib import Path

# The variables that carry an output folder into a job (job_env sets them from --output-dir).
OUTPUT_VARS = ("AIP_MODEL_DIR", "AIP_CHECKPOINT_DIR", "AIP_TENSORBOARD_LOG_DIR", "GCPGPU_OUTPUT_DIR")


class Storage:
    """Maps the paths a job names to local folders that outlive it."""

    def __init__(self, root: str | Path | None = None) -> None:
        self._root = Path(root) if root else None
        self._made: Path | None = None  # a temporary root this object created (removed on cleanup)
        self._lock = threading.Lock()

    @property
    def root(self) -> Path:
        with self._lock:
            if self._root is None:
                self._root = self._made = Path(tempfile.mkdtemp(prefix="gcpgpu-emulator-storage-"))
                atexit.register(self.cleanup)
            return self._root

    def local(self, value: str, instance_id: str) -> str:
        """The local folder, inside ROOT, for a gs:// URI, a /gcs/ path or a node path."""
        keep_slash = "/" if value.endswith("/") else ""
        if value.startswith("gs://"):
            base, rel = self.root / "gcs", value[len("gs://"):]
        elif value.startswith("/gcs/"):
            base, rel = self.root / "gcs", value[len("/gcs/"):]
        else:
            base, rel = self.root / "nodes" / _segment(str(instance_id)), value
        return str(base.joinpath(*_inside(rel))) + keep_slash

    def localize_env(self, env: dict[str, str], instance_id: str) -> dict[str, str]:
        """The job's environment with its output folders made local (the folders are created)."""
        out = dict(env)
        for key in OUTPUT_VARS:
            if out.get(key):
                out[key] = self.local(out[key], instance_id)
                Path(out[key]).mkdir(parents=True, exist_ok=True)
        return out

    def localize_args(self, args: list[str], instance_id: str) -> list[str]:
        """Trainer arguments naming a bucket (gs://, or /gcs/ as the container sees it) point at its folder."""
        return [self.local(a, instance_id) if a.startswith(("gs://", "/gcs/")) else a for a in args]

    def reset(self) -> None:
        """Empty every bucket and disk (the emulator's reset)."""
        with self._lock:
            root = self._root
        if root is not None and root.exists():
            for child in root.iterdir():
                shutil.rmtree(child, ignore_errors=True) if child.is_dir() else child.unlink(missing_ok=True)

    def cleanup(self) -> None:
        """Remove a temporary root at exit; a root given by the caller stays."""
        if self._made is not None:
            shutil.rmtree(self._made, ignore_errors=True)


def _inside(path: str) -> list[str]:
    """The segments of `path` resolved by text alone, never climbing above its top."""
    parts: list[str] = []
    for seg in path.split("/"):
        if seg in ("", "."):
            continue
        if seg == "..":
            if parts:
                parts.pop()
            continue
        parts.append(seg)
    return parts


def _segment(name: str) -> str:
    # An instance id is digits; anything else still names one folder, never a path.
    return "_".join(_inside(name)) or "_"
