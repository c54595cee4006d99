"""A parallel layout for a model on a machine: TP degree, DDP / FSDP / HSDP, activation checkpointing and
micro-batch, chosen from the memory plan (pure Python, no torch; `gcpgpu plan memory` prints it).

Every candidate gets the largest micro-batch whose plan, with the auto batch's margin, fits the GPU
(autobatch.fits). The cheapest candidate that reaches TARGET_TOKENS per micro-step wins; where none
does, the one with the largest micro-batch. Costs are rough step-time overheads, in this order of
preference: DDP's all-reduce overlaps backward (0); FSDP's all-gathers and reduce-scatters mostly
overlap too (HSDP keeps them inside the node); selective checkpointing recomputes only norms and
pointwise ops (a few %); tensor parallelism puts two all-gathers and two reduce-scatters per block on
the critical path, more with every doubling; full checkpointing runs every forward twice (a third more).
"""

from __future__ import annotations

from dataclasses import dataclass

from gcpgpu.trainer.autobatch import fits
from gcpgpu.trainer.config import LOSS_CHUNK_TOKENS
from gcpgpu.trainer.memory import GiB, plan_memory
from gcpgpu.trainer.sizes import DEFAULT_VOCAB_SIZE, get_size

TARGET_TOKENS = 8192  # per GPU per micro-step: enough to keep an H100's matmuls busy (8 x 1024)
MAX_MICRO = 64
AC_COST = {"none": 0.0, "selective": 0.05, "full": 0.33}
TP_COST = {1: 0.0, 2: 0.10, 4: 0.20, 8: 0.35}
SHARD_COST = {"none": 0.0, "ddp": 0.0, "hsdp": 0.01, "fsdp": 0.02}


@dataclass
class Layout:
    tp: int
    sharding: str  # none, ddp, fsdp or hsdp
    ac: str  # none, selective or full
    micro_batch: int  # 0: does not fit
    planned_bytes: int
    usable_bytes: int
    cost: float
    flags: str = ""
    why: str = ""


def _plan_bytes(model: str, micro: int, *, tp: int, sharding: str, ac: str, gpus: int, per_node: int,
                seq_len: int, precision: str, vocab_size: int, compile: bool) -> int:
    # HSDP shards over one node: per GPU it is FSDP on that node's GPUs.
    span = per_node if sharding == "hsdp" else gpus
    parallel = "fsdp" if sharding == "hsdp" else sharding
    compiled = compile and parallel == "none"  # the trainer compiles the whole model in one process only
    loss_chunk = 0 if compiled or tp > 1 else LOSS_CHUNK_TOKENS
    plan = plan_memory(model, span // tp * micro, seq_len, precision, parallel, span, None, vocab_size=vocab_size,
                       loss_chunk=loss_chunk, tp=tp, compiled=compiled)
    return plan.total_for(1 if ac == "full" else 0, selective=ac == "selective")


def candidates(model: str, gpus_per_node: int, nodes: int) -> list[tuple[int, str, str]]:
    """(tp, sharding, ac) the trainer can run on this machine."""
    heads = get_size(model).n_head
    gpus = gpus_per_node * nodes
    out = []
    shardings = ["none"] if gpus == 1 else ["ddp", "hsdp", "fsdp"] if nodes > 1 else ["ddp", "fsdp"]
    for tp in (1, 2, 4, 8):
        if tp > 1 and (gpus_per_node % tp or heads % tp):
            continue
        for sharding in shardings:
            if tp > 1 and sharding in ("ddp", "none"):
                sharding = "fsdp"  # --tp composes with FSDP2 (over one GPU's worth, if that is all)
            for ac in AC_COST:
                if (tp, sharding, ac) not in out:
                    out.append((tp, sharding, ac))
    return out


