"""`gcpgpu plan`: estimates made before anything is created or run."""

from __future__ import annotations

import click

from gcpgpu.errors import UsageProblem
from gcpgpu.output import emit
from gcpgpu.settings import Settings
from gcpgpu.trainer.config import LOSS_CHUNK_TOKENS, TrainConfig

GIB = 1024**3


@click.group()
def plan() -> None:
    """Estimate before you spend: memory per GPU for a training setup."""


# Every default is the trainer's own (TrainConfig, no torch import), so `plan memory` and
# `python -m gcpgpu.trainer` given the same flags describe the same run.
_TRAINER = TrainConfig()


@plan.command()
@click.option("--model", default=_TRAINER.model, show_default=True, help="Model size: tiny, 124m, 350m, 774m or 1.3b.")
@click.option("--batch-size", type=int, default=_TRAINER.batch_size, show_default=True,
              help="Global batch in sequences (as the trainer's --batch-size).")
@click.option("--seq-len", type=int, default=_TRAINER.seq_len, show_default=True, help="Tokens per sequence.")
@click.option("--precision", default=_TRAINER.precision, show_default=True, help="fp32, bf16, fp16 or fp8.")
@click.option("--parallel", default=_TRAINER.parallel, show_default=True,
              help="auto (ddp on more than one GPU, else none), none, ddp or fsdp (FSDP counts as ZeRO-3).")
@click.option("--gpus", type=int, help="GPUs in all (default: the machine type's GPUs, else 1).")
@click.option("--grad-accum", type=int, default=_TRAINER.grad_accum, show_default=True,
              help="Gradient accumulation steps.")
@click.option("--loss-chunk", type=click.IntRange(min=0), default=LOSS_CHUNK_TOKENS, show_default=True,
              help="Tokens per chunk of the output layer + loss (0: all logits at once, as the trainer does "
                   "when it compiles the whole model: one process with --compile).")
@click.option("--machine-type", help="Check the fit against this machine's GPU memory (from the catalog).")
@click.pass_obj
def memory(settings: Settings, model: str, batch_size: int, seq_len: int, precision: str, parallel: str,
           gpus: int | None, grad_accum: int, loss_chunk: int, machine_type: str | None) -> None:
    """Per-GPU parameters, gradients, optimizer state and activations (with and without activation
    checkpointing), whether it fits, and the setting to use if it does not.

    Options and defaults are the trainer's: the same flags plan the run `python -m gcpgpu.trainer`
    (or torchrun over --gpus processes) would make.
    """
    from gcpgpu import catalog
    from gcpgpu.trainer import memory as mem
    from gcpgpu.trainer.sizes import SIZES

    if model.lower() not in SIZES:
        raise UsageProblem(f"--model {model!r} must be one of {', '.join(SIZES)}")
    if precision not in mem.PRECISIONS:
        raise UsageProblem(f"--precision {precision!r} must be one of {', '.join(mem.PRECISIONS)}")
    if parallel not in ("auto", *mem.PARALLELS):
        raise UsageProblem(f"--parallel {parallel!r} must be one of auto, {', '.join(mem.PARALLELS)}")
    mt = catalog.get_machine_type(machine_type) if machine_type else None
    gpus = gpus if gpus is not None else (mt.gpu_count if mt else 1)
    for flag, value in (("--batch-size", batch_size), ("--seq-len", seq_len), ("--gpus", gpus), ("--grad-accum", grad_accum)):
        if value < 1:
            raise UsageProblem(f"{flag} {value} must be at least 1")
    if batch_size % (gpus * grad_accum):
        raise UsageProblem(f"--batch-size {batch_size} must be divisible by --gpus x --grad-accum = {gpus * grad_accum}")
    if parallel == "auto":  # as the trainer resolves it once it knows how many processes run
        parallel = "ddp" if gpus > 1 else "none"
    if parallel == "none" and gpus > 1:
        raise UsageProblem(f"--parallel none runs on one GPU, not --gpus {gpus}; use ddp or fsdp")
    gpu_bytes = mt.gpu.memory_gib * GIB if mt else None
    result = mem.plan_memory(model.lower(), batch_size, seq_len, precision, parallel, gpus, gpu_bytes,
                             grad_accum=grad_accum, loss_chunk=loss_chunk)
    if settings.format != "table":
        emit({**result.to_dict(), "machine_type": mt.name if mt else None})
        return
    title = f"Memory per GPU: {result.model}" + (f" on {mt.name} ({mt.gpu.model})" if mt else "")
    emit([{"item": k, "value": v} for k, v in result.rows()], [("item", "ITEM"), ("value", "PER GPU")], title=title)
