"""Where this process sits in the job: torchrun's variables, or Vertex AI's CLUSTER_SPEC turned into them.

The parsing here is pure Python; torch is imported only inside the functions that need it.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Mapping
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
    """What torchrun needs to know on one node; `sources` says where each value came from (gcpgpu.node.launch)."""

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


LEFT_KEY = "gcpgpu/ranks_left"
LEAVE_WAIT_S = 60.0  # how long rank 0 waits for the others to leave before it goes anyway


def destroy_process_group() -> None:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def leave_process_group(env: DistEnv, wait_s: float = LEAVE_WAIT_S, environ: Mapping[str, str] | None = None) -> None:
    """Leave the job's process group after a successful run so that no store client outlives the store.

    The job's TCPStore is served by rank 0's process (a hand launch) or by node 0's torchrun agent,
    which closes it once its workers have exited and the agents' exit barrier is done. A client
    still talking to it then fails with a C++ trace ("TCPStore ... Did the remote server shutdown or
    crash?") in a job that succeeded. So: a barrier (every rank has finished), the other ranks leave
    and say so as their last store call, and rank 0 leaves last; under torchrun it also waits until
    every other node's agent has checked in at the exit barrier, so node 0's agent is the last to
    arrive and no agent is left asking a store that has gone.
    """
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return
    if not env.distributed:
        dist.destroy_process_group()
        return
    store = dist.distributed_c10d._get_default_store()
    dist.barrier()
    if env.rank != 0:
        dist.destroy_process_group()
        store.add(LEFT_KEY, 1)  # this rank's last word to the store
        return
    _wait_until(lambda: store.add(LEFT_KEY, 0) >= env.world_size - 1, wait_s)
    _wait_for_other_agents(os.environ if environ is None else environ, wait_s)
    dist.destroy_process_group()


def _wait_until(done: Callable[[], bool], wait_s: float) -> bool:
    deadline = time.monotonic() + wait_s
    while not done():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _wait_for_other_agents(environ: Mapping[str, str], wait_s: float) -> None:
    """Under torchrun (the agent hosts the store): wait until the other nodes' agents are at their exit barrier.

    Reads torchelastic's own barrier counter (its names imported from torch, so a torch that
    renames them skips the wait rather than waiting on a key nobody writes)."""
    nnodes = int(environ.get("GROUP_WORLD_SIZE", "1") or 1)
    if environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True" or nnodes < 2:
        return
    try:
        from torch.distributed.elastic.agent.server.api import _TERMINAL_STATE_SYNC_ID
        from torch.distributed.elastic.utils.store import _NUM_MEMBERS
    except ImportError:
        return
    import torch.distributed as dist

    # The agents' store is prefixed with the run id (torchelastic's rendezvous); the workers' own is not.
    key = f"{environ.get('TORCHELASTIC_RUN_ID', 'none')}/{_TERMINAL_STATE_SYNC_ID}{_NUM_MEMBERS}"
    try:
        store = dist.TCPStore(environ["MASTER_ADDR"], int(environ["MASTER_PORT"]), is_master=False,
                              timeout=timedelta(seconds=max(1.0, wait_s)))
        _wait_until(lambda: store.add(key, 0) >= nnodes - 1, wait_s)
    except (KeyError, ValueError, RuntimeError):
        return  # no store to ask: leave as before
