"""GCPGPU_CKPT_DIR: a user command's own checkpoint folder on the node, uploaded in the background.

containers/entrypoint.sh, before it runs a user's command (not the bundled trainer), evals
`python -m gcpgpu.node.ckptsync env`, which prints `export GCPGPU_CKPT_DIR=...` and, when the job has an
output directory, runs `python -m gcpgpu.node.ckptsync upload` beside the command until it ends.

  the folder        the trainer's local checkpoint root (gcpgpu.trainer.ckpt_local.local_root: the node's
                    local SSDs at /mnt/localssd, as $GCPGPU_CKPT_LOCAL_DIR names them), else the boot disk
                    (the system's temporary folder); in it, this output directory's own subfolder
  the destination   OUTPUT/ckpt/node-RANK/: OUTPUT is GCPGPU_OUTPUT_DIR (a cluster job's --output-dir), else
                    the folder above Vertex AI's AIP_MODEL_DIR; RANK is the node's (GCPGPU_NODE_RANK). A gs://
                    OUTPUT is written through its Cloud Storage FUSE mount at /gcs/BUCKET (a cluster node
                    mounts the --output-dir bucket there, Vertex AI mounts every bucket); a path, as it is.

The rule is the trainer's (gcpgpu.trainer.ckpt_rule): a checkpoint is a folder step_NNNNNNNN (eight
digits) and is complete once it holds `.metadata`, which the command writes last (DCP's save does). Each
complete folder is copied once, `.metadata` last; one without it is never copied. A restarted command
(GCPGPU_RESUME=1) finds the newest folder complete at the destination in GCPGPU_CKPT_DIR before it starts,
and nothing else: a fresh start finds the folder empty. Files the command deletes stay uploaded.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import signal
import sys
import tempfile
import threading
from collections.abc import Mapping
from pathlib import Path

from gcpgpu.node.workspace import ReplicaError, gcs_path
from gcpgpu.trainer import ckpt_local, ckpt_rule  # stdlib only

ENV = "GCPGPU_CKPT_DIR"
SUBPATH = "ckpt"
EVERY_S = 1.0  # how often the upload looks for newly complete folders (a listing of one local folder)
PROG = "gcpgpu-entrypoint"


def output_dir(environ: Mapping[str, str]) -> str | None:
    """The job's output directory: GCPGPU_OUTPUT_DIR, else the folder above Vertex AI's AIP_MODEL_DIR."""
    out = environ.get("GCPGPU_OUTPUT_DIR", "").strip()
    if out:
        return out.rstrip("/")
    model = environ.get("AIP_MODEL_DIR", "").strip().rstrip("/")
    return model.rsplit("/", 1)[0] if "/" in model.removeprefix("gs://") else None


def destination(environ: Mapping[str, str]) -> tuple[str, Path] | None:
    """(OUTPUT/ckpt/node-RANK as the job names it, the folder it is written through here), or None without an
    output directory. ReplicaError (one line) when a gs:// one's bucket is not mounted."""
    out = output_dir(environ)
    if not out:
        return None
    rank = environ.get("GCPGPU_NODE_RANK", "").strip() or "0"
    name = f"{out}/{SUBPATH}/node-{rank}"
    if not out.startswith("gs://"):
        return name, Path(name)
    bucket_dir, path = gcs_path(name, environ, ENV)
    if not bucket_dir.is_dir():
        raise ReplicaError(f"{ENV}: {name} cannot be written here: its bucket is not mounted at {bucket_dir}; "
                           "checkpoints in the folder stay on this node")
    return name, path


def local_dir(environ: Mapping[str, str], dest: str | None) -> Path:
    """This output directory's own folder under the node's local checkpoint root (the boot disk without one)."""
    root, _ = ckpt_local.local_root(None, environ)
    uid = os.getuid()  # the root is shared (the SSDs' folder is 1777): each user its own folders
    root = root or os.path.join(tempfile.gettempdir(), f"gcpgpu-ckpt-{uid}")
    key = hashlib.sha256((dest or "no-output-dir").encode()).hexdigest()[:16]
    return Path(root) / f"user{uid}-{key}"


