"""How long a training run takes, from its FLOPs, the GPUs' peak and an assumed MFU (pure Python, no torch).

    FLOPs per token = 6 N + 12 L d T      (PaLM appendix B, as sizes.flops_per_token: N matmul parameters,
                                           L layers, d = heads x head dim = d_model, T sequence length;
                                           no discount for the causal mask)
    tokens/s        = GPUs x peak dense bf16 FLOP/s x MFU / FLOPs per token
    seconds         = tokens / tokens/s   (perfect scaling with the GPU count assumed: communication that
                                           does not overlap shows up as a lower MFU, not here)

The MFU is what published runs of that GPU and model size reached (MFU_ANCHORS, from shared/reference
trainer-facts.md and the LLaMA paper), unless the caller gives one it measured.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

# (GPU model prefix, smallest parameter count the anchor covers, MFU, source). The first match wins: list the
# larger models first. A GPU without a row of its own uses H100's (said so).
MFU_ANCHORS: tuple[tuple[str, float, float, str], ...] = (
    ("A100", 10e9, 0.49, "LLaMA 65B on 2048 A100 80GB: 380 tokens/s/GPU (Touvron et al. 2023, section 2.4), "
                         "about 49 % MFU by 6N + attention FLOPs (derived)"),
    ("A100", 0, 0.37, "nanoGPT GPT-2 124M on 1 A100: 37 % MFU (karpathy/nanoGPT transformer_sizing.ipynb)"),
    ("H100", 5e9, 0.39, "torchtitan Llama 3.1 8B on 8 H100, FSDP2, compiled: 39 % MFU "
                        "(pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md)"),
    ("H100", 1e9, 0.46, "llm.c GPT-2 1.5B on 8 H100 SXM: about 46 % MFU (derived from karpathy/llm.c "
                        "scripts/run_gpt2_1558M.sh)"),
    ("H100", 0, 0.38, "llm.c GPT-2 124M on 8 H100: about 38 % MFU (derived, modded-nanogpt records)"),
)
SAME_AS_H100 = ("H200", "B200", "L4")  # no published anchor here: H100's figure, said so


@dataclass(frozen=True)
class Mfu:
    value: float
    source: str


def assumed_mfu(gpu_model: str, params: float) -> Mfu:
    """The MFU a run of `params` parameters on `gpu_model` GPUs may expect, with where the figure comes from."""
    family = gpu_model.split()[0].upper()
    borrowed = family in SAME_AS_H100
    for prefix, smallest, value, source in MFU_ANCHORS:
        if (prefix == "H100" if borrowed else family.startswith(prefix)) and params >= smallest:
            return Mfu(value, f"assumed as H100 (no {family} figure): {source}" if borrowed else source)
    return Mfu(0.35, "no published figure for this GPU: 35 % assumed")


def flops_per_token(matmul_params: float, layers: int, d_model: int, seq_len: int) -> float:
    """6N + 12 L d T."""
    return 6 * matmul_params + 12 * layers * d_model * seq_len


@dataclass(frozen=True)
class Estimate:
    flops_per_token: float
    total_flops: float
    gpus: int
    peak_flops: float  # per GPU
    mfu: float
    tokens_per_s: float  # the whole run
    seconds: float
    given: bool = False  # tokens_per_s is the caller's measured figure, not the MFU's

    @property
    def implied_mfu(self) -> float:
        """The MFU the throughput means on these GPUs (above 1: more than they can do)."""
        return self.tokens_per_s * self.flops_per_token / (self.gpus * self.peak_flops)

    @property
    def days(self) -> float:
        return self.seconds / 86400


def estimate(tokens: float, per_token: float, gpus: int, peak_flops: float, mfu: float,
             tokens_per_s: float | None = None) -> Estimate:
    """The run's time; `tokens_per_s` (the user's measured throughput) replaces the MFU-derived one."""
    rate = tokens_per_s if tokens_per_s else gpus * peak_flops * mfu / per_token
    return Estimate(per_token, per_token * tokens, gpus, peak_flops, mfu, rate, tokens / rate, bool(tokens_per_s))


def gpus_for_days(tokens: float, per_token: float, days: float, peak_flops: float, mfu: float) -> float:
    """GPUs (fractional) that finish in `days`."""
    return per_token * tokens / (days * 86400 * peak_flops * mfu)


def nodes_for(gpus: float, gpus_per_node: int) -> int:
    return max(1, math.ceil(gpus / gpus_per_node - 1e-9))


_COUNT = re.compile(r"^\s*(?P<num>\d+(?:\.\d+)?(?:e\d+)?)\s*(?P<unit>[kmbt]?)\s*$", re.IGNORECASE)
_UNITS = {"": 1, "k": 1e3, "m": 1e6, "b": 1e9, "t": 1e12}


def parse_count(text: str) -> float | None:
    """'70B', '1.4T', '124m', '1.4e12', '2048' as a number; None when it is not one (sign included)."""
    match = _COUNT.match(str(text).replace(",", "").replace("_", ""))
    if not match:
        return None
    return float(match.group("num")) * _UNITS[match.group("unit").lower()]
