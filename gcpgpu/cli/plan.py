"""`gcpgpu plan`: estimates made before anything is created or run."""

from __future__ import annotations

import click

from gcpgpu.errors import UsageProblem
from gcpgpu.output import emit
from gcpgpu.settings import Settings
from gcpgpu.trainer.config import LOSS_CHUNK_TOKENS, TrainConfig

GIB = 1024**3


@click.group()
def plan() -> None:
    """Estimate before you spend: memory per GPU, a training run's time and cost, and the storage it needs."""


# Every default is the trainer's own (TrainConfig, no torch import), so `plan memory` and
# `python -m gcpgpu.trainer` given the same flags describe the same run.
_TRAINER = TrainConfig()


@plan.command()
@click.option("--model", default=_TRAINER.model, show_default=True,
              help="Model size: tiny, 124m, 350m, 774m, 1.3b, 2.7b or 6.7b.")
@click.option("--batch-size", type=int, default=_TRAINER.batch_size, show_default=True,
              help="Global batch in sequences (as the trainer's --batch-size).")
@click.option("--seq-len", type=int, default=_TRAINER.seq_len, show_default=True, help="Tokens per sequence.")
@click.option("--precision", default=_TRAINER.precision, show_default=True, help="fp32, bf16, fp16 or fp8.")
@click.option("--parallel", default=_TRAINER.parallel, show_default=True,
              help="auto (ddp on more than one GPU, else none), none, ddp or fsdp (FSDP counts as ZeRO-3).")
@click.option("--gpus", type=int, help="GPUs in all (default: the machine type's GPUs, else 1).")
@click.option("--grad-accum", type=int, default=_TRAINER.grad_accum, show_default=True,
              help="Gradient accumulation steps.")
@click.option("--loss-chunk", type=click.IntRange(min=0),
              help=f"Tokens per chunk of the output layer + loss (0: all logits at once). Default as the "
                   f"trainer's auto: 0 with --compile in one process (compile fuses the loss) or --tp, else "
                   f"{LOSS_CHUNK_TOKENS}.")
@click.option("--tp", type=click.IntRange(min=1), default=_TRAINER.tp, show_default=True,
              help="Tensor-parallel degree (the trainer's --tp; FSDP over the rest).")
@click.option("--ac", default=_TRAINER.ac, show_default=True,
              help="Activation checkpointing for the total: none, full, selective or K (every K-th block).")
@click.option("--compile/--no-compile", "compile_", default=_TRAINER.compile, show_default=True,
              help="The trainer's --compile: in one process it compiles the whole model, which the plan counts "
                   "(a fused loss, fewer saved tensors).")
@click.option("--machine-type", help="Check the fit against this machine's GPU memory (from the catalog), and "
                                     "propose a layout for the model on it.")
@click.option("--nodes", type=click.IntRange(min=1), default=1, show_default=True,
              help="Nodes of --machine-type for the proposed layout (more than one: HSDP is considered).")
@click.pass_obj
def memory(settings: Settings, model: str, batch_size: int, seq_len: int, precision: str, parallel: str,
           gpus: int | None, grad_accum: int, loss_chunk: int | None, tp: int, ac: str, compile_: bool,
           machine_type: str | None, nodes: int) -> None:
    """Per-GPU parameters, gradients, optimizer state and activations (with and without activation
    checkpointing), whether it fits, and the setting to use if it does not. With --machine-type, also
    the layout to train the model with there (TP degree, FSDP or HSDP, checkpointing, micro-batch), and why.

    Options and defaults are the trainer's: the same flags plan the run `python -m gcpgpu.trainer`
    (or torchrun over --gpus processes) would make.
    """
    from gcpgpu import catalog
    from gcpgpu.trainer import memory as mem
    from gcpgpu.trainer.sizes import SIZES

    if model.lower() not in SIZES:
        raise UsageProblem(f"--model {model!r} must be one of {', '.join(SIZES)}")
    if precision not in mem.PRECISIONS:
        raise UsageProblem(f"--precision {precision!r} must be one of {', '.join(mem.PRECISIONS)}")
    if parallel not in ("auto", *mem.PARALLELS):
        raise UsageProblem(f"--parallel {parallel!r} must be one of auto, {', '.join(mem.PARALLELS)}")
    mt = catalog.get_machine_type(machine_type) if machine_type else None
    gpus = gpus if gpus is not None else (mt.gpu_count if mt else 1)
    for flag, value in (("--batch-size", batch_size), ("--seq-len", seq_len), ("--gpus", gpus), ("--grad-accum", grad_accum)):
        if value < 1:
            raise UsageProblem(f"{flag} {value} must be at least 1")
    if gpus % tp:
        raise UsageProblem(f"--tp {tp} must divide the {gpus} GPUs (--gpus, or the machine type's)")
    dp = gpus // tp  # data-parallel ranks: a tensor-parallel group shares its micro-batch
    if batch_size % (dp * grad_accum):
        per = "--gpus" if tp == 1 else "--gpus / --tp"
        raise UsageProblem(f"--batch-size {batch_size} must be divisible by {per} x --grad-accum = {dp * grad_accum}")
    ac = ac.lower()
    if ac not in ("none", "full", "selective") and not (ac.isdigit() and int(ac) >= 1):
        raise UsageProblem(f"--ac {ac!r} must be none, full, selective or a block interval K >= 1")
    if parallel == "auto":  # as the trainer resolves it once it knows how many processes run
        parallel = "fsdp" if tp > 1 else "ddp" if gpus > 1 else "none"
    if parallel == "none" and gpus > 1:
        raise UsageProblem(f"--parallel none runs on one GPU, not --gpus {gpus}; use ddp or fsdp")
    compiled = compile_ and parallel == "none"  # the trainer's compile scope auto: whole model in one process
    if loss_chunk is None:
        loss_chunk = 0 if compiled or tp > 1 else LOSS_CHUNK_TOKENS
    gpu_bytes = mt.gpu.memory_gib * GIB if mt else None
    try:
        result = mem.plan_memory(model.lower(), batch_size, seq_len, precision, parallel, gpus, gpu_bytes,
                                 grad_accum=grad_accum, loss_chunk=loss_chunk, tp=tp, compiled=compiled)
    except ValueError as e:
        raise UsageProblem(f"--tp: {e}") from None  # the other options were checked above
    ac_every = {"none": 0, "full": 1, "selective": 0}[ac] if not ac.isdigit() else int(ac)
    total = result.total_for(ac_every, selective=ac == "selective")
    lay = None
    if mt:
        from gcpgpu.trainer.layout import propose

        lay = propose(model.lower(), mt.gpu_count, gpu_bytes, nodes=nodes, seq_len=seq_len,
                      precision=precision, compile=True)
    if settings.format != "table":
        emit({**result.to_dict(), "machine_type": mt.name if mt else None, "ac": ac, "total_for_ac_bytes": total,
              "layout": None if lay is None else {**vars(lay), "fits": lay.micro_batch > 0}})
        return
    title = f"Memory per GPU: {result.model}" + (f" on {mt.name} ({mt.gpu.model})" if mt else "")
    rows = result.rows()
    if ac != "none":
        rows.insert(-3, (f"total (--ac {ac})", f"{total / GIB:.2f} GiB"))
    if lay is not None:
        where = f"{nodes} x {mt.name}" if nodes > 1 else mt.name
        rows += [(f"proposed layout ({where}, seq {seq_len}, --compile)", lay.flags or "none fits"), ("why", lay.why)]
    emit([{"item": k, "value": v} for k, v in rows], [("item", "ITEM"), ("value", "PER GPU")], title=title)


