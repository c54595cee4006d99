"""Validation loss on the held-out tail of the data (`--eval-every N --eval-steps K`)."""

from __future__ import annotations

import contextlib

import torch
import torch.distributed as dist

from gcpgpu.trainer.data import Batches
from gcpgpu.trainer.parallel_tp import local_loss, loss_context


def should_eval(step: int, every: int, last: int) -> bool:
    """After every `every`-th step and after the last one (steps counted from 1); never when every is 0."""
    return every > 0 and (step % every == 0 or step == last)


@torch.no_grad()
def validation_loss(model: torch.nn.Module, batches: Batches, steps: int, *, parallel: str,
                    autocast: contextlib.AbstractContextManager, device: torch.device, tp: int = 1) -> float:
    """Mean loss over the same `steps` held-out micro-batches every time (so evaluations compare), all ranks.

    DDP's wrapper is bypassed (nothing to all-reduce without a backward); FSDP's root is called as is, since
    its hooks gather the weights.
    """
    batches.step = 0
    net = model.module if parallel == "ddp" else model
    total = torch.zeros((), device=device, dtype=torch.float32)
    for _ in range(steps):
        x, y = batches.next()
        with autocast, loss_context(tp):
            total += local_loss(net(x, y)).float()
    count = steps
    if dist.is_initialized():
        dist.all_reduce(total)  # SUM: gloo has no AVG
        count *= dist.get_world_size()
    return total.item() / count
