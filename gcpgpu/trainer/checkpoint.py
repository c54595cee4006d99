"""Checkpoints through torch.distributed.checkpoint: each rank writes its own shards, in parallel.

A save writes straight into its final folder, step_NNNNNNNN/, and is complete when DCP's `.metadata`
file exists: DCP writes it last, on rank 0, after every rank's shard files are written and synced. No
folder is renamed, because on a Cloud Storage FUSE mount of an ordinary bucket (Vertex's /gcs, a
cluster's --output-dir) a folder rename copies and deletes every object, slowly and not atomically,
while one small object appears all at once. --resume takes the newest folder with `.metadata` and
ignores half-written ones; the next save removes them.

Saved: model and optimizer (sharded as they are trained, re-shardable on load), the loss scaler, the
data position, and each rank's RNG states.

This module writes synchronously (--ckpt-mode sync) and reads; checkpointer.py saves off the critical path
(--ckpt-mode async) into a local folder first and uploads with the same rule: `.metadata` last. The rule
itself is ckpt_rule.py (standard library only), which the image's upload of a user's GCPGPU_CKPT_DIR shares.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

# The rule of a complete checkpoint, shared with the entrypoint's upload of a user's GCPGPU_CKPT_DIR.
from gcpgpu.trainer.ckpt_rule import COMMIT, NAME, complete, fastest_copy, folder, latest  # noqa: F401

from . import nofollow

# Test hook: "STEP" makes rank 0 die abruptly (os._exit) during the save of that step, after the shard
# files are written and before `.metadata` is: a run killed mid-save.
DIE_IN_SAVE_ENV = "GCPGPU_TRAINER_TEST_DIE_IN_SAVE"
# Test hook: "SECONDS" makes each rank's write into --ckpt-dir that much slower per save, in both modes (a
# bucket's upload, on a machine whose --ckpt-dir is a local folder).
SLOW_CKPT_DIR_ENV = "GCPGPU_TRAINER_TEST_SLOW_CKPT_DIR"


def barrier(group=None) -> None:
    if dist.is_initialized():
        dist.barrier(group=group)


def slow_ckpt_dir_s() -> float:
    return float(os.environ.get(SLOW_CKPT_DIR_ENV) or 0)


class _TestWriter(dcp.FileSystemWriter):
    """DCP's writer with the test hooks: slower (slow_s per save), or dying before the commit."""

    def __init__(self, path: Path, slow_s: float, die: bool) -> None:
        super().__init__(path, sync_files=True)
        self.slow_s, self.die = slow_s, die

    def write_data(self, plan, planner):
        time.sleep(self.slow_s)  # the emulated bucket's latency, injected by a test or the bench
        return super().write_data(plan, planner)

    def finish(self, metadata, results) -> None:
        if self.die:
            os._exit(3)  # after every rank's shards, before the commit mark
        super().finish(metadata, results)


def writer(path: Path, step: int, slow_s: float = 0.0) -> dcp.FileSystemWriter:
    """DCP's own file writer (shard files synced to storage before `.metadata` is written)."""
    die = os.environ.get(DIE_IN_SAVE_ENV) == str(step)
    if die or slow_s:
        return _TestWriter(path, slow_s, die)
    return dcp.FileSystemWriter(path, sync_files=True)


def _rng_state(device_type: str) -> dict[str, torch.Tensor]:
    state = {"cpu": torch.get_rng_state()}
    if device_type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def state_dict(step: int, *, model: torch.nn.Module, optimizer: torch.optim.Optimizer, scaler: torch.amp.GradScaler,
               data_state: dict, rank: int, device_type: str) -> dict[str, Any]:
    """What a checkpoint holds, as DCP takes it (model and optimizer as they are sharded)."""
    model_sd, optim_sd = get_state_dict(model, optimizer)
    return {
        "model": model_sd,
        "optim": optim_sd,
        "train": {"step": step, "data": data_state, "scaler": scaler.state_dict() if scaler.is_enabled() else {}},
        # Per-rank keys: RNG streams differ by rank and DCP would otherwise keep only rank 0's copy.
        f"rng_rank{rank}": _rng_state(device_type),
    }


