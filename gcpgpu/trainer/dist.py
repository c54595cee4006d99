"""Where this process sits in the job: torchrun's variables, or Vertex AI's CLUSTER_SPEC turned into them.

The parsing here is pure Python; torch is imported only inside the functions that need it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta

# Vertex's pools: 0 is the chief, 1 the other workers; 2 (reduction server / parameter server) and
# 3 (evaluator) do not train.
TRAINING_POOLS = ("workerpool0", "workerpool1")


@dataclass(frozen=True)
class DistEnv:
    """Rank layout of this process; the defaults describe a plain single-process run."""

    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    local_world_size: int = 1
    master_addr: str = "127.0.0.1"
    master_port: int = 29500

    @property
    def nnodes(self) -> int:
        return max(1, self.world_size // self.local_world_size)

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def read_env(environ: dict[str, str] | None = None) -> DistEnv:
    """The layout torchrun (or a hand launch setting RANK/WORLD_SIZE/...) gives this process."""
    env = os.environ if environ is None else environ
    world = int(env.get("WORLD_SIZE", "1"))
    return DistEnv(
        rank=int(env.get("RANK", "0")),
        local_rank=int(env.get("LOCAL_RANK", env.get("RANK", "0"))),
        world_size=world,
        local_world_size=int(env.get("LOCAL_WORLD_SIZE", str(world))),
        master_addr=env.get("MASTER_ADDR", "127.0.0.1"),
        master_port=int(env.get("MASTER_PORT", "29500")),
    )


@dataclass(frozen=True)
class Rendezvous:
    """What torchrun needs to know on one node; `sources` says where each value came from (gcpgpu.launch)."""

    nnodes: int
    node_rank: int
    master_addr: str
    master_port: int
    sources: Mapping[str, str] = field(default_factory=dict)


def rendezvous_from_cluster_spec(spec: str) -> Rendezvous:
    """Turn Vertex's CLUSTER_SPEC JSON into torchrun's --nnodes/--node-rank/--master-addr/--master-port.

    Nodes are numbered chief first (workerpool0), then workerpool1 in index order; the chief's host:port
    is the rendezvous. Raises ValueError on a spec this trainer cannot run in.
    """
    try:
        data = json.loads(spec)
        cluster = data["cluster"]
        task = data["task"]
        pool, index = task["type"], int(task.get("index", 0))
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"CLUSTER_SPEC is not the JSON Vertex sets ({e})") from None
    if pool not in TRAINING_POOLS:
        raise ValueError(f"CLUSTER_SPEC task type {pool!r} does not train; run the trainer in workerpool0/1")
    chief = cluster.get("workerpool0") or []
    if len(chief) != 1:
        raise ValueError(f"CLUSTER_SPEC needs exactly one workerpool0 host, found {len(chief)}")
    workers = cluster.get("workerpool1") or []
    host, _, port = chief[0].rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"CLUSTER_SPEC workerpool0 entry {chief[0]!r} is not host:port")
    node_rank = 0 if pool == "workerpool0" else 1 + index
    if pool == "workerpool1" and index >= len(workers):
        raise ValueError(f"CLUSTER_SPEC task index {index} is past the {len(workers)} workerpool1 hosts")
    return Rendezvous(nnodes=1 + len(workers), node_rank=node_rank, master_addr=host, master_port=int(port))


def torchrun_args_from_cluster_spec(spec: str, nproc_per_node: int) -> list[str]:
    """torchrun flags for this Vertex node; MASTER_PORT in the environment overrides the spec's port."""
    rdzv = rendezvous_from_cluster_spec(spec)
    port = int(os.environ.get("MASTER_PORT", rdzv.master_port))
    return [f"--nnodes={rdzv.nnodes}", f"--node-rank={rdzv.node_rank}", f"--nproc-per-node={nproc_per_node}",
            f"--master-addr={rdzv.master_addr}", f"--master-port={port}"]


# How a stuck or failed NCCL collective ends. torch's default (3: tear down) has the watchdog thread
# abort the process: SIGABRT and a C++ trace on every rank. 2 (clean up only, documented beside it in
# torch.distributed's environment variables) aborts the communicators instead, which ends the stuck
# kernels, and the failure surfaces in the training loop as an exception: main() then prints one line
# and exits 1, as for a lost gloo peer. Never run on a GPU here: unverified in practice.
NCCL_ENV_DEFAULTS = {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "2"}


def init_process_group(env: DistEnv, device_type: str, timeout_s: float) -> None:
    """Join the job's process group: NCCL for CUDA tensors plus gloo for CPU ones, or gloo alone on CPU."""
    import torch
    import torch.distributed as dist

    timeout = timedelta(seconds=timeout_s)
    if env.world_size == 1:
        # One process (e.g. --parallel fsdp on one GPU): an in-memory store, no port to find.
        kwargs = {"store": dist.HashStore(), "rank": 0, "world_size": 1}
    else:
        # env:// rendezvous (torchrun sets these; a hand launch may leave them to the defaults).
        os.environ.setdefault("MASTER_ADDR", env.master_addr)
        os.environ.setdefault("MASTER_PORT", str(env.master_port))
        kwargs = {"rank": env.rank, "world_size": env.world_size}
    if device_type == "cuda":
        for key, value in NCCL_ENV_DEFAULTS.items():
            os.environ.setdefault(key, value)  # a value the user set wins
        device = torch.device("cuda", env.local_rank)
        torch.cuda.set_device(device)
        # cpu:gloo lets small host-side agreements (the SIGTERM flag) avoid a GPU sync.
        dist.init_process_group("cuda:nccl,cpu:gloo", timeout=timeout, device_id=device, **kwargs)
    else:
        dist.init_process_group("gloo", timeout=timeout, **kwargs)


def destroy_process_group() -> None:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
