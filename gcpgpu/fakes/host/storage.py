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
relative path is taken from the node's / as the container's working directory is. Then by the disk:
a link a job planted (`ln -s /home/me /gcs/b/evil`, from a sandboxed command) is followed only while
it stays inside the buckets (or that node's disk); one that leads out refuses the job (PathRefused,
one line). The bundled trainer runs outside any sandbox, so its own path arguments are mapped the
same way (localize_args): --ckpt-dir, --ckpt-local-dir, --log-json, --tensorboard-dir and --profile-dir
(in its flags or its --config file), and any argument naming a bucket; the folders it writes in are made here
one name at a time following no link, and checked again after (a link a job swaps in on the way between the
check and the use refuses the job), and the trainer itself follows no link swapped in later
(gcpgpu/trainer/nofollow.py). An absolute node path lands on that node's
disk, never on this machine's; a relative one stays in the run's own folder (its working directory);
a '..' that climbs out of either is refused. What the trainer only reads (--data, --config) may be
a path of this machine, as before.
"""

from __future__ import annotations

import atexit
import json
import os
import posixpath
import shutil
import tempfile
import threading
from pathlib import Path

from gcpgpu.trainer.argv import CONFIG_FLAG, OUTPUT_PATH_FLAGS, flag_value

# The variables that carry an output folder into a job (job_env sets them from --output-dir).
OUTPUT_VARS = ("AIP_MODEL_DIR", "AIP_CHECKPOINT_DIR", "AIP_TENSORBOARD_LOG_DIR", "GCPGPU_OUTPUT_DIR")
MAX_CONFIG_BYTES = 1 << 20  # a --config file the emulator reads for its paths (the trainer's are a few lines)


class PathRefused(Exception):
    """A path a job names would reach outside the emulator's storage (or its node's disk): the job fails with
    this one line."""


class Storage:
    """Maps the paths a job names to local folders that outlive it."""

    def __init__(self, root: str | Path | None = None) -> None:
        self._root = Path(root) if root else None
        self._made: Path | None = None  # a temporary root this object created (removed on cleanup)
        self._lock = threading.Lock()
        # instance id -> [(mount path, folder parts under ROOT)]: the node's shared file systems
        # (shared_mounts.py), where its node paths under a mount path land instead of its own disk.
        self._shared: dict[str, list[tuple[str, tuple[str, ...]]]] = {}

    @property
    def root(self) -> Path:
        with self._lock:
            if self._root is None:
                self._root = self._made = Path(tempfile.mkdtemp(prefix="gcpgpu-emulator-storage-"))
                atexit.register(self.cleanup)
            return self._root

    def local(self, value: str, instance_id: str, make: str | None = None) -> str:
        """The local folder, inside ROOT, for a gs:// URI, a /gcs/ path or a node path. `make` "folder" (or
        "parent") creates it (its parent) on the way, following no link, and the path is checked again after:
        a link a job swapped in since the first check refuses it (PathRefused) instead of being followed."""
        keep_slash = "/" if value.endswith("/") else ""
        if value.startswith("gs://"):
            base, rel = self.root / "gcs", value[len("gs://"):]
        elif value.startswith("/gcs/"):
            base, rel = self.root / "gcs", value[len("/gcs/"):]
        else:
            base, rel = self.root / "nodes" / _segment(str(instance_id)), value
            node_path = "/" + "/".join(_inside(value))
            for target, parts in self._shared.get(str(instance_id), []):
                if node_path == target or node_path.startswith(target.rstrip("/") + "/"):
                    base, rel = self.root.joinpath(*parts), node_path[len(target):]
                    break
        path = base.joinpath(*_inside(rel))
        real = _kept_under(base, path, value)
        if make is not None:
            _make_under(base, real if make == "folder" else real.parent, value)
            real = _kept_under(base, path, value)  # again, at use: what was checked may have changed since
        return str(real) + keep_slash

    def share(self, instance_id: str, mounts: list[tuple[str, tuple[str, ...]]]) -> None:
        """Where node `instance_id`'s shared file systems are: (mount path, folder parts under ROOT) each. Only
        the bundled trainer's paths need it (it runs outside the sandbox, so a read-only mount is not read-only
        to it); users' commands have the folders bound in their sandbox."""
        with self._lock:
            self._shared[str(instance_id)] = list(mounts)

    def localize_env(self, env: dict[str, str], instance_id: str) -> dict[str, str]:
        """The job's environment with its output folders made local (the folders are created)."""
        out = dict(env)
        for key in OUTPUT_VARS:
            if out.get(key):
                out[key] = self.local(out[key], instance_id, make="folder")
        return out

    def localize_args(self, args: list[str], instance_id: str, cwd: str | Path | None = None) -> list[str]:
        """The bundled trainer's arguments with every path it writes made the node's (or a bucket's), and every
        argument naming a bucket (gs://, or /gcs/ as the container sees it) pointed at its folder. `cwd`: the
        trainer's working directory (the run's folder), where relative paths stay. What its --config file says
        it writes comes after as flags (flags win over the file). PathRefused when a path climbs out ('..')
        or leads out through a link."""
        here = Path(cwd) if cwd is not None else Path.cwd()
        out: list[str] = []
        flag_wanting_value = None
        for arg in args:
            flag, eq, value = arg.partition("=")
            if flag_wanting_value is not None:
                out.append(self._path(flag_wanting_value, arg, instance_id, here))
                flag_wanting_value = None
            elif arg == "--":
                out.append(arg)
            elif eq and flag in OUTPUT_PATH_FLAGS:
                out.append(f"{flag}={self._path(flag, value, instance_id, here)}")
            elif arg in OUTPUT_PATH_FLAGS:
                out.append(arg)
                flag_wanting_value = arg
            else:
                out.append(self._path("trainer argument", arg, instance_id, here)
                           if arg.startswith(("gs://", "/gcs/")) else arg)
        config = flag_value(out, CONFIG_FLAG)
        if config:
            given = {flag for flag in OUTPUT_PATH_FLAGS if flag_value(out, flag)}
            for flag, value in _config_paths(str(here / config)).items():
                if flag not in given:
                    out += [flag, self._path(f"{flag} (in {config})", value, instance_id, here)]
        return out

    def _path(self, what: str, value: str, instance_id: str, cwd: Path) -> str:
        """One trainer path made the node's (absolute), a bucket's, or kept in `cwd` (relative); PathRefused
        when its '..' climbs out of its top (the bucket, the node's /, the working folder)."""
        bucket = value.startswith(("gs://", "/gcs/"))
        rel = value[len("gs://"):] if value.startswith("gs://") else value
        if _climbs(rel, floor=2 if value.startswith("/gcs/") else 1 if bucket else 0):
            top = "its bucket" if bucket else "/" if value.startswith("/") else "the job's working folder"
            raise PathRefused(f"{what} {value!r}: its '..' climbs out of {top}")
        if bucket or value.startswith("/"):
            # a path it writes: its folder is there, as a container's /tmp is
            return self.local(value, instance_id, make="parent" if what != "trainer argument" else None)
        _kept_under(cwd, cwd / value, value)
        return value  # the run's own folder, the trainer's working directory

    def reset(self) -> None:
        """Empty every bucket and disk (the emulator's reset)."""
        with self._lock:
            root = self._root
            self._shared.clear()
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


