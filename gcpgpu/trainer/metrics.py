"""Honest speed figures: tokens/s per GPU, MFU against the detected GPU's dense bf16 peak, memory, JSON lines."""

from __future__ import annotations

import json
import resource
import statistics
import sys
from dataclasses import dataclass, field
from typing import IO, Any

# Dense (not 2:4 sparse) bf16 tensor-core peaks in FLOP/s, matched on torch.cuda.get_device_name().
# Order matters: the more specific names first ("GB200" contains "B200", "GH200" contains "H200").
# Anything else gets no MFU rather than a guess. NVIDIA's datasheets print the sparse figure; these are
# half of it. Sources: NVIDIA H100/H200/A100/L4 datasheets; B200 (HGX, 1000 W) and GB200 (1200 W) from
# NVIDIA's Blackwell figures as tabulated in glennklockwood.com/garden/processors/B200 (unverified
# against a datasheet PDF). MFU under --precision fp8 is divided by these bf16 peaks too, so runs of
# one model compare by MFU across precisions (torchtitan reports it the same way).
PEAK_BF16_FLOPS: tuple[tuple[str, float], ...] = (
    ("GB200", 2.5e15),
    ("B200", 2.25e15),
    ("H100 PCIe", 756e12),
    ("H100 NVL", 835e12),
    ("GH200", 989e12),  # Grace + an H100-class GPU
    ("H100", 989e12),  # SXM, e.g. "NVIDIA H100 80GB HBM3"
    ("H200", 989e12),  # the same chip as H100 SXM with more memory
    ("A100", 312e12),
    ("L4", 121e12),  # G2 VMs; "NVIDIA L4" (242 TFLOP/s is the sparse figure)
)


def peak_flops(device_name: str | None) -> float | None:
    """Dense bf16 peak for a CUDA device name; None for CPUs and GPUs not in the table."""
    if not device_name:
        return None
    for key, flops in PEAK_BF16_FLOPS:
        if key.lower() in device_name.lower():
            return flops
    return None


def mfu(tokens_per_s_per_gpu: float, flops_per_token: float, peak: float | None) -> float | None:
    """Model FLOPs utilization: achieved model FLOP/s over the peak; None when the peak is unknown."""
    if peak is None or tokens_per_s_per_gpu <= 0:
        return None
    return tokens_per_s_per_gpu * flops_per_token / peak


def busbw(algbw: float, world_size: int) -> float:
    """nccl-tests' all-reduce bus bandwidth: algbw x 2(n-1)/n, comparable across world sizes."""
    return algbw * 2 * (world_size - 1) / world_size if world_size > 1 else 0.0


def peak_memory(device_type: str) -> tuple[int, str]:
    """(bytes, kind): CUDA's peak RESERVED bytes (what the caching allocator took from the GPU, which is
    what runs out), or the process's peak RSS on CPU (not comparable)."""
    if device_type == "cuda":
        import torch

        return torch.cuda.max_memory_reserved(), "cuda_reserved"
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return (rss if sys.platform == "darwin" else rss * 1024), "cpu_rss"


def cuda_memory_detail() -> dict[str, int]:
    """Beside the reserved peak, as torchtitan logs it: the allocated peak and the allocator's retries
    (cudaMalloc failed, the cache was flushed and the call retried: a sign of running near the limit)."""
    import torch

    stats = torch.cuda.memory_stats()
    return {"peak_allocated_bytes": int(stats.get("allocated_bytes.all.peak", 0)),
            "alloc_retries": int(stats.get("num_alloc_retries", 0)),
            "ooms": int(stats.get("num_ooms", 0))}


@dataclass
class SpeedWindow:
    """Step times after warm-up; the summary uses medians so one slow step (a checkpoint) does not skew it."""

    step_times: list[float] = field(default_factory=list)
    data_fracs: list[float] = field(default_factory=list)

    def add(self, step_time: float, data_frac: float, steps: int = 1) -> None:
        # An interval of k steps counts k times, so medians weigh steps, not log lines.
        self.step_times.extend([step_time] * steps)
        self.data_fracs.extend([data_frac] * steps)

    def median_step_time(self) -> float | None:
        return statistics.median(self.step_times) if self.step_times else None

    def median_data_frac(self) -> float | None:
        return statistics.median(self.data_fracs) if self.data_fracs else None


class JsonLog:
    """JSON lines on rank 0 (other ranks get a no-op), flushed per line so a killed run keeps its log."""

    def __init__(self, path: str | None, enabled: bool):
        self._f: IO[str] | None = open(path, "a", buffering=1) if (path and enabled) else None

    def write(self, record: dict[str, Any]) -> None:
        if self._f is not None:
            self._f.write(json.dumps(record) + "\n")

    def close(self) -> None:
        if self._f is not None:
            self._f.close()
            self._f = None


def fmt_bytes(n: float | None) -> str:
    if n is None:
        return "n/a"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.1f} TiB"


def fmt_rate(n: float) -> str:
    return f"{n / 1e6:.2f}M" if n >= 1e6 else f"{n / 1e3:.1f}k" if n >= 1e3 else f"{n:.0f}"
