"""Token streams and deterministic, rank-sharded batches.

Every source is one flat token tensor (memory-mapped when it comes from a file). Step s draws the
same global batch of B windows on every rank from a generator seeded by (seed, s); rank r keeps its
slice. So the data depends only on the step, never on the world size or on how often the job was
restarted, and the loader's whole position is the step number.
"""

from __future__ import annotations

import mmap
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import torch

from gcpgpu.trainer.config import ConfigError
from gcpgpu.trainer.sizes import DEFAULT_VOCAB_SIZE

SYNTHETIC_TOKENS = 1 << 22  # 4M random tokens: plenty of distinct windows, 16 MB of int32


@dataclass
class TokenSource:
    tokens: torch.Tensor  # 1-D integer tensor, possibly a view of a memory map
    vocab_size: int
    description: str


def _mmap_tokens(path: Path, dtype: torch.dtype) -> torch.Tensor:
    with open(path, "rb") as f:
        # ACCESS_COPY gives a writable private mapping, so torch.frombuffer needs no copy and the file is
        # never modified; pages are read on demand.
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
    return torch.frombuffer(mm, dtype=dtype)


def open_source(data: str, *, seq_len: int, data_dtype: str = "uint16", tokenizer: str = "byte",
                vocab_size: int | None = None, seed: int = 0) -> TokenSource:
    """Open 'synthetic', a .bin token file or a text file; raises ConfigError for unusable data."""
    if data == "synthetic":
        vocab = vocab_size or DEFAULT_VOCAB_SIZE
        g = torch.Generator().manual_seed(seed)
        tokens = torch.randint(vocab, (SYNTHETIC_TOKENS,), generator=g, dtype=torch.int32)
        src = TokenSource(tokens, vocab, f"synthetic ({vocab} token ids)")
    else:
        path = Path(data)
        if path.stat().st_size == 0:
            raise ConfigError(f"--data: {data} is empty")
        if path.suffix == ".bin":
            dtype = {"uint16": torch.uint16, "uint32": torch.uint32}[data_dtype]
            if path.stat().st_size % dtype.itemsize:
                raise ConfigError(f"--data-dtype: {data} is not a whole number of {data_dtype} tokens; check the type")
            tokens = _mmap_tokens(path, dtype)
            # nanoGPT's uint16 files hold GPT-2 tokens; a uint32 file must say its vocabulary.
            vocab = vocab_size or DEFAULT_VOCAB_SIZE
            src = TokenSource(tokens, vocab, f"{data} ({len(tokens):,} {data_dtype} tokens)")
        elif tokenizer == "byte":
            # The built-in tokenizer: one token per byte of UTF-8, so the file itself is the token stream.
            tokens = _mmap_tokens(path, torch.uint8)
            src = TokenSource(tokens, max(256, vocab_size or 256), f"{data} ({len(tokens):,} byte tokens)")
        else:
            try:
                import tiktoken
            except ImportError:
                raise ConfigError("--tokenizer gpt2: needs tiktoken (pip install tiktoken); or use --tokenizer byte") from None
            enc = tiktoken.get_encoding("gpt2")
            ids = enc.encode_ordinary(path.read_text(encoding="utf-8", errors="replace"))
            tokens = torch.tensor(ids, dtype=torch.int32)
            src = TokenSource(tokens, max(enc.n_vocab, vocab_size or 0), f"{data} ({len(ids):,} gpt2 tokens)")
        if vocab_size is not None and vocab_size < src.vocab_size:
            raise ConfigError(f"--vocab-size: {vocab_size} is smaller than the tokenizer's {src.vocab_size}")
    if len(src.tokens) < seq_len + 1:
        raise ConfigError(f"--seq-len: {seq_len} needs at least {seq_len + 1} tokens but {data} has "
                          f"{len(src.tokens)}; use a shorter --seq-len or more data")
    return src


