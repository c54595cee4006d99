"""Benchmark: the bundled trainer against a plain hand-written PyTorch loop, same model and batch, same run.

    python tests/bench/trainer.py [--model tiny] [--steps 20] [--trials 11] [--precision fp32] [--compile]

Prints tokens/s per device, MFU (GPU only), peak memory, the trainer's data-wait share, and both step
times side by side: medians over repeated trials, trainer and plain loop interleaved (the order
alternates) so that drift in the machine's speed hits both alike; the headline is the median of the
per-trial ratios. Target on CPU: within 5 %.
Not collected by pytest (no test_ prefix); everything runs under __main__.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import statistics
import sys
import time
from pathlib import Path


def plain_loop(model_name: str, batch: int, seq_len: int, vocab: int, precision: str, steps: int, warmup: int,
               compile_model: bool, device_type: str, seed: int) -> tuple[list[float], int | None]:
    """The loop anyone would write: fixed batch, forward, backward, clip, AdamW; per-step time after warm-up."""
    import torch

    from gcpgpu.trainer.model import GPT, GPTConfig

    device = torch.device("cuda" if device_type == "cuda" else "cpu")
    torch.manual_seed(seed)
    with device:
        model = GPT(GPTConfig.from_size(model_name, vocab, seq_len))
    if compile_model:
        model = torch.compile(model)
    params = list(model.parameters())
    opt = torch.optim.AdamW([{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
                             {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}],
                            lr=6e-4, betas=(0.9, 0.95), **({"fused": True} if device_type == "cuda" else {"foreach": True}))
    x = torch.randint(vocab, (batch, seq_len), device=device)
    y = torch.randint(vocab, (batch, seq_len), device=device)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    autocast = torch.autocast(device_type, dtype=dtype) if dtype else contextlib.nullcontext()
    if device_type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    times = []
    for step in range(steps):
        t0 = time.perf_counter()
        with autocast:
            loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss.item()  # a sync per step, as the trainer's per-step logging does
        if step >= warmup:
            times.append(time.perf_counter() - t0)
    peak = torch.cuda.max_memory_allocated() if device_type == "cuda" else None
    return times, peak


def trainer_run(args: argparse.Namespace, vocab: int, warmup: int):
    from gcpgpu.trainer.config import TrainConfig, check
    from gcpgpu.trainer.train import train

    cfg = TrainConfig(model=args.model, data="synthetic", vocab_size=vocab, steps=args.steps,
                      batch_size=args.batch_size, seq_len=args.seq_len, precision=args.precision,
                      compile=args.compile, timing_warmup=warmup, warmup_steps=0, lr=6e-4, quiet=True,
                      log_every=1, seed=args.seed)
    check(cfg)
    with contextlib.redirect_stdout(io.StringIO()):  # the trainer's own summary line; we print ours
        return train(cfg)


def main() -> int:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    import warnings

    warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
    import torch

    from gcpgpu.trainer.metrics import fmt_bytes, fmt_rate, mfu, peak_flops
    from gcpgpu.trainer.sizes import flops_per_token, get_size, param_count

    cuda = torch.cuda.is_available()
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="124m" if cuda else "tiny")
    p.add_argument("--steps", type=int, default=20, help="steps per trial (default 20)")
    p.add_argument("--trials", type=int, default=11, help="interleaved trials of each (default 11)")
    p.add_argument("--batch-size", type=int, default=16 if cuda else 8)
    p.add_argument("--seq-len", type=int, default=1024 if cuda else 256)
    p.add_argument("--vocab-size", type=int, default=None, help="default 50304 on GPU, 256 (bytes) on CPU")
    p.add_argument("--precision", default="bf16" if cuda else "fp32", choices=("fp32", "bf16", "fp16"))
    p.add_argument("--compile", action="store_true", help="compile both (the trainer per block, the loop whole)")
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--threads", type=int, default=None if cuda else 1,
                   help="CPU threads (default 1 on CPU: a shared machine's load then slows both runs in "
                        "proportion, instead of stalling multi-thread barriers at random)")
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device_type = "cuda" if cuda else "cpu"
    vocab = args.vocab_size or (50304 if cuda else 256)
    warmup = 10 if args.compile else 3
    if args.steps <= warmup + 2:
        p.error(f"--steps must be more than {warmup + 2} (the first {warmup} of each trial are warm-up)")

    size = get_size(args.model)
    fpt = flops_per_token(size, vocab, args.seq_len)
    tokens = args.batch_size * args.seq_len
    name = torch.cuda.get_device_name() if cuda else f"cpu, {torch.get_num_threads()} thread(s)"
    peak = peak_flops(name) if cuda else None
    print(f"gcpgpu trainer benchmark: model {args.model} ({param_count(size, vocab, args.seq_len) / 1e6:.1f}M params), "
          f"batch {args.batch_size} x {args.seq_len} tokens, vocab {vocab}, {args.precision}"
          f"{', compiled' if args.compile else ''}, {name}, torch {torch.__version__}")
    print(f"{args.trials} interleaved trials x {args.steps} steps each; the first {warmup} steps of every trial "
          f"are warm-up and left out; medians throughout", flush=True)

    trainer_medians, plain_medians, data_waits, trainer_mem, plain_mem = [], [], [], None, None
    for trial in range(args.trials):
        order = ("trainer", "plain") if trial % 2 == 0 else ("plain", "trainer")
        for which in order:
            if which == "trainer":
                r = trainer_run(args, vocab, warmup)
                trainer_medians.append(statistics.median(r.step_times))
                data_waits.append(r.data_wait_frac)
                trainer_mem = r.peak_mem_bytes
            else:
                times, plain_mem = plain_loop(args.model, args.batch_size, args.seq_len, vocab, args.precision,
                                              args.steps, warmup, args.compile, device_type, args.seed)
                plain_medians.append(statistics.median(times))
        print(f"  trial {trial + 1}: trainer {trainer_medians[-1] * 1e3:.2f} ms, plain {plain_medians[-1] * 1e3:.2f} ms, "
              f"ratio {trainer_medians[-1] / plain_medians[-1]:.3f}", flush=True)

    t, q = statistics.median(trainer_medians), statistics.median(plain_medians)
    # Each trial's pair ran back to back, so its ratio sees the same machine load: the headline figure.
    ratio = statistics.median(a / b for a, b in zip(trainer_medians, plain_medians, strict=True))
    tok_t, tok_q = tokens / t, tokens / q

    def mfu_s(tok_s: float) -> str:
        if not cuda:
            return "n/a (cpu)"
        m = mfu(tok_s, fpt, peak)
        return "n/a (unknown GPU)" if m is None else f"{m * 100:.1f}%"

    if cuda:
        mem_t, mem_q = fmt_bytes(trainer_mem), fmt_bytes(plain_mem)
    else:
        import resource

        mem_t = f"{fmt_bytes(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)} RSS"
        mem_q = "(same process: peak RSS is per process)"
    rows = [
        ("step time (median)", f"{t * 1e3:.2f} ms", f"{q * 1e3:.2f} ms"),
        ("tokens/s per device", fmt_rate(tok_t), fmt_rate(tok_q)),
        ("MFU", mfu_s(tok_t), mfu_s(tok_q)),
        ("data-wait share", f"{statistics.median(data_waits) * 100:.2f}%", "0 (fixed batch)"),
        ("peak memory", mem_t, mem_q),
    ]
    print(f"\n{'':<22}{'trainer':<28}{'plain loop':<20}")
    for label, a, b in rows:
        print(f"{label:<22}{a:<28}{b:<20}")
    verdict = "within" if ratio <= 1.05 else "OUTSIDE"
    print(f"\ntrainer / plain step time, median of the per-trial ratios = {ratio:.3f} ({verdict} the 5 % target); "
          f"ratio of the medians = {t / q:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