def prepare(local: Path, remote: Path | None, resume: bool) -> Path | None:
    """Empty `local` (made here), then on a resume copy the newest checkpoint complete in `remote` into it;
    returns that checkpoint's local copy, or None."""
    if local.exists():
        shutil.rmtree(local)
    local.mkdir(parents=True, mode=0o700)
    newest = ckpt_rule.latest(remote) if resume and remote is not None else None
    if newest is None:
        return None
    ckpt_rule.copy_folder(newest, local / newest.name)
    return local / newest.name


def push(local: Path, remote: Path, done: set[str]) -> list[str]:
    """Copy every folder complete in `local` and not yet in `done` to `remote`, by the rule; their names."""
    pushed = []
    for step in ckpt_rule.completed(local):
        if step.name in done:
            continue
        if not ckpt_rule.same_save(step, remote / step.name):
            remote.mkdir(parents=True, exist_ok=True)
            ckpt_rule.copy_folder(step, remote / step.name)
        done.add(step.name)
        pushed.append(step.name)
    return pushed


def upload(local: Path, remote: Path, name: str, stop: threading.Event, every: float = EVERY_S) -> None:
    """Push until `stop` is set, then once more: what the command completed last is uploaded too."""
    done = {p.name for p in ckpt_rule.completed(remote) if ckpt_rule.same_save(p, local / p.name)}
    while True:
        last = stop.wait(every)
        try:
            for step in push(local, remote, done):
                print(f"{PROG}: checkpoints ({ENV}): {step} uploaded to {name}/{step}", file=sys.stderr, flush=True)
        except OSError as e:  # a full or gone mount: say so, and try again on the next round
            print(f"{PROG}: checkpoints ({ENV}): upload to {name} failed: {e}", file=sys.stderr, flush=True)
        if last:
            return


def env_plan(environ: Mapping[str, str]) -> str:
    """The shell lines the entrypoint evals: GCPGPU_CKPT_DIR exported, and gcpgpu_ckpt_upload (not exported)
    set to 1 when the upload is to run beside the command."""
    try:
        dest = destination(environ)
    except ReplicaError as e:
        print(f"{PROG}: warning: {e}", file=sys.stderr)
        dest = None
    local = local_dir(environ, dest[0] if dest else None)
    restored = prepare(local, dest[1] if dest else None, environ.get("GCPGPU_RESUME") == "1")
    if restored is not None:
        print(f"{PROG}: checkpoints ({ENV}): {restored.name} restored from {dest[0]}/{restored.name}", file=sys.stderr)
    elif dest is None:
        print(f"{PROG}: checkpoints ({ENV}): no output directory, so {local} stays on this node", file=sys.stderr)
    return "\n".join([f"export {ENV}={shlex.quote(str(local))}", f"gcpgpu_ckpt_upload={1 if dest else 0}", ""])


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    environ = os.environ
    if argv == ["env"]:
        try:
            sys.stdout.write(env_plan(environ))
        except OSError as e:  # the command runs all the same, without the folder: one that needs it says so
            print(f"{PROG}: checkpoints ({ENV}): cannot prepare the folder, so the command runs without it: {e}", file=sys.stderr)
            sys.stdout.write("gcpgpu_ckpt_upload=0\n")
        return 0
    if argv == ["upload"]:
        try:
            dest = destination(environ)
        except ReplicaError:
            return 0  # `env` said why already
        if dest is None or not environ.get(ENV):
            return 0
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the command's ^C is not ours: the entrypoint stops us
        upload(Path(environ[ENV]), dest[1], dest[0], stop)
        return 0
    print(f"{PROG}: usage: python -m gcpgpu.node.ckptsync env | upload", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
