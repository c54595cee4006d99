"""Named GPT sizes and their parameter and FLOP counts (pure Python: no torch, so the CLI can import it)."""

from __future__ import annotations

from dataclasses import dataclass

# GPT-2's 50257 tokens padded up to a multiple of 64 so the embedding and output matmuls stay tensor-core aligned.
DEFAULT_VOCAB_SIZE = 50304


@dataclass(frozen=True)
class ModelSize:
    """Shape of one named GPT: every width is a multiple of 64 (tensor cores, and a head dim of 64 or 128)."""

    name: str
    n_layer: int
    n_head: int
    n_embd: int

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head


# tiny is for CPU tests; the others follow GPT-2 small/medium/large and GPT-3 XL, 2.7B and 6.7B (the GPT-3
# paper's table 2.1 for layers and width), with 128-wide heads from 1.3b on: 2.7b has 20 of them (GPT-3's
# 32 would be 80 wide; --tp 2 or 4 divides 20), 6.7b 32 (--tp 2, 4 or 8). Their weights and AdamW state
# (16 B per parameter: 42 and 106 GB) need FSDP, or TP with it, to fit on 80 GB GPUs.
SIZES: dict[str, ModelSize] = {
    "tiny": ModelSize("tiny", n_layer=2, n_head=2, n_embd=128),
    "124m": ModelSize("124m", n_layer=12, n_head=12, n_embd=768),
    "350m": ModelSize("350m", n_layer=24, n_head=16, n_embd=1024),
    "774m": ModelSize("774m", n_layer=36, n_head=20, n_embd=1280),
    "1.3b": ModelSize("1.3b", n_layer=24, n_head=16, n_embd=2048),
    "2.7b": ModelSize("2.7b", n_layer=32, n_head=20, n_embd=2560),
    "6.7b": ModelSize("6.7b", n_layer=32, n_head=32, n_embd=4096),
}


def get_size(name: str) -> ModelSize:
    """Look up a size by name; raises KeyError with the known names."""
    try:
        return SIZES[name.lower()]
    except KeyError:
        raise KeyError(f"unknown model size {name!r}; choose one of {', '.join(SIZES)}") from None


def pad_vocab(vocab_size: int, multiple: int = 64) -> int:
    """Round a vocabulary up to a multiple of 64: an unaligned output matmul is markedly slower."""
    return -(-vocab_size // multiple) * multiple


def block_params(size: ModelSize) -> int:
    """Parameters in one transformer block: qkv + proj (4d^2), MLP (8d^2), two bias-free LayerNorms (2d)."""
    d = size.n_embd
    return 12 * d * d + 2 * d


def param_count(size: ModelSize, vocab_size: int = DEFAULT_VOCAB_SIZE, seq_len: int = 1024, tied: bool = True) -> int:
    """All parameters of the model as built by gcpgpu.trainer.model.GPT."""
    d = size.n_embd
    embeddings = vocab_size * d + seq_len * d  # token + learned position embeddings
    head = 0 if tied else vocab_size * d
    return embeddings + size.n_layer * block_params(size) + d + head  # + final LayerNorm


def matmul_params(size: ModelSize, vocab_size: int = DEFAULT_VOCAB_SIZE, seq_len: int = 1024, tied: bool = True) -> int:
    """N for the MFU formula: parameters that take part in matmuls.

    Position embeddings are lookups, not matmuls, and so is the input token embedding when it is untied;
    a tied embedding is counted once (it is the output projection).
    """
    n = param_count(size, vocab_size, seq_len, tied) - seq_len * size.n_embd
    if not tied:
        n -= vocab_size * size.n_embd
    return n


def flops_per_token(size: ModelSize, vocab_size: int = DEFAULT_VOCAB_SIZE, seq_len: int = 1024, tied: bool = True) -> int:
    """Training FLOPs per token, 6N + 12*L*H*Q*T (PaLM appendix B), with no discount for the causal mask."""
    n = matmul_params(size, vocab_size, seq_len, tied)
    return 6 * n + 12 * size.n_layer * size.n_head * size.head_dim * seq_len
