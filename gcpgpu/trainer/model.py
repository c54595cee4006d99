"""A GPT-2 style decoder: pre-norm blocks, causal attention through scaled_dot_product_attention."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from gcpgpu.trainer.loss import chunked_linear_cross_entropy
from gcpgpu.trainer.sizes import get_size, pad_vocab


@dataclass
class GPTConfig:
    n_layer: int
    n_head: int
    n_embd: int
    vocab_size: int
    seq_len: int
    tie_embeddings: bool = True
    # Tokens per chunk of the output layer + loss (0: the plain path, which holds every token's logits).
    loss_chunk: int = 0

    @classmethod
    def from_size(cls, name: str, vocab_size: int, seq_len: int, tie_embeddings: bool = True,
                  loss_chunk: int = 0) -> GPTConfig:
        """A named size (see sizes.py); the vocabulary is padded to a multiple of 64 for the output matmul."""
        s = get_size(name)
        return cls(s.n_layer, s.n_head, s.n_embd, pad_vocab(vocab_size), seq_len, tie_embeddings, loss_chunk)


class CausalSelfAttention(nn.Module):
    """Multi-head causal attention. The fused qkv output is laid out head by head, each head's q, k and v
    side by side (Megatron's layout), so a contiguous slice of its rows holds whole heads: tensor
    parallelism (parallel_tp.py) splits it by columns and each rank runs its own heads with no exchange."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.head_dim = cfg.n_embd // cfg.n_head
        self.qkv = nn.Linear(cfg.n_embd, 3 * cfg.n_embd, bias=False)  # one matmul for q, k and v
        self.proj = nn.Linear(cfg.n_embd, cfg.n_embd, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, _ = x.shape
        qkv = self.qkv(x)  # (B, T, heads x 3 x head_dim); under tensor parallelism, this rank's heads only
        q, k, v = qkv.view(B, T, -1, 3 * self.head_dim).transpose(1, 2).split(self.head_dim, dim=3)
        # SDPA picks flash / cuDNN / memory-efficient kernels: no T x T matrix is kept for backward.
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(B, T, -1))


class MLP(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.fc = nn.Linear(cfg.n_embd, 4 * cfg.n_embd, bias=False)
        self.proj = nn.Linear(4 * cfg.n_embd, cfg.n_embd, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(F.gelu(self.fc(x), approximate="tanh"))


class Block(nn.Module):
    """Pre-norm transformer block: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.n_embd, bias=False)
        self.attn = CausalSelfAttention(cfg)
        self.ln2 = nn.LayerNorm(cfg.n_embd, bias=False)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.wpe = nn.Embedding(cfg.seq_len, cfg.n_embd)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.n_embd, bias=False)
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        if cfg.tie_embeddings:
            self.lm_head.weight = self.wte.weight  # one matrix for reading and writing tokens (GPT-2)
        self.init_weights()

    @torch.no_grad()
    def init_weights(self) -> None:
        """GPT-2 init: N(0, 0.02), residual projections scaled by 1/sqrt(2 * n_layer)."""
        for name, p in self.named_parameters():
            if p.dim() == 1:
                nn.init.ones_(p)  # LayerNorm gains
            elif name.endswith("proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * self.cfg.n_layer))
            else:
                nn.init.normal_(p, mean=0.0, std=0.02)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None) -> torch.Tensor:
        """Mean cross-entropy over all tokens when targets are given, else the logits."""
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.blocks:
            x = block(x)
        x = self.ln_f(x)
        if targets is not None and self.cfg.loss_chunk:
            # Same loss and gradients, but only one chunk of logits at a time (loss.py says how).
            return chunked_linear_cross_entropy(x.view(-1, x.shape[-1]), self.lm_head.weight, targets.view(-1),
                                                chunk_tokens=self.cfg.loss_chunk)
        logits = self.lm_head(x)
        if targets is None:
            return logits
        # The loss in fp32 whatever the compute dtype: a half-precision softmax over 50k tokens loses accuracy.
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.view(-1))

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())  # parameters() yields a tied weight once
