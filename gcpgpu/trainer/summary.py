"""What a run measured (RunResult) and the summary it prints and logs at the end."""

from __future__ import annotations

from dataclasses import dataclass, field

from gcpgpu.trainer.config import PROG, TrainConfig
from gcpgpu.trainer.dist import DistEnv
from gcpgpu.trainer.metrics import JsonLog, fmt_bytes, fmt_rate


@dataclass
class RunResult:
    """What a run did and measured; train() returns it so tests and the benchmark need no log parsing."""

    steps_done: int = 0
    stopped: bool = False  # by SIGTERM, after saving a checkpoint
    losses: dict[int, float] = field(default_factory=dict)  # step index -> loss, for logged steps
    step_time_s: float | None = None  # median after warm-up
    tokens_per_s_per_gpu: float | None = None
    mfu: float | None = None
    data_wait_frac: float | None = None
    peak_mem_bytes: int | None = None
    peak_mem_kind: str = ""
    mem_detail: dict[str, int] = field(default_factory=dict)  # CUDA: peak allocated, allocator retries
    planned_mem_bytes: int | None = None
    step_times: list[float] = field(default_factory=list)
    val_loss: float | None = None  # the last validation loss (--eval-every)
    val_losses: dict[int, float] = field(default_factory=dict)  # step index -> validation loss
    ckpt_mode: str | None = None  # sync or async; None without --ckpt-dir
    resumed: dict | None = None  # the --log-json record of the checkpoint --resume started from
    checkpoints: list[dict] = field(default_factory=list)  # each complete save's record (checkpointer.SaveRecord)
    ckpt_incomplete: bool = False  # the last save had not reached --ckpt-dir when a SIGTERM's grace ran out


def write_summary(env: DistEnv, cfg: TrainConfig, r: RunResult, jlog_path: str | None) -> None:
    if not env.is_main:
        return
    if r.step_time_s is None:
        line = f"{PROG}: {r.steps_done} steps; too few after the {cfg.timing_skip} warm-up steps to report speed"
    else:
        mfu_s = "n/a (cpu)" if r.peak_mem_kind == "cpu_rss" else "n/a (unknown GPU)" if r.mfu is None else f"{r.mfu * 100:.1f}%"
        mem_s = fmt_bytes(r.peak_mem_bytes) + (" RSS" if r.peak_mem_kind == "cpu_rss" else " reserved")
        if r.mem_detail:
            mem_s += (f" (allocated {fmt_bytes(r.mem_detail['peak_allocated_bytes'])}, "
                      f"{r.mem_detail['alloc_retries']} allocator retries)")
        if r.planned_mem_bytes:
            mem_s += f" (planner: {fmt_bytes(r.planned_mem_bytes)}, measured/planned {r.peak_mem_bytes / r.planned_mem_bytes:.2f})"
        line = (f"{PROG}: median over {len(r.step_times)} steps: {r.step_time_s * 1e3:.1f} ms/step, "
                f"{fmt_rate(r.tokens_per_s_per_gpu)} tok/s/gpu, MFU {mfu_s}, data wait {r.data_wait_frac * 100:.1f}%, "
                f"peak memory {mem_s}")
    if r.val_loss is not None:
        line += f"; validation loss {r.val_loss:.4f}"
    blocked, saved = (sum(c[k] for c in r.checkpoints) for k in ("blocked_s", "save_s"))
    if r.checkpoints:
        line += (f"; {len(r.checkpoints)} checkpoints ({r.ckpt_mode}) blocked the steps {blocked:.2f} s "
                 f"and took {saved:.2f} s to save")
    print(line, flush=True)
    if jlog_path:
        JsonLog(jlog_path, True).write({
            "kind": "summary", "step": r.steps_done - 1, "steps_timed": len(r.step_times),
            "step_time_s": r.step_time_s, "tokens_per_s": r.tokens_per_s_per_gpu, "mfu": r.mfu,
            "data_wait_frac": r.data_wait_frac, "peak_mem_bytes": r.peak_mem_bytes, "peak_mem_kind": r.peak_mem_kind,
            "planned_mem_bytes": r.planned_mem_bytes, "stopped": r.stopped, "val_loss": r.val_loss,
            "batch_size": cfg.batch_size, "grad_accum": cfg.grad_accum, "seq_len": cfg.seq_len,
            "ckpt_mode": r.ckpt_mode, "checkpoints": len(r.checkpoints), "ckpt_blocked_s": blocked,
            "ckpt_save_s": saved, **r.mem_detail})