def _climbs(path: str, floor: int) -> bool:
    """Whether `path`'s '..' climb above its top, `floor` segments down (a bucket's name: 1; /gcs/B: 2)."""
    depth = 0
    for seg in path.split("/"):
        if seg == "..":
            depth -= 1
            if depth < floor:
                return True
        elif seg not in ("", "."):
            depth += 1
    return False


def _kept_under(base: Path, path: Path, value: str) -> Path:
    """`path` with the links on its way resolved, refused unless it stays inside `base` (a link a job
    planted in a bucket, or on a node's disk, that leads out of it)."""
    top = Path(os.path.realpath(base))
    real = Path(os.path.realpath(path))
    if real != top and not real.is_relative_to(top):
        raise PathRefused(f"{value}: a link on its way leads out of the emulator's storage; refused")
    return real


def _make_under(base: Path, folder: Path, value: str) -> None:
    """mkdir -p `folder` (a resolved path inside `base`), one name at a time from base's own folder and
    following no link: one a job swapped in on the way since the check refuses the job."""
    top = Path(os.path.realpath(base))
    if not folder.is_relative_to(top):
        return  # the parent of a bucket's or a disk's top: the emulator's own folder
    top.mkdir(parents=True, exist_ok=True)  # ROOT's own buckets/ and nodes/ folders: no job reaches above them
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(top, flags)
    try:
        for name in folder.relative_to(top).parts:
            try:
                os.mkdir(name, dir_fd=fd)
            except FileExistsError:
                pass
            try:
                nxt = os.open(name, flags, dir_fd=fd)
            except OSError as e:  # ELOOP: a link; ENOTDIR: a file
                raise PathRefused(f"{value}: {name!r} on its way is a link or a file now, not a folder; "
                                  "refused") from e
            os.close(fd)
            fd = nxt
    finally:
        os.close(fd)


def _config_paths(path: str) -> dict[str, str]:
    """{--flag: path} for what the trainer's --config file says it writes (OUTPUT_PATH_FLAGS' keys)."""
    try:
        with open(path, "rb") as f:
            text = f.read(MAX_CONFIG_BYTES + 1)
    except OSError:
        return {}  # the trainer says so itself, in one line
    if len(text) > MAX_CONFIG_BYTES:
        raise PathRefused(f"--config {path}: over {MAX_CONFIG_BYTES} bytes")
    import yaml  # the trainer reads .yaml/.yml with it, anything else as JSON

    try:
        if posixpath.splitext(path)[1] in (".yaml", ".yml"):
            if any(isinstance(e, yaml.AliasEvent) for e in yaml.parse(text, Loader=yaml.SafeLoader)):
                raise PathRefused(f"--config {path}: the emulator reads no YAML aliases in it")
            data = yaml.safe_load(text)
        else:
            data = json.loads(text)
    except (ValueError, yaml.YAMLError) as e:
        raise PathRefused(f"--config {path}: cannot be read for its paths ({str(e).splitlines()[0]})") from None
    out = {}
    for key, value in (data.items() if isinstance(data, dict) else ()):
        flag = "--" + str(key).replace("_", "-")
        if flag in OUTPUT_PATH_FLAGS and isinstance(value, str) and value:
            out[flag] = value
    return out


def _segment(name: str) -> str:
    # An instance id is digits; anything else still names one folder, never a path.
    return "_".join(_inside(name)) or "_"