@plan.command()
@click.option("--tokens-per-second", required=True, metavar="N",
              help="Training tokens per second, the whole cluster together.")
@click.option("--bytes-per-token", required=True, metavar="N",
              help="Bytes the data loader reads per training token (2 for uint16 token files; more for raw text, "
                   "images or audio).")
@click.option("--checkpoint-size", required=True, metavar="SIZE",
              help="One checkpoint, all shards together (e.g. 120GiB, 1.5TiB; GB and TB are 10^9 and 10^12 bytes).")
@click.option("--save-time", required=True, metavar="DURATION",
              help="How long a checkpoint save may take, e.g. 60s or 2m.")
@click.option("--keep", default="2", show_default=True, metavar="N",
              help="Checkpoints kept on the file system at once (1 to 10,000).")
@click.option("--data-size", metavar="SIZE", help="The data set, if it lives on the file system too (e.g. 4TiB).")
def storage(tokens_per_second: str, bytes_per_token: str, checkpoint_size: str, save_time: str, keep: str,
            data_size: str | None) -> None:
    """The shared file system tier and size a training run needs (cluster up --filestore / --lustre).

    \b
      read  = tokens/s x bytes/token
      write = checkpoint size / save time
      space = checkpoint size x keep + data size
      size  = the tier's smallest valid capacity whose promised read and write
              rates (per TiB provisioned) and space cover all three

    The first row is the recommendation: the tier needing the least capacity. Rates are whole-instance
    promises from Google's tier pages (gcpgpu/storage/tiers.py names each source).
    """
    from gcpgpu.storage import sizing
    from gcpgpu.storage.sizing import figure, need, options, whole
    from gcpgpu.storage.spec import parse_gib
    from gcpgpu.times import parse_duration

    # Every figure checked, finite and in its range, before any arithmetic (sizing.py's bounds).
    tokens = figure(tokens_per_second, "--tokens-per-second", *sizing.TOKENS_PER_S)
    per_token = figure(bytes_per_token, "--bytes-per-token", *sizing.BYTES_PER_TOKEN)
    checkpoint = parse_gib(checkpoint_size, "--checkpoint-size", positive=True)
    seconds = parse_duration(save_time, "--save-time", at_least=1, at_most=86400)
    n = need(tokens, per_token, checkpoint, seconds, whole(keep, "--keep", *sizing.KEEP),
             parse_gib(data_size, "--data-size") if data_size else 0)
    rows = [o.row() for o in options(n)]
    emit(rows, [("service", "SERVICE"), ("tier", "TIER"), ("size_gib", "SIZE GiB"), ("read_mib_s", "READ MiB/s"),
                ("write_mib_s", "WRITE MiB/s"), ("flag", "CLUSTER UP FLAGS")],
         title=f"Needs: read {n.read_mib_s:,.0f} MiB/s, write {n.write_mib_s:,.0f} MiB/s, {n.space_gib:,.0f} GiB")


# `plan train` lives in its own module (plan_train.py); added here so it is `gcpgpu plan train`.
from gcpgpu.cli.plan_train import train  # noqa: E402 - the group above must exist first

plan.add_command(train)
