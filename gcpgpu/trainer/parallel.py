"""Turn a plain GPT into the model that trains: fp8 -> TP -> activation checkpointing -> compile -> DDP/FSDP2.

The order is torchtitan's: tensor parallelism splits the plain modules first (parallel_tp.py), checkpoint
wrappers go inside the compiled region (so compile sees the recompute), and FSDP2 shards the compiled
blocks (so its all-gather hooks stay outside the graphs).
"""

from __future__ import annotations

import torch
import torch.nn as nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

from gcpgpu.trainer.dist import DistEnv
from gcpgpu.trainer.model import GPT
from gcpgpu.trainer.parallel_tp import apply_tp, build_tp_mesh, dp_mesh


def fp8_filter(recipe: str, which: str = "auto"):
    """The module_filter_fn for torchao's convert_to_float8_training.

    Always: block linears only (the output layer stays bf16: its softmax is precision-sensitive) whose
    sides are multiples of 16 (the fp8 matmul's requirement). With which="auto", also torchao's own
    size thresholds for the recipe (from its H100 benchmarks, the filter torchtitan's auto_filter_small_kn
    uses): smaller linears lose more time to the casts than the fp8 matmul saves.
    """
    def eligible(mod: nn.Module, fqn: str) -> bool:
        return (isinstance(mod, nn.Linear) and fqn.startswith("blocks.")
                and mod.in_features % 16 == 0 and mod.out_features % 16 == 0)

    if which == "all":
        return eligible
    from torchao.float8.float8_linear_utils import _auto_filter_for_recipe  # experimental API (torchao 0.18)

    by_size = _auto_filter_for_recipe(recipe, filter_fqns=["lm_head"])
    return lambda mod, fqn: eligible(mod, fqn) and by_size(mod, fqn)


def apply_fp8(model: GPT, recipe: str, fsdp: bool, which: str = "auto") -> tuple[int, int]:
    """Swap block linears for torchao Float8Linear; returns (converted, block linears in all)."""
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training

    config = Float8LinearConfig.from_recipe_name(recipe)
    if fsdp and recipe == "tensorwise":
        # Cast weights to fp8 before FSDP's all-gather: half the bytes on the wire.
        config = _replace(config, enable_fsdp_float8_all_gather=True)
    total = sum(isinstance(m, nn.Linear) and n.startswith("blocks.") for n, m in model.named_modules())
    convert_to_float8_training(model, config=config, module_filter_fn=fp8_filter(recipe, which))
    return sum(type(m).__name__ == "Float8Linear" for m in model.modules()), total


def _replace(config, **changes):
    import dataclasses

    return dataclasses.replace(config, **changes)


def _save_list() -> set:
    """The ops selective checkpointing keeps the outputs of: the matmuls and attention (the FLOPs), and
    TP's reduce-scatters (a recompute would repeat the communication). Norms, GELU, adds, views and
    casts are recomputed: cheap to redo, and together most of a block's activation bytes."""
    aten = torch.ops.aten
    ops = {aten.mm.default, aten.addmm.default, aten.bmm.default, aten._scaled_mm.default,
           aten._scaled_dot_product_flash_attention.default, aten._scaled_dot_product_efficient_attention.default,
           aten._scaled_dot_product_cudnn_attention.default,
           aten._scaled_dot_product_flash_attention_for_cpu.default,
           torch.ops._c10d_functional.reduce_scatter_tensor.default}
    return ops


def selective_policy():
    """The per-op policy for torch.utils.checkpoint (create_selective_checkpoint_contexts)."""
    from torch.utils.checkpoint import CheckpointPolicy

    save = _save_list()

    def policy(ctx, op, *args, **kwargs):
        return CheckpointPolicy.MUST_SAVE if op in save else CheckpointPolicy.PREFER_RECOMPUTE

    return policy


def apply_ac(model: GPT, every: int, selective: bool = False) -> None:
    """Checkpoint every `every`-th block: keep only its input, recompute the rest in backward. Selective:
    every block, keeping the outputs of the ops in _save_list() and recomputing the others."""
    import functools

    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
    from torch.utils.checkpoint import create_selective_checkpoint_contexts

    # No dropout in the model, so there is no RNG state to save and replay.
    kwargs = {"preserve_rng_state": False}
    if selective:
        every = 1
        kwargs["context_fn"] = functools.partial(create_selective_checkpoint_contexts, selective_policy())
    for i, block in enumerate(model.blocks):
        if i % every == 0:
            model.blocks[i] = checkpoint_wrapper(block, **kwargs)


