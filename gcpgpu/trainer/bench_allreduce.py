"""All-reduce bandwidth, printed like nccl-tests' all_reduce_perf.

    torchrun --nproc-per-node 8 -m gcpgpu.trainer.bench_allreduce --min-bytes 8 --max-bytes 1G --factor 2

algbw = bytes / time; busbw = algbw x 2(n-1)/n, the figure to compare with published ones (it is what
each link carries in a ring, so it does not depend on the number of ranks). NCCL on GPUs, gloo on CPU.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from gcpgpu.trainer.metrics import busbw

PROG = "gcpgpu.trainer.bench_allreduce"
_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3}


def parse_size(text: str) -> int:
    """'8', '64K', '128M', '1G' (nccl-tests' binary units) -> bytes; raises ValueError."""
    t = text.strip().upper().removesuffix("B")
    unit = t[-1:] if t[-1:] in ("K", "M", "G") else ""
    number = t[: len(t) - len(unit)]
    if not number.isdigit():
        raise ValueError(f"{text!r} is not a size like 8, 64K, 128M or 1G")
    return int(number) * _UNITS[unit]


def sizes(min_bytes: int, max_bytes: int, factor: int) -> list[int]:
    """Message sizes from min to max, multiplying by factor (max included when reached)."""
    out, n = [], min_bytes
    while n <= max_bytes:
        out.append(n)
        n *= factor
    return out


def format_header() -> str:
    return f"{'#':<1}{'size':>12} {'count':>12} {'type':>6} {'redop':>6} {'time(us)':>10} {'algbw(GB/s)':>12} {'busbw(GB/s)':>12} {'#wrong':>7}"


def format_row(size: int, count: int, dtype: str, seconds: float, world_size: int, wrong: int) -> str:
    alg = size / seconds / 1e9
    return (f"{size:>13} {count:>12} {dtype:>6} {'sum':>6} {seconds * 1e6:>10.1f} {alg:>12.2f} "
            f"{busbw(alg, world_size):>12.2f} {wrong:>7}")


def _fail(message: str) -> None:
    if os.environ.get("RANK", "0") == "0":
        print(f"{PROG}: error: {message}", file=sys.stderr, flush=True)
    sys.exit(2)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        _fail(message)


def main(argv: list[str] | None = None) -> int:
    p = _Parser(prog=f"python -m {PROG}", description="All-reduce bandwidth like nccl-tests.")
    p.add_argument("--min-bytes", default="8", help="smallest message (default 8)")
    p.add_argument("--max-bytes", default="1G", help="largest message (default 1G)")
    p.add_argument("--factor", type=int, default=2, help="size multiplier between rows (default 2)")
    p.add_argument("--iters", type=int, default=20, help="timed all-reduces per size (default 20)")
    p.add_argument("--warmup", type=int, default=5, help="untimed all-reduces per size (default 5)")
    p.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    p.add_argument("--timeout", type=float, default=300.0, help="seconds before a stuck collective fails")
    args = p.parse_args(argv)
    try:
        lo, hi = parse_size(args.min_bytes), parse_size(args.max_bytes)
    except ValueError as e:
        _fail(f"--min-bytes/--max-bytes: {e}")
    if args.factor < 2:
        _fail(f"--factor: must be at least 2, got {args.factor}")
    if lo < 1 or hi < lo:
        _fail(f"--min-bytes/--max-bytes: need 1 <= min <= max, got {lo} and {hi}")
    if args.iters < 1 or args.warmup < 0:
        _fail("--iters must be at least 1 and --warmup at least 0")

    import warnings

    warnings.filterwarnings("ignore", message="Failed to initialize NumPy")  # not needed here
    import torch
    import torch.distributed as dist

    from gcpgpu.trainer.dist import init_process_group, leave_process_group, read_env

    env = read_env()
    device_type = "cuda" if torch.cuda.is_available() else "cpu"
    init_process_group(env, device_type, args.timeout)
    device = torch.device("cuda", env.local_rank) if device_type == "cuda" else torch.device("cpu")
    dtype = getattr(torch, args.dtype)
    elem = torch.tensor([], dtype=dtype).element_size()
    backend = dist.get_backend()

    def sync() -> None:
        if device_type == "cuda":
            torch.cuda.synchronize(device)

    if env.is_main:
        print(f"# {PROG}: {env.world_size} ranks, backend {backend}, device "
              f"{torch.cuda.get_device_name(device) if device_type == 'cuda' else 'cpu'}, dtype {args.dtype}")
        if env.world_size == 1:
            print("# one rank: nothing crosses a link, busbw is 0; launch under torchrun with more processes")
        print(format_header(), flush=True)
    for size in sizes(lo, hi, args.factor):
        count = max(1, size // elem)
        nbytes = count * elem
        buf = torch.ones(count, dtype=dtype, device=device)
        # Correctness once: ones summed over n ranks must be n everywhere.
        dist.all_reduce(buf)
        wrong = int((buf != env.world_size).sum().item())
        for _ in range(args.warmup):
            dist.all_reduce(buf)
        sync()
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(args.iters):
            dist.all_reduce(buf)
        sync()
        elapsed = torch.tensor([(time.perf_counter() - t0) / args.iters], dtype=torch.float64)
        dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)  # the slowest rank sets the pace, as in nccl-tests
        if env.is_main:
            print(format_row(nbytes, count, args.dtype, float(elapsed), env.world_size, wrong), flush=True)
        del buf
    leave_process_group(env)  # in order, so a multi-node run does not end with a TCPStore trace
    return 0


if __name__ == "__main__":
    sys.exit(main())
