"""`--batch-size auto` and `--micro-batch auto|N`: the batch from the memory plan (pure Python, no torch).

The largest micro-batch per rank whose planned peak, grown by AUTO_MARGIN, fits in the device's usable
memory (the plan's own RESERVED_FRACTION held back for the CUDA context, NCCL and fragmentation).
Gradient accumulation then makes up the global batch:
- `--micro-batch auto`: the largest fitting micro-batch that divides the per-rank share of --batch-size;
- `--micro-batch N`: that micro-batch, accumulation = batch / (ranks x N);
- `--batch-size auto`: ranks x --grad-accum x the largest fitting micro-batch.
"""

from __future__ import annotations

from dataclasses import dataclass

from gcpgpu.trainer.config import ConfigError, TrainConfig, parse_bytes, resolve_auto
from gcpgpu.trainer.memory import RESERVED_FRACTION, GiB, plan_memory

# The plan came within 0.89-1.08 of measured CUDA reserved peaks (issue 17's runs): 10 % covers the worst.
AUTO_MARGIN = 0.10
MAX_MICRO_BATCH = 4096  # the search's ceiling for --batch-size auto


@dataclass
class BatchChoice:
    batch_size: int
    grad_accum: int
    micro_batch: int
    planned_bytes: int | None  # the plan's per-rank peak at this micro-batch; None when nothing was planned
    budget_bytes: int | None
    line: str  # what the trainer prints at start


def run_plan(cfg: TrainConfig, world_size: int, batch_size: int, vocab_size: int, accum: int) -> int:
    """The memory plan's per-rank peak for this run (cfg resolved by resolve_auto) at this batch."""
    return plan_memory(cfg.model, batch_size, cfg.seq_len, cfg.precision, cfg.parallel, world_size, None,
                       grad_accum=accum, vocab_size=vocab_size, tied=cfg.tie_embeddings, loss_chunk=cfg.loss_chunk,
                       tp=cfg.tp, compiled=cfg.compile and cfg.compile_scope == "model",
                       ).total_for(cfg.ac_every, selective=cfg.ac == "selective")


def planned_bytes(cfg: TrainConfig, world_size: int, micro: int, vocab_size: int, accum: int = 1) -> int:
    """The memory plan's per-rank peak for this run at `micro` sequences per micro-step."""
    return run_plan(cfg, world_size, world_size // cfg.tp * accum * micro, vocab_size, accum)


def _size(n: float) -> str:
    return f"{n / GiB:.1f} GiB" if n >= GiB else f"{n / 2**20:.1f} MiB"


def _ranks(n: int) -> str:
    return f"{n} rank" if n == 1 else f"{n} ranks"


def fits(planned: int, budget: int) -> bool:
    return planned * (1 + AUTO_MARGIN) <= budget * (1 - RESERVED_FRACTION)


def choose(cfg: TrainConfig, world_size: int, vocab_size: int, device_memory: int | None) -> BatchChoice | None:
    """Resolve auto/micro-batch settings into (batch, accumulation, micro-batch); None when there are none.

    Resolves cfg's launch-dependent 'auto' settings first (resolve_auto), so the plan is of the run that
    will happen. Raises ConfigError naming the option when nothing fits or the numbers do not divide.
    """
    resolve_auto(cfg, world_size)
    dp = world_size // cfg.tp  # data-parallel ranks: a tensor-parallel group shares its micro-batch
    auto_batch, micro = cfg.batch_size == "auto", cfg.micro_batch
    if not auto_batch and micro is None:
        return None
    budget = parse_bytes(cfg.memory_budget) if cfg.memory_budget else device_memory
    if micro != "auto" and not auto_batch:  # --micro-batch N: no planning, only the arithmetic
        unit = dp * micro
        if cfg.batch_size % unit:
            raise ConfigError(f"--micro-batch: {micro} x {_ranks(dp)} does not divide --batch-size "
                              f"{cfg.batch_size}; use a batch that is a multiple of {unit}")
        accum = cfg.batch_size // unit
        return BatchChoice(cfg.batch_size, accum, micro, None, budget,
                           f"batch {cfg.batch_size} = {_ranks(dp)} x micro-batch {micro} x {accum} accum")
    opt = "--batch-size auto" if auto_batch else "--micro-batch auto"
    if budget is None:
        raise ConfigError(f"{opt}: needs the device's memory; this run has no GPU, so give --memory-budget "
                          "(e.g. 16GiB)")
    if auto_batch:
        candidates = range(1, MAX_MICRO_BATCH + 1)
        accum = cfg.grad_accum
    else:
        if cfg.batch_size % dp:
            raise ConfigError(f"--batch-size: {cfg.batch_size} does not split over {_ranks(dp)}; "
                              f"use a multiple of {dp}")
        per_rank = cfg.batch_size // dp
        candidates = [m for m in range(1, per_rank + 1) if per_rank % m == 0]
        accum = None
    best, best_bytes = None, None
    for m in candidates:  # the plan grows with the micro-batch: stop at the first that does not fit
        b = planned_bytes(cfg, world_size, m, vocab_size, accum or (cfg.batch_size // dp // m))
        if not fits(b, budget):
            break
        best, best_bytes = m, b
    if best is None:
        smallest = planned_bytes(cfg, world_size, 1, vocab_size)
        raise ConfigError(f"{opt}: not even micro-batch 1 fits: the plan needs {_size(smallest)} + "
                          f"{AUTO_MARGIN:.0%} margin of {_size(budget)} x {1 - RESERVED_FRACTION:.2f} usable; "
                          "try --ac full, --parallel fsdp or a shorter --seq-len")
    if auto_batch:
        batch = dp * accum * best
    else:
        batch, accum = cfg.batch_size, cfg.batch_size // (dp * best)
    line = (f"{opt}: micro-batch {best} per rank (the memory plan: {_size(best_bytes)}, +{AUTO_MARGIN:.0%} "
            f"margin, of {_size(budget)} x {1 - RESERVED_FRACTION:.2f} usable) x {_ranks(dp)} x "
            f"{accum} accum = batch {batch}")
    return BatchChoice(batch, accum, best, best_bytes, budget, line)


def apply(cfg: TrainConfig, world_size: int, vocab_size: int, device_memory: int | None) -> str | None:
    """Resolve the batch settings into cfg in place (batch_size, grad_accum ints; micro_batch None); the start line."""
    choice = choose(cfg, world_size, vocab_size, device_memory)
    if choice is None:
        return None
    cfg.batch_size, cfg.grad_accum, cfg.micro_batch = choice.batch_size, choice.grad_accum, None
    return choice.line