def apply_compile(model: GPT, mode: str) -> None:
    """torch.compile each block on its own: blocks are identical, so one compile serves them all."""
    options = {"fullgraph": True}
    if mode != "default":
        options["mode"] = mode
    for i, block in enumerate(model.blocks):
        model.blocks[i] = torch.compile(block, **options)


def compile_whole(module: nn.Module, mode: str) -> nn.Module:
    """torch.compile the whole module in place (Module.compile: the same object, so state_dict keys and
    checkpoints do not change). Not fullgraph: the chunked loss runs eager behind one graph break."""
    module.compile(**({} if mode == "default" else {"mode": mode}))
    return module


def build_mesh(env: DistEnv, device_type: str, shard_size: int | None) -> DeviceMesh:
    """1-D mesh (plain FSDP) or 2-D (replicate x shard) for HSDP: shard inside a node, replicate across."""
    if shard_size is None:
        shard_size = env.local_world_size if env.nnodes > 1 else env.world_size
    if shard_size == env.world_size:
        return init_device_mesh(device_type, (env.world_size,), mesh_dim_names=("shard",))
    return init_device_mesh(device_type, (env.world_size // shard_size, shard_size),
                            mesh_dim_names=("replicate", "shard"))


def apply_fsdp(model: GPT, mesh: DeviceMesh, param_dtype: torch.dtype | None, reshard_after_forward: bool) -> None:
    """FSDP2: shard each block, then the root (embeddings, final norm, head).

    The root gets fully_shard's default (reshard_after_forward=None: False for the root, as torchtitan
    leaves it): backward starts with the head and the tied embedding, so re-gathering them there would
    be an all-gather that nothing overlaps.
    """
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    # Reduce in fp32 always: summing bf16 gradients over many ranks loses bits we need.
    mp = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=torch.float32)
    last = len(model.blocks) - 1
    for i, block in enumerate(model.blocks):
        # The last block's weights are needed again at once by backward: keep them gathered.
        fully_shard(block, mesh=mesh, mp_policy=mp, reshard_after_forward=reshard_after_forward and i < last)
    fully_shard(model, mesh=mesh, mp_policy=mp)


def apply_ddp(model: GPT, device: torch.device, bucket_mb: int, static_graph: bool, comm_hook: str,
              powersgd_rank: int) -> nn.Module:
    """Wrap in DDP: gradients go into the buckets directly (no copy), all-reduce overlaps backward."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    ddp = DDP(model, device_ids=[device.index] if device.type == "cuda" else None, bucket_cap_mb=bucket_mb,
              gradient_as_bucket_view=True, static_graph=static_graph)
    if comm_hook == "bf16":
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        ddp.register_comm_hook(None, default_hooks.bf16_compress_hook)  # half the bytes on the wire
    elif comm_hook == "fp16":
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
    elif comm_hook == "powersgd":
        from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook

        # Low-rank gradient compression with error feedback; plain all-reduce for the first 1000 steps.
        state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=powersgd_rank,
                                            start_powerSGD_iter=1000)
        ddp.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
    return ddp


def parallelize(model: GPT, *, parallel: str, env: DistEnv, device: torch.device, param_dtype: torch.dtype | None,
                ac_every: int, compile: bool, compile_mode: str, compile_scope: str = "block",
                ac_selective: bool = False, tp: int = 1,
                fsdp_reshard_after_forward: bool = True,
                fsdp_shard_size: int | None = None, ddp_bucket_mb: int = 25, ddp_static_graph: bool = True,
                ddp_comm_hook: str = "none", powersgd_rank: int = 4) -> nn.Module:
    """Apply TP, AC, compile, then DDP or FSDP2 (in that order); returns the module to call in the train loop."""
    mesh = build_tp_mesh(env, device.type, tp, fsdp_shard_size) if tp > 1 else None
    if mesh is not None:
        apply_tp(model, mesh["tp"])
    if ac_every or ac_selective:
        apply_ac(model, ac_every, selective=ac_selective)
    if compile and compile_scope == "block":
        apply_compile(model, compile_mode)
    if parallel == "fsdp":
        fsdp_mesh = dp_mesh(mesh) if mesh is not None else build_mesh(env, device.type, fsdp_shard_size)
        apply_fsdp(model, fsdp_mesh, param_dtype, fsdp_reshard_after_forward)
        return model
    if parallel == "ddp":
        model = apply_ddp(model, device, ddp_bucket_mb, ddp_static_graph, ddp_comm_hook, powersgd_rank)
    # Over DDP, not inside it: compile then splits the graph at DDP's buckets so all-reduces overlap.
    return compile_whole(model, compile_mode) if compile and compile_scope == "model" else model
