"""NVTX ranges and a step-window profiler (nsys capture range on CUDA, a torch.profiler trace on CPU)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import torch


class Ranges:
    """Named ranges around data, forward, backward and optimizer: NVTX on CUDA (what nsys shows) and
    record_function while a torch.profiler trace is recording; nothing at all otherwise."""

    def __init__(self, nvtx: bool):
        self.nvtx = nvtx
        self.record = False  # turned on by StepProfiler while a torch.profiler trace runs

    @contextlib.contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        if self.nvtx:
            torch.cuda.nvtx.range_push(name)
        rec = torch.profiler.record_function(name) if self.record else contextlib.nullcontext()
        try:
            with rec:
                yield
        finally:
            if self.nvtx:
                torch.cuda.nvtx.range_pop()


class StepProfiler:
    """Profile steps first..last inclusive.

    CUDA: torch.cuda.profiler.start()/stop(), for `nsys profile --capture-range=cudaProfilerApi`.
    CPU: a torch.profiler trace in `out_dir` (open it with TensorBoard or chrome://tracing).
    """

    def __init__(self, window: tuple[int, int] | None, device_type: str, out_dir: str, rank: int, ranges: Ranges):
        self.window = window
        self.device_type = device_type
        self.out_dir = Path(out_dir)
        self.rank = rank
        self.ranges = ranges
        self._prof: torch.profiler.profile | None = None
        self.trace_path: Path | None = None

    def step_begin(self, step: int) -> None:
        if self.window is None or step != self.window[0]:
            return
        if self.device_type == "cuda":
            torch.cuda.synchronize()  # start the capture at a clean step boundary
            torch.cuda.profiler.start()
        else:
            self._prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                                record_shapes=True)
            self._prof.__enter__()
            self.ranges.record = True

    def step_end(self, step: int) -> None:
        if self.window is None or step != self.window[1]:
            return
        if self.device_type == "cuda":
            torch.cuda.synchronize()
            torch.cuda.profiler.stop()
        elif self._prof is not None:
            self.ranges.record = False
            self._prof.__exit__(None, None, None)
            self.out_dir.mkdir(parents=True, exist_ok=True)
            # The .pt.trace.json suffix is what TensorBoard's profiler plugin looks for.
            self.trace_path = self.out_dir / f"rank{self.rank}_steps{self.window[0]}-{self.window[1]}.pt.trace.json"
            self._prof.export_chrome_trace(str(self.trace_path))
            self._prof = None
