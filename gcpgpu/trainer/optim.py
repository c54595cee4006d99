"""The optimizer step's parts: the learning-rate schedule, gradient sync and clipping, AdamW."""

from __future__ import annotations

import contextlib
import math

import torch

from gcpgpu.trainer.config import TrainConfig


def lr_at(step: int, cfg: TrainConfig) -> float:
    """Linear warm-up, then cosine decay to min_lr at the last step (nanoGPT's schedule)."""
    warmup = cfg.warmup_steps if cfg.warmup_steps is not None else min(100, cfg.steps // 10)
    min_lr = cfg.min_lr if cfg.min_lr is not None else cfg.lr / 10
    if step < warmup:
        return cfg.lr * (step + 1) / warmup
    progress = (step - warmup) / max(1, cfg.steps - warmup)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * progress)) * (cfg.lr - min_lr)


def grad_sync(model: torch.nn.Module, parallel: str, sync: bool):
    """DDP: skip the all-reduce on all but the last micro-step of an accumulation.

    FSDP keeps reduce-scattering every micro-step, as torchtitan does: skipping it
    (set_requires_gradient_sync(False)) would hold full, unsharded fp32 gradients on every GPU until
    the last micro-step (about 5 GB for 1.3b), which is what sharding is for avoiding. The memory
    planner counts sharded gradients for that reason.
    """
    if parallel == "ddp" and not sync:
        return model.no_sync()
    return contextlib.nullcontext()


def clip_grad_norm(params: list[torch.Tensor], max_norm: float) -> torch.Tensor:
    """Clip by the global norm; under FSDP2 the norm of the local shards is reduced to the full norm first."""
    grads = [p.grad for p in params if p.grad is not None]
    norm = torch.nn.utils.get_total_norm(grads, foreach=True)
    if hasattr(norm, "full_tensor"):
        norm = norm.full_tensor()
    torch.nn.utils.clip_grads_with_norm_(params, max_norm, norm, foreach=True)
    return norm


def build_optimizer(model: torch.nn.Module, cfg: TrainConfig, device_type: str) -> torch.optim.AdamW:
    """AdamW with weight decay on matrices only (not on norms); fused kernel on CUDA: one launch per step."""
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": cfg.weight_decay},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    impl = cfg.optimizer_impl
    if impl == "auto":
        impl = "fused" if device_type == "cuda" else "foreach"
    kwargs = {"fused": {"fused": True}, "foreach": {"foreach": True}, "for": {"foreach": False}}[impl]
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), eps=1e-8, **kwargs)
