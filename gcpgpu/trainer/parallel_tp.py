"""Tensor parallelism (--tp N) inside a node, composed with FSDP2 over the rest: a 2-D or 3-D device mesh.

The mesh is (shard, tp), or (replicate, shard, tp) for HSDP; tp is the innermost dimension, so the ranks of
one tensor-parallel group are consecutive: the GPUs of one node, joined by NVLink. FSDP2 shards (and
HSDP replicates) over the data-parallel dimensions; the ranks of a tp group see the same batch.

Each block is split Megatron's way with DTensor's parallelize_module: qkv and the MLP's first linear by
columns (each rank owns whole heads, model.py's qkv layout), the two output projections by rows. Sequence
parallelism covers what lies between them: the residual stream, the LayerNorms and the residual adds
hold a 1/tp slice of the sequence on each rank, so their activations are not repeated tp times; the
all-reduce of plain TP becomes an all-gather before each split linear and a reduce-scatter after it.
The model has no dropout; were one added, it would run on the sequence slices too.

The embedding is split by vocabulary rows and the output layer by vocabulary columns (the same tied
matrix, split the same way), and the loss runs on the vocabulary shards (torch's loss_parallel), so no
rank ever holds all the logits.
"""

from __future__ import annotations

import contextlib

import torch
import torch.nn as nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

from gcpgpu.trainer.dist import DistEnv


def tp_mesh_shape(env: DistEnv, tp: int, shard_size: int | None) -> tuple[tuple[int, ...], tuple[str, ...]]:
    """The mesh's shape and names for `tp`-way tensor parallelism over env's ranks (pure arithmetic).

    shard_size counts data-parallel groups per shard group in GPUs, as --fsdp-shard-size does without TP:
    GPUs per node by default when the job spans nodes, else all of them.
    """
    dp = env.world_size // tp
    if shard_size is None:
        shard_size = env.local_world_size if env.nnodes > 1 else env.world_size
    shard = max(1, shard_size // tp)
    if shard >= dp:
        return (dp, tp), ("shard", "tp")
    return (dp // shard, shard, tp), ("replicate", "shard", "tp")


def build_tp_mesh(env: DistEnv, device_type: str, tp: int, shard_size: int | None) -> DeviceMesh:
    shape, names = tp_mesh_shape(env, tp, shard_size)
    mesh = init_device_mesh(device_type, shape, mesh_dim_names=names)
    # One group over every dimension: a reduction over all of them (the gradient norm for clipping) is
    # then one all-reduce, not one per dimension.
    mesh[names]._flatten("all")
    return mesh


def dp_mesh(mesh: DeviceMesh) -> DeviceMesh:
    """The data-parallel part of a TP mesh: what FSDP2 shards (1-D) or HSDP replicates and shards (2-D)."""
    names = mesh.mesh_dim_names
    return mesh["replicate", "shard"] if "replicate" in names else mesh["shard"]


def _position_embedding(module: nn.Embedding, mesh: DeviceMesh) -> None:
    """The position table is small: replicated over tp; each rank adds the rows of its sequence slice."""
    from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_module

    def to_dtensor(mod, inputs, mesh):
        return tuple(DTensor.from_local(t, mesh, [Replicate()], run_check=False) for t in inputs)

    def my_slice(mod, output, mesh):
        return output.redistribute(mesh, [Shard(0)]).to_local()  # (T, C) -> this rank's (T / tp, C)

    distribute_module(module, mesh, input_fn=to_dtensor, output_fn=my_slice)


def apply_tp(model: nn.Module, mesh: DeviceMesh) -> None:
    """Split `model` (gcpgpu.trainer.model.GPT) over the 1-D tp mesh, in place (see the module docstring)."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleInput,
        RowwiseParallel,
        SequenceParallel,
        parallelize_module,
    )

    tied = model.lm_head.weight is model.wte.weight
    parallelize_module(model, mesh, {
        # Vocabulary rows; the sum over ranks arrives as this rank's sequence slice (a reduce-scatter).
        "wte": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)),
        "ln_f": SequenceParallel(),
        # Vocabulary columns, left sharded for the vocabulary-parallel loss.
        "lm_head": ColwiseParallel(input_layouts=Shard(1), output_layouts=Shard(-1), use_local_output=False),
    })
    if tied:
        # Both sides split the (vocab, width) matrix by rows: one DTensor serves both, as one tensor did.
        model.lm_head.weight = model.wte.weight
    _position_embedding(model.wpe, mesh)
    for block in model.blocks:
        parallelize_module(block, mesh, {
            "ln1": SequenceParallel(),
            "attn": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
            "attn.qkv": ColwiseParallel(),
            "attn.proj": RowwiseParallel(output_layouts=Shard(1)),
            "ln2": SequenceParallel(),
            "mlp": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
            "mlp.fc": ColwiseParallel(),
            "mlp.proj": RowwiseParallel(output_layouts=Shard(1)),
        })


def loss_context(tp: int):
    """Forward and backward of a TP model run inside torch's loss_parallel: cross-entropy on vocabulary shards."""
    if tp <= 1:
        return contextlib.nullcontext()
    from torch.distributed.tensor.parallel import loss_parallel

    return loss_parallel()


def local_loss(loss: torch.Tensor) -> torch.Tensor:
    """The loss as a plain tensor (loss_parallel returns a replicated DTensor)."""
    return loss.full_tensor() if hasattr(loss, "full_tensor") else loss