def split(source: TokenSource, val_fraction: float, seq_len: int) -> tuple[TokenSource, TokenSource]:
    """(train, validation): the last val_fraction of the tokens is held out, the rest trains.

    A tail rather than a sample, so no training window overlaps a validation one except at the seam.
    """
    n_val = int(len(source.tokens) * val_fraction)
    if n_val < seq_len + 1 or len(source.tokens) - n_val < seq_len + 1:
        raise ConfigError(f"--val-fraction: {val_fraction} of {len(source.tokens):,} tokens leaves "
                          f"{n_val:,} for validation and {len(source.tokens) - n_val:,} for training; each needs "
                          f"at least --seq-len + 1 = {seq_len + 1}; use more data, a larger fraction or no --eval-every")
    cut = len(source.tokens) - n_val
    return (TokenSource(source.tokens[:cut], source.vocab_size, source.description),
            TokenSource(source.tokens[cut:], source.vocab_size, f"{n_val:,} held-out tokens"))


class Batches:
    """This rank's share of each step's global batch; deterministic in (seed, step)."""

    def __init__(self, source: TokenSource, *, seq_len: int, global_batch: int, rank: int, world_size: int,
                 seed: int, device: torch.device):
        self.source = source
        self.seq_len = seq_len
        self.global_batch = global_batch
        self.local_batch = global_batch // world_size
        self.rank = rank
        self.seed = seed
        self.device = device
        self.step = 0  # the next step to produce: the whole position of this loader
        self._window = torch.arange(seq_len + 1)

    def state_dict(self) -> dict:
        return {"step": self.step, "seed": self.seed, "global_batch": self.global_batch,
                "seq_len": self.seq_len, "num_tokens": len(self.source.tokens)}

    def load_state_dict(self, state: dict) -> None:
        for key in ("seed", "global_batch", "seq_len", "num_tokens"):
            if state.get(key) != self.state_dict()[key]:
                raise ValueError(f"checkpoint was written with {key}={state.get(key)}, this run has "
                                 f"{self.state_dict()[key]}; resuming would not see the same data")
        self.step = int(state["step"])

    def offsets(self, step: int) -> torch.Tensor:
        """Start positions of all B windows of a step (every rank computes all, then keeps its own)."""
        g = torch.Generator().manual_seed((self.seed * 1_000_003 + step) % (1 << 63))
        return torch.randint(len(self.source.tokens) - self.seq_len, (self.global_batch,), generator=g)

    def host_batch(self, step: int) -> torch.Tensor:
        """This rank's windows of `step` (local_batch x seq_len + 1, int64) on the host, pinned for a GPU."""
        start = self.rank * self.local_batch
        mine = self.offsets(step)[start:start + self.local_batch]
        chunk = self.source.tokens[mine[:, None] + self._window].to(torch.int64)
        if chunk.max() >= self.source.vocab_size:
            raise ValueError(f"token id {int(chunk.max())} in {self.source.description} is >= the vocabulary "
                             f"size {self.source.vocab_size}; pass --vocab-size or --data-dtype")
        # Pinned memory makes the copy asynchronous: the GPU does not wait for the host.
        return chunk.pin_memory() if self.device.type == "cuda" else chunk

    def to_device(self, chunk: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        chunk = chunk.to(self.device, non_blocking=True)
        return chunk[:, :-1].contiguous(), chunk[:, 1:].contiguous()

    def next(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Inputs and targets (local_batch x seq_len, int64) on the device, for step self.step."""
        chunk = self.host_batch(self.step)
        self.step += 1
        return self.to_device(chunk)


class Prefetcher:
    """Batches whose next step is gathered (and pinned) on a thread while the current step computes.

    The data still depends only on the step: a prefetched batch is used only for the step it was made
    for, so resuming (load_state_dict moves the step) and the checkpointed position stay exact.
    """

    def __init__(self, batches: Batches):
        self.batches = batches
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="prefetch")
        self._pending: tuple[int, Future] | None = None

    @property
    def step(self) -> int:
        return self.batches.step

    def next(self) -> tuple[torch.Tensor, torch.Tensor]:
        step = self.batches.step
        pending, self._pending = self._pending, None
        chunk = pending[1].result() if pending and pending[0] == step else self.batches.host_batch(step)
        self.batches.step = step + 1
        self._pending = (step + 1, self._pool.submit(self.batches.host_batch, step + 1))
        return self.batches.to_device(chunk)

    def state_dict(self) -> dict:
        return self.batches.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.batches.load_state_dict(state)

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
