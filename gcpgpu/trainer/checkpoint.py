"""Checkpoints through torch.distributed.checkpoint: each rank writes its own shards, in parallel.

A save goes to step_NNNNNNNN.tmp and is renamed when every rank has finished, so a run killed mid-save
never leaves a half checkpoint that --resume would pick. Saved: model and optimizer (sharded as they are
trained, re-shardable on load), the loss scaler, the data position, and each rank's RNG states.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

_NAME = re.compile(r"^step_(\d{8})$")


def _barrier() -> None:
    if dist.is_initialized():
        dist.barrier()


def latest(ckpt_dir: str | Path) -> Path | None:
    """The newest complete checkpoint in ckpt_dir, or None."""
    root = Path(ckpt_dir)
    if not root.is_dir():
        return None
    done = [p for p in root.iterdir() if _NAME.match(p.name) and (p / ".metadata").is_file()]
    return max(done, key=lambda p: p.name) if done else None


def _rng_state(device_type: str) -> dict[str, torch.Tensor]:
    state = {"cpu": torch.get_rng_state()}
    if device_type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def save(ckpt_dir: str | Path, step: int, *, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
         scaler: torch.amp.GradScaler, data_state: dict, rank: int, device_type: str, keep: int) -> Path:
    """Save the state after `step` steps on every rank (a collective); returns the checkpoint folder."""
    root = Path(ckpt_dir)
    final = root / f"step_{step:08d}"
    tmp = root / f"step_{step:08d}.tmp"
    if rank == 0:
        root.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
    _barrier()
    model_sd, optim_sd = get_state_dict(model, optimizer)
    state = {
        "model": model_sd,
        "optim": optim_sd,
        "train": {"step": step, "data": data_state, "scaler": scaler.state_dict() if scaler.is_enabled() else {}},
        # Per-rank keys: RNG streams differ by rank and DCP would otherwise keep only rank 0's copy.
        f"rng_rank{rank}": _rng_state(device_type),
    }
    dcp.save(state, checkpoint_id=tmp)
    _barrier()
    if rank == 0:
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
        _prune(root, keep)
    _barrier()
    return final


def _prune(root: Path, keep: int) -> None:
    done = sorted(p for p in root.iterdir() if _NAME.match(p.name))
    for old in done[:-keep]:
        shutil.rmtree(old, ignore_errors=True)


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