def pin(*folders: str | Path | None) -> None:
    """Pin the checkpoint folders where their links lead at the trainer's start (nofollow.py): a link swapped
    in on their way later is never followed by a save or a prune, which refuse it (nofollow.SwappedLink)."""
    for f in folders:
        if f:
            nofollow.pin(f)


def save(ckpt_dir: str | Path, step: int, state: dict[str, Any], *, rank: int, keep: int) -> Path:
    """Save `state` (state_dict()) after `step` steps on every rank (a collective); returns the checkpoint folder.
    The folders are reached following no link swapped in since the trainer started (nofollow.py)."""
    root = Path(ckpt_dir)
    final = folder(root, step)
    if rank == 0:
        with nofollow.opened(root, create=True) as (fd, _path):
            # a half-written save of this step by a run that was killed, or an older copy (a link: itself)
            nofollow.remove_at(fd, final.name, first=COMMIT)
    barrier()
    # Every rank writes its shards into the folder it holds open; rank 0 then writes `.metadata` (the commit)
    # and dcp.save returns on every rank only after that.
    with nofollow.opened(final, create=True) as (_fd, path):
        dcp.save(state, storage_writer=writer(path, step, slow_ckpt_dir_s()))
    if rank == 0:
        prune(root, keep, just_saved=final)
    barrier()
    return final


def remove(folder: Path) -> None:
    """Uncommit first, then delete: a kill midway leaves an incomplete folder, never a damaged complete one. A
    link there is removed itself, never followed."""
    nofollow.remove(folder, first=COMMIT)


def prune(root: Path, keep: int, just_saved: Path) -> None:
    """Keep the newest `keep` complete checkpoints; remove older ones and every incomplete folder
    (half-written by a killed run; the legacy step_N.tmp folders too). A link among them is no checkpoint of
    this trainer's: it is neither counted nor followed."""
    with nofollow.opened(root) as (fd, path):
        with os.scandir(fd) as entries:
            names = sorted(e.name for e in entries
                           if e.name.startswith("step_") and e.name != just_saved.name and
                           e.is_dir(follow_symlinks=False))
        done = sorted([n for n in names if complete(path / n)] + [just_saved.name])
        for old in done[:-keep]:
            nofollow.remove_at(fd, old, first=COMMIT)
        for half in (n for n in names if not complete(path / n)):
            nofollow.remove_at(fd, half, first=COMMIT)


def load(path: str | Path, *, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
         scaler: torch.amp.GradScaler, data_state: dict, rank: int, device_type: str) -> dict[str, Any]:
    """Load a checkpoint into model/optimizer/scaler (re-sharding if the layout changed); returns the
    'train' record (step, data position). RNG states are restored when this rank saved some.

    DCP fills only the keys it is given, so data_state must have the saved layout (the loader's own
    state_dict() does).
    """
    model_sd, optim_sd = get_state_dict(model, optimizer)
    train_state: dict[str, Any] = {"step": 0, "data": dict(data_state),
                                   "scaler": scaler.state_dict() if scaler.is_enabled() else {}}
    state: dict[str, Any] = {"model": model_sd, "optim": optim_sd, "train": train_state}
    saved_keys = dcp.FileSystemReader(str(path)).read_metadata().state_dict_metadata.keys()
    rng_key = f"rng_rank{rank}"
    has_rng = any(k.startswith(rng_key + ".") for k in saved_keys)
    if has_rng:
        state[rng_key] = _rng_state(device_type)
    dcp.load(state, checkpoint_id=path)
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
    if scaler.is_enabled() and state["train"]["scaler"]:
        scaler.load_state_dict(state["train"]["scaler"])
    if has_rng:
        torch.set_rng_state(state[rng_key]["cpu"])
        if device_type == "cuda" and "cuda" in state[rng_key]:
            torch.cuda.set_rng_state(state[rng_key]["cuda"])
    return state["train"]