def _flags(lay: Layout, gpus_per_node: int) -> str:
    parts = {"none": [], "ddp": ["--parallel ddp"], "fsdp": ["--parallel fsdp"],
             "hsdp": ["--parallel fsdp", f"--fsdp-shard-size {gpus_per_node}"]}[lay.sharding]
    if lay.tp > 1:
        parts.append(f"--tp {lay.tp}")
    if lay.ac != "none":
        parts.append(f"--ac {lay.ac}")
    parts.append(f"--micro-batch {lay.micro_batch}")
    return " ".join(parts)


def propose(model: str, gpus_per_node: int, gpu_memory_bytes: int, *, nodes: int = 1, seq_len: int = 1024,
            precision: str = "bf16", vocab_size: int = DEFAULT_VOCAB_SIZE, compile: bool = True) -> Layout:
    """The layout to train `model` with on nodes x gpus_per_node GPUs of gpu_memory_bytes each (see the
    module docstring); its micro_batch is 0 when nothing fits."""
    gpus = gpus_per_node * nodes
    target = max(1, -(-TARGET_TOKENS // seq_len))
    tried: list[Layout] = []
    for tp, sharding, ac in candidates(model, gpus_per_node, nodes):
        best, best_bytes = 0, 0
        for micro in range(1, MAX_MICRO + 1):
            b = _plan_bytes(model, micro, tp=tp, sharding=sharding, ac=ac, gpus=gpus, per_node=gpus_per_node,
                            seq_len=seq_len, precision=precision, vocab_size=vocab_size, compile=compile)
            if not fits(b, gpu_memory_bytes):
                break
            best, best_bytes = micro, b
            if micro >= target * 4:  # far past the target: more only grows the batch
                break
        cost = AC_COST[ac] + TP_COST.get(tp, 0.5) + SHARD_COST[sharding]
        usable = int(gpu_memory_bytes * 0.9)
        tried.append(Layout(tp, sharding, ac, best, best_bytes, usable, cost))
    good = [lay for lay in tried if lay.micro_batch >= target]
    fitting = [lay for lay in tried if lay.micro_batch]
    if good:
        pick = min(good, key=lambda lay: lay.cost)
    elif fitting:
        pick = max(fitting, key=lambda lay: (lay.micro_batch, -lay.cost))
    else:
        pick = Layout(0, "", "", 0, 0, int(gpu_memory_bytes * 0.9), 0.0,
                      why=f"{model} does not fit on {gpus} GPUs of {gpu_memory_bytes / GiB:.0f} GiB in any layout "
                          "(FSDP, TP up to a node, full checkpointing, micro-batch 1); use more GPUs or nodes")
        return pick
    pick.flags = _flags(pick, gpus_per_node)
    pick.why = _why(pick, tried, model, gpus, target, seq_len)
    return pick


def _why(pick: Layout, tried: list[Layout], model: str, gpus: int, target: int, seq_len: int) -> str:
    def name(lay: Layout) -> str:
        s = {"none": "one GPU", "ddp": "DDP", "fsdp": "FSDP", "hsdp": "HSDP"}[lay.sharding]
        s += f" + TP {lay.tp}" if lay.tp > 1 else ""
        return s + ("" if lay.ac == "none" else f" + {lay.ac} AC")

    why = [f"{name(pick)}: micro-batch {pick.micro_batch} x {seq_len} tokens per GPU plans "
           f"{pick.planned_bytes / GiB:.1f} GiB of {pick.usable_bytes / GiB:.1f} usable (+10 % margin)"]
    cheaper = [lay for lay in tried if lay.cost < pick.cost]
    if cheaper:
        short = sorted(cheaper, key=lambda lay: lay.cost)[:3]
        why.append("cheaper layouts fall short of micro-batch " + str(target) + ": "
                   + ", ".join(f"{name(lay)} {'fits micro-batch ' + str(lay.micro_batch) if lay.micro_batch else 'does not fit'}"
                               for lay in short))
    if pick.tp == 1 and gpus > 1:
        why.append("no TP: it would put per-block collectives on the critical path, and sharding alone fits")
    return "; ".join(why)
