"""Checks of the trainer's options that depend on the launch and the machine (world size, GPUs, torch).

config.py checks what the options alone decide; these run in main() once the launch is known, still
before any process group or model exists, and fail the same way: one line naming the option, exit 2.
"""

from __future__ import annotations

import os
import re

from gcpgpu.trainer.config import (
    ACCEPT_TORCH_ENV,
    ALLOW_CPU_ENV,
    MIN_TORCH,
    ConfigError,
    TrainConfig,
    resolve_auto,
)


def _release(version: str) -> tuple[int, ...]:
    """'2.13.0+cu130' or '2.6.0a0+git...' -> (2, 13, 0) / (2, 6, 0): the release numbers only."""
    m = re.match(r"(\d+(?:\.\d+)*)", version)
    return tuple(int(x) for x in m.group(1).split(".")) if m else ()


def check_runtime(cfg: TrainConfig, *, world_size: int, local_world_size: int, cuda_available: bool,
                  cuda_capability: tuple[int, int] | None, torchao_available: bool, allow_cpu: bool,
                  numpy_available: bool = True, torch_version: str | None = None) -> str:
    """Checks that depend on the launch and the machine; returns the device type to use ('cuda' or 'cpu').

    GPU-only requests on a machine without a GPU are errors, unless allow_cpu (the emulator's opt-in).
    """
    if (torch_version is not None and _release(torch_version) < _release(MIN_TORCH)
            and os.environ.get(ACCEPT_TORCH_ENV) != torch_version):
        raise ConfigError(f"torch {torch_version}: the trainer needs torch >= {MIN_TORCH} (the release the image "
                          f"and the tests use, containers/versions.env); pip install 'torch>={MIN_TORCH}'")
    if cfg.device == "cuda" and not cuda_available and not allow_cpu:
        raise ConfigError(f"--device cuda: this machine has no CUDA GPU; use --device cpu (or set {ALLOW_CPU_ENV}=1)")
    device = "cuda" if cuda_available and cfg.device != "cpu" else "cpu"
    resolve_auto(cfg, world_size)
    if cfg.ddp_comm_hook != "none" and cfg.parallel != "ddp":
        raise ConfigError(f"--ddp-comm-hook: only applies to --parallel ddp, not {cfg.parallel} (one process runs)")
    if cfg.parallel == "none" and world_size > 1:
        raise ConfigError(f"--parallel none: runs one process but {world_size} were launched; use ddp or fsdp")
    if cfg.tp > 1 and (local_world_size % cfg.tp or world_size % cfg.tp):
        # A tp group must sit inside one node: its all-gathers and reduce-scatters run every layer (NVLink).
        raise ConfigError(f"--tp: {cfg.tp} does not divide the {local_world_size} GPUs (processes) per node"
                          + (f" and {world_size} in all" if world_size != local_world_size else "")
                          + "; use a divisor of the GPUs per node")
    dp = world_size // cfg.tp  # data-parallel ranks: a tp group shares one slice of the batch
    if isinstance(cfg.batch_size, int) and cfg.micro_batch is None and cfg.batch_size % (dp * cfg.grad_accum):
        unit = dp * cfg.grad_accum
        ranks = f"{dp} data-parallel ranks ({world_size} / --tp {cfg.tp})" if cfg.tp > 1 else f"{world_size} rank{'s' if world_size != 1 else ''}"
        raise ConfigError(f"--batch-size: {cfg.batch_size} is not divisible by {ranks} x --grad-accum "
                          f"{cfg.grad_accum}; use a multiple of {unit}")
    if cfg.precision == "fp8":
        if device != "cuda":
            if not allow_cpu:
                raise ConfigError("--precision fp8: needs a Hopper-or-newer GPU and this run has none; use bf16")
        elif cuda_capability is not None and cuda_capability < (9, 0):
            raise ConfigError(f"--precision fp8: needs a Hopper-or-newer GPU (compute capability 9.0+), this one "
                              f"is {cuda_capability[0]}.{cuda_capability[1]}; use bf16")
        elif not torchao_available:
            raise ConfigError("--precision fp8: needs torchao (pip install torchao); it is not installed; use bf16")
    if cfg.compile_scope == "model" and cfg.parallel == "fsdp":
        # FSDP2's per-block all-gather and reshard hooks would break the one graph at every block.
        raise ConfigError("--compile-scope model: FSDP shards per block, so compile per block; "
                          "use --compile-scope block with --parallel fsdp")
    if cfg.compile_mode != "default" and not cfg.compile:
        raise ConfigError(f"--compile-mode {cfg.compile_mode}: has no effect without --compile; add --compile")
    # max-autotune turns on CUDA graphs exactly as reduce-overhead does (torch.compile's mode table);
    # max-autotune-no-cudagraphs is the same search without them.
    if cfg.compile_mode in ("reduce-overhead", "max-autotune"):
        if device != "cuda" and not allow_cpu:
            raise ConfigError(f"--compile-mode {cfg.compile_mode}: CUDA graphs need a GPU; use --compile-mode default")
        if cfg.parallel != "none":
            # FSDP2 frees and re-gathers weights every step and DDP all-reduces from hooks: the
            # addresses a captured graph replays go stale.
            raise ConfigError(f"--compile-mode {cfg.compile_mode}: uses CUDA graphs, which work only with "
                              f"--parallel none, not {cfg.parallel}; use max-autotune-no-cudagraphs")
    if cfg.fsdp_shard_size is not None:
        if cfg.parallel != "fsdp":
            raise ConfigError(f"--fsdp-shard-size: only applies to --parallel fsdp, not {cfg.parallel}")
        if cfg.fsdp_shard_size < 1 or world_size % cfg.fsdp_shard_size:
            raise ConfigError(f"--fsdp-shard-size: {cfg.fsdp_shard_size} does not divide the {world_size} ranks; "
                              f"use a divisor such as {local_world_size}")
        if cfg.fsdp_shard_size % cfg.tp:
            raise ConfigError(f"--fsdp-shard-size: {cfg.fsdp_shard_size} GPUs is not a whole number of --tp "
                              f"{cfg.tp} groups; use a multiple of {cfg.tp}")
    if device == "cpu" and cfg.ddp_comm_hook == "bf16" and world_size > 1:
        raise ConfigError("--ddp-comm-hook bf16: torch's bf16 all-reduce hook needs NCCL (a GPU); "
                          "use fp16, powersgd or none on CPU")
    if cfg.ckpt_dir and world_size > 1 and not numpy_available:
        raise ConfigError("--ckpt-dir: multi-process checkpoints need numpy (torch.distributed.checkpoint "
                          "exchanges its plans with it); pip install numpy")
    return device
