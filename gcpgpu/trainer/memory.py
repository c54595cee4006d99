"""Per-GPU memory planner for the bundled trainer, from the standard formulas (pure Python, no torch).

What the trainer keeps per parameter (it always stores fp32 weights, as mixed precision should):
  weights 4 B, gradients 4 B, AdamW's two moments 8 B: 16 B per parameter, divided by the GPU count
  under FSDP (ZeRO-3), not divided under DDP. Mixed precision adds a 2-byte working copy: the autocast
  weight cache under DDP, or the gathered bf16 blocks in flight under FSDP.

Activations per transformer block are 17 tensors of seq x micro-batch x width (LN inputs, the input of
each linear, q/k/v, the attention output, the 4x-wide MLP hidden before and after GELU; flash attention
saves no seq x seq matrix). Autocast keeps the two LN inputs (the residual stream) in fp32. Full activation
checkpointing keeps one block input per block and recomputes one block at a time in backward.
The output layer keeps logits in the compute dtype plus fp32 log-softmax and its gradient: micro-batch x
seq x vocab x (dtype + 8) bytes, often the largest single term for small models. With the chunked loss
(loss_chunk tokens at a time, trainer/loss.py) that term is one chunk's: chunk x vocab x (2 dtype + 8),
plus what the chunked path keeps for all tokens: the hidden states in the compute dtype and, except in
fp16 (which recomputes instead), their fp32 gradient and the output weight's fp32 gradient.

Whole-model compile (one process with --compile; `compiled`) changes two terms, fitted to five H100 runs
(bf16, seq 1024: 124m at micro-batch 16 and 76, 350m at 8 and 42, 1.3b at 18; 9.2-51.5 GiB reserved
peaks, which the eager formulas had overstated by 1.2-1.6x). Inductor fuses the log-softmax and its
gradient into the graph, so the head keeps the logits and their gradient in the compute dtype only:
micro-batch x seq x vocab x 2 dtype bytes. Its min-cut partitioner recomputes three cheap tensors of each
block (the LN outputs and the GELU output) instead of saving them: 12 compute-dtype tensors, not 15.
The plan then comes within 0.93-1.05 of those measured peaks.

Selective activation checkpointing (--ac selective) keeps, per block, its input and the outputs of the
matmuls and the attention (10 compute-dtype tensors) and recomputes the rest.

Tensor parallelism (tp > 1, with FSDP over the rest) splits the weights and their state over all GPUs,
and, with sequence parallelism, every block activation by tp, except the two output projections' partial
sums, which each rank keeps whole before their reduce-scatter (selective AC saves them). The head holds
1/tp of the vocabulary's logits (the vocabulary-parallel loss) and the whole gathered hidden states.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from gcpgpu.trainer.sizes import DEFAULT_VOCAB_SIZE, ModelSize, block_params, get_size, param_count

PRECISIONS = ("fp32", "bf16", "fp16", "fp8")
PARALLELS = ("none", "ddp", "fsdp")
# Kept back from the GPU's memory for the CUDA context, NCCL buffers and allocator fragmentation.
RESERVED_FRACTION = 0.10
GiB = 1024**3


@dataclass
class MemoryPlan:
    """Per-GPU memory estimate in bytes for one training setup, and what to do if it does not fit."""

    model: str
    n_params: int
    batch_size: int
    micro_batch_per_gpu: int
    seq_len: int
    precision: str
    parallel: str
    gpus: int
    grad_accum: int
    params_bytes: int
    grads_bytes: int
    optimizer_bytes: int
    working_params_bytes: int
    activations_bytes: int  # without activation checkpointing
    activations_ac_bytes: int  # with full activation checkpointing
    total_bytes: int
    total_ac_bytes: int
    gpu_memory_bytes: int | None
    usable_bytes: int | None
    fits: bool | None
    fits_with_ac: bool | None
    recommendation: str
    # Per-block pieces, so activations_for(ac_every) can price every-k-th-block checkpointing.
    n_layer: int = 0
    block_act_bytes: int = 0
    block_input_bytes: int = 0
    outside_blocks_act_bytes: int = 0
    loss_chunk: int = 0  # tokens per chunk of the output layer + loss; 0: all logits at once
    tp: int = 1  # tensor-parallel degree (FSDP over gpus / tp)
    compiled: bool = False  # whole-model compile: Inductor's head and block savings (module docstring)
    block_sel_bytes: int = 0  # one block's activations under selective checkpointing

    @property
    def static_bytes(self) -> int:
        """Parameters, gradients, optimizer state and working copies: memory that does not scale with batch."""
        return self.params_bytes + self.grads_bytes + self.optimizer_bytes + self.working_params_bytes

    def activations_for(self, ac_every: int, selective: bool = False) -> int:
        """Activation bytes when every ac_every-th block is checkpointed (0 = none, 1 = full), or with
        selective checkpointing of every block."""
        if selective:
            return _selective(self.n_layer, self.block_sel_bytes, self.block_act_bytes, self.outside_blocks_act_bytes)
        return _activations(self.n_layer, self.block_act_bytes, self.block_input_bytes,
                            self.outside_blocks_act_bytes, ac_every)

    def total_for(self, ac_every: int, selective: bool = False) -> int:
        """Total per-GPU bytes with every ac_every-th block checkpointed (0 = none, 1 = full), or selective."""
        return self.static_bytes + self.activations_for(ac_every, selective)

    def to_dict(self) -> dict:
        return asdict(self)

    def rows(self) -> list[tuple[str, str]]:
        """(label, value) pairs for printing a table, sizes in GiB."""
        def g(n: int | None) -> str:
            return "unknown" if n is None else f"{n / GiB:.2f} GiB"

        rows = [
            ("model", f"{self.model} ({self.n_params / 1e6:.0f}M parameters)"),
            ("batch", f"{self.batch_size} global, {self.micro_batch_per_gpu} per GPU micro-batch x {self.seq_len} tokens"),
            ("setup", f"{self.parallel} on {self.gpus} GPU(s)" + (f" (tp {self.tp})" if self.tp > 1 else "")
             + f", {self.precision}, grad-accum {self.grad_accum}" + (", whole-model compile" if self.compiled else "")),
            ("parameters (fp32 master)", g(self.params_bytes)),
            ("gradients (fp32" + (", sharded: FSDP reduce-scatters every micro-step" if self.parallel == "fsdp"
                                  and self.grad_accum > 1 else "") + ")", g(self.grads_bytes)),
            ("optimizer state (AdamW, 2 x fp32)", g(self.optimizer_bytes)),
            ("working weight copies", g(self.working_params_bytes)),
            ("output layer + loss", f"chunks of {self.loss_chunk} tokens" if self.loss_chunk
             else "fused by compile (logits and gradient in the compute dtype)" if self.compiled
             else f"vocabulary-parallel over tp {self.tp}" if self.tp > 1 else "all logits at once (fp32)"),
            ("activations", g(self.activations_bytes)),
            ("activations (full AC)", g(self.activations_ac_bytes)),
            ("total", g(self.total_bytes)),
            ("total (full AC)", g(self.total_ac_bytes)),
            ("GPU memory (usable)", f"{g(self.gpu_memory_bytes)} ({g(self.usable_bytes)})"),
            ("fits", {True: "yes", False: "no", None: "unknown"}[self.fits]),
            ("recommendation", self.recommendation),
        ]
        return rows


def _activations(n_layer: int, block_act: int, block_input: int, outside: int, ac_every: int) -> int:
    if ac_every <= 0:
        return n_layer * block_act + outside
    checkpointed = -(-n_layer // ac_every)  # blocks 0, k, 2k, ... are checkpointed
    kept = n_layer - checkpointed
    # Checkpointed blocks keep only their input; backward recomputes one of them at a time.
    return kept * block_act + checkpointed * block_input + block_act + outside


def _selective(n_layer: int, block_sel: int, block_act: int, outside: int) -> int:
    # Every block keeps its saved ops' outputs; backward recomputes one block's others at a time.
    return n_layer * block_sel + block_act + outside


def _components(size: ModelSize, n_params: int, micro: int, seq_len: int, precision: str, parallel: str,
                gpus: int, vocab_size: int, loss_chunk: int = 0, tp: int = 1, compiled: bool = False) -> dict[str, int]:
    shard = gpus if parallel == "fsdp" else 1
    mixed = precision != "fp32"
    c = 2 if mixed else 4  # bytes per element of the compute dtype
    params = 4 * n_params // shard  # fp32 weights
    grads = 4 * n_params // shard  # fp32 gradients (DDP's gradient_as_bucket_view adds no copy)
    optimizer = 8 * n_params // shard  # AdamW exp_avg + exp_avg_sq in fp32
    blk = block_params(size)
    if parallel == "fsdp":
        root = n_params - size.n_layer * blk
        # Two gathered blocks (current + prefetched) and the root, plus one block's fp32 unsharded grads
        # waiting for reduce-scatter.
        working = (c * (2 * blk + root) + 4 * blk) // tp
    else:
        working = 2 * n_params if mixed else 0  # autocast's cached half-precision copy of each weight
    tokens = micro * seq_len
    h = size.n_embd
    # Autocast (none/ddp) keeps the residual stream in fp32; FSDP's param_dtype policy runs blocks in bf16.
    residual = 4 if (not mixed or parallel != "fsdp") else 2
    saved = 12 if compiled else 15  # compute-dtype tensors a block keeps (module docstring)
    block_act = tokens * h * (2 * residual + saved * c) // tp
    block_input = tokens * h * residual // tp
    # Selective AC: input, qkv (3), attention (1), fc (4) split by tp; the projections' partial sums whole.
    block_sel = tokens * h * (residual + 8 * c) // tp + tokens * h * 2 * c + (tokens * h * 2 * c // tp if tp > 1 else 0)
    if tp > 1:
        # Final LN input on sequence slices, the gathered hidden states whole, this rank's vocabulary shard.
        outside = tokens * h * (residual // tp + c) + tokens * vocab_size * (c + 8) // tp
    elif compiled and not loss_chunk:
        outside = tokens * h * (residual + c) + tokens * vocab_size * 2 * c
    elif loss_chunk:
        # Final LN input + hidden states in the compute dtype, one chunk's logits (compute dtype, fp32, the
        # fp32 gradient, its cast), and unless fp16 recomputes, the precomputed fp32 gradients.
        precomputed = 0 if precision == "fp16" else tokens * h * 4 + vocab_size * h * 4
        outside = tokens * h * (residual + c) + min(loss_chunk, tokens) * vocab_size * (2 * c + 8) + precomputed
    else:
        # Final LN input + lm_head input, then logits (compute dtype) + fp32 log-softmax + its fp32 gradient.
        outside = tokens * h * (residual + c) + tokens * vocab_size * (c + 8)
    return {"params": params, "grads": grads, "optimizer": optimizer, "working": working,
            "block_act": block_act, "block_input": block_input, "outside": outside, "block_sel": block_sel}


def plan_memory(
    model: str | ModelSize,
    batch_size: int,
    seq_len: int,
    precision: str,
    parallel: str,
    gpus: int,
    gpu_memory_bytes: int | None,
    *,
    grad_accum: int = 1,
    vocab_size: int = DEFAULT_VOCAB_SIZE,
    tied: bool = True,
    loss_chunk: int = 0,
    tp: int = 1,
    compiled: bool = False,
) -> MemoryPlan:
    """Estimate per-GPU memory for training `model` and recommend a setting that fits.

    batch_size is the global batch in sequences, as the trainer's --batch-size: each GPU runs micro-batches
    of batch_size / (gpus / tp * grad_accum). tp is --tp (FSDP only); compiled: whole-model compile. loss_chunk is the trainer's --loss-chunk (0: the plain loss). Raises ValueError on an unknown model, precision or parallel mode,
    or a batch that does not divide evenly.
    """
    try:
        size = model if isinstance(model, ModelSize) else get_size(model)  # `plan train`'s shapes are their own
    except KeyError as e:
        raise ValueError(str(e.args[0])) from None
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}; choose one of {', '.join(PRECISIONS)}")
    if parallel not in PARALLELS:
        raise ValueError(f"unknown parallel mode {parallel!r}; choose one of {', '.join(PARALLELS)}")
    if gpus < 1 or batch_size < 1 or seq_len < 1 or grad_accum < 1:
        raise ValueError("gpus, batch_size, seq_len and grad_accum must all be at least 1")
    if parallel == "none" and gpus > 1:
        raise ValueError(f"parallel 'none' runs on one GPU, not {gpus}; use ddp or fsdp")
    if tp < 1 or gpus % tp:
        raise ValueError(f"tp {tp} must divide the {gpus} GPUs")
    if size.n_head % tp:
        raise ValueError(f"tp {tp} must divide the model's {size.n_head} heads")
    if tp > 1 and parallel != "fsdp":
        raise ValueError(f"tp {tp} composes with fsdp only, not {parallel}")
    dp = gpus // tp
    if batch_size % (dp * grad_accum):
        raise ValueError(f"batch size {batch_size} is not divisible by data-parallel ranks x grad_accum = "
                         f"{dp * grad_accum}")
    n_params = param_count(size, vocab_size, seq_len, tied)

    def estimate(par: str, accum: int) -> dict[str, int]:
        return _components(size, n_params, batch_size // (dp * accum), seq_len, precision, par, gpus, vocab_size,
                           loss_chunk, tp, compiled)

    comp = estimate(parallel, grad_accum)
    static = comp["params"] + comp["grads"] + comp["optimizer"] + comp["working"]
    act = _activations(size.n_layer, comp["block_act"], comp["block_input"], comp["outside"], 0)
    act_ac = _activations(size.n_layer, comp["block_act"], comp["block_input"], comp["outside"], 1)
    usable = None if gpu_memory_bytes is None else int(gpu_memory_bytes * (1 - RESERVED_FRACTION))
    fits = None if usable is None else static + act <= usable
    fits_ac = None if usable is None else static + act_ac <= usable
    plan = MemoryPlan(
        model=size.name, n_params=n_params, batch_size=batch_size,
        micro_batch_per_gpu=batch_size // (dp * grad_accum), seq_len=seq_len, precision=precision,
        parallel=parallel, gpus=gpus, grad_accum=grad_accum,
        params_bytes=comp["params"], grads_bytes=comp["grads"], optimizer_bytes=comp["optimizer"],
        working_params_bytes=comp["working"], activations_bytes=act, activations_ac_bytes=act_ac,
        total_bytes=static + act, total_ac_bytes=static + act_ac, gpu_memory_bytes=gpu_memory_bytes,
        usable_bytes=usable, fits=fits, fits_with_ac=fits_ac, recommendation="",
        n_layer=size.n_layer, block_act_bytes=comp["block_act"], block_input_bytes=comp["block_input"],
        outside_blocks_act_bytes=comp["outside"], loss_chunk=loss_chunk, tp=tp, compiled=compiled,
        block_sel_bytes=comp["block_sel"],
    )
    plan.recommendation = _recommend(plan, estimate)
    return plan


def _gib(n: int) -> str:
    return f"{n / GiB:.1f} GiB"


def _recommend(plan: MemoryPlan, estimate) -> str:
    """Cheapest change that fits, tried in order of speed cost: none, FSDP, checkpointing, accumulation."""
    if plan.usable_bytes is None:
        return (f"GPU memory unknown (give a machine type); needs {_gib(plan.total_bytes)} per GPU, "
                f"{_gib(plan.total_ac_bytes)} with --ac full")
    usable = plan.usable_bytes
    if plan.total_bytes <= usable:
        return f"fits as asked: {_gib(plan.total_bytes)} of {_gib(usable)} usable per GPU"

    def total(comp: dict[str, int], ac_every: int) -> int:
        static = comp["params"] + comp["grads"] + comp["optimizer"] + comp["working"]
        return static + _activations(plan.n_layer, comp["block_act"], comp["block_input"], comp["outside"], ac_every)

    def best_ac(comp: dict[str, int]) -> int | None:
        """Largest k (fewest recomputed blocks) such that checkpointing every k-th block fits; None if none."""
        for k in range(plan.n_layer, 0, -1):
            if total(comp, k) <= usable:
                return k
        return None

    def ac_flag(k: int) -> str:
        return "--ac full" if k == 1 else f"--ac {k}"

    parallels = [plan.parallel]
    if plan.gpus > 1 and plan.parallel != "fsdp":
        parallels.append("fsdp")
    for par in parallels[1:]:
        comp = estimate(par, plan.grad_accum)
        if total(comp, 0) <= usable:
            return f"use --parallel {par}: {_gib(total(comp, 0))} of {_gib(usable)} usable per GPU"
    for par in parallels:
        comp = estimate(par, plan.grad_accum)
        k = best_ac(comp)
        if k is not None:
            switch = f"--parallel {par} " if par != plan.parallel else ""
            return (f"use {switch}{ac_flag(k)}: {_gib(total(comp, k))} of {_gib(usable)} usable per GPU "
                    f"(recomputes {-(-plan.n_layer // k)} of {plan.n_layer} blocks in backward)")
    per_gpu = plan.batch_size // (plan.gpus // plan.tp)
    for accum in range(plan.grad_accum + 1, per_gpu + 1):
        if per_gpu % accum:
            continue
        for par in parallels:
            comp = estimate(par, accum)
            for k in (0, 1):
                if total(comp, k) <= usable:
                    extra = (f"--parallel {par} " if par != plan.parallel else "") + (ac_flag(k) + " " if k else "")
                    return (f"use {extra}--grad-accum {accum} (micro-batch {per_gpu // accum}): "
                            f"{_gib(total(comp, k))} of {_gib(usable)} usable per GPU")
    return (f"does not fit: even FSDP with --ac full and micro-batch 1 needs more than {_gib(usable)} per GPU; "
            "use more GPUs, GPUs with more memory, or a smaller model")
