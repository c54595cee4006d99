"""A hint for a command that starts no launcher on a job of several processes (stdlib only: runs in the image)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

LAUNCHERS = ("torchrun", "torch.distributed.run", "torch.distributed.launch", "accelerate", "deepspeed", "mpirun",
             "srun", "composer", "lightning")


def launcher_hint(argv: Sequence[str], environ: Mapping[str, str]) -> str | None:
    """For a command of a job of several processes that starts no launcher (`python train.py` on 2 nodes, which
    saw RANK None): where RANK, LOCAL_RANK and WORLD_SIZE come from, and the torchrun line that sets them."""
    try:
        nodes = int(environ.get("GCPGPU_NNODES") or 1)
        per_node = int(environ.get("GCPGPU_NPROC_PER_NODE") or 1)
    except ValueError:
        return None
    line = " ".join(argv)
    if nodes * per_node <= 1 or "RANK" in environ or any(word in line for word in LAUNCHERS):
        return None
    return (f"this command runs once per node ({nodes} node(s), GPUs for {per_node} process(es) each) and starts no "
            "launcher, so RANK, LOCAL_RANK and WORLD_SIZE are unset: start it with torchrun, e.g. 'torchrun "
            '--nnodes "$NNODES" --node-rank "$NODE_RANK" --nproc-per-node "$NPROC_PER_NODE" --master-addr '
            '"$MASTER_ADDR" --master-port "$MASTER_PORT" train.py\'')
