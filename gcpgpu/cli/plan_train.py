"""`gcpgpu plan train`: how long a training run takes and what it costs, before anything is booked."""

from __future__ import annotations

from typing import Any

import click

from gcpgpu.errors import UsageProblem
from gcpgpu.output import emit, info

GIB = 1024**3
MODELS = {"standard": "STANDARD", "spot": "SPOT", "flex-start": "FLEX_START", "reservation": "RESERVATION_BOUND"}


def _count(value: str | None, flag: str, *, whole: bool = False) -> float | None:
    from gcpgpu.trainer.duration import parse_count

    if value is None:
        return None
    number = parse_count(value)
    if number is None or number <= 0 or (whole and number != int(number)):
        kind = "a whole number" if whole else "a number"
        raise UsageProblem(f"{flag} {value!r} must be {kind} above 0 (e.g. 1.4T, 70B, 2048)")
    return number


class Shape:
    """The model: its parameter count for FLOPs, and its shape where known (attention FLOPs, memory fit)."""

    def __init__(self, model: str | None, params: str | None, layers: int | None, d_model: int | None,
                 vocab: int, seq_len: int) -> None:
        from gcpgpu.trainer import sizes

        given = [f for f, v in (("--model", model), ("--params", params), ("--layers/--d-model", layers or d_model))
                 if v]
        if len(given) != 1:
            raise UsageProblem("give the model as one of --model SIZE, --params N, or --layers L --d-model D"
                               + (f" (not {' and '.join(given)})" if given else ""))
        self.size: sizes.ModelSize | None = None
        if model is not None:
            if model.lower() not in sizes.SIZES:
                raise UsageProblem(f"--model {model!r} must be one of {', '.join(sizes.SIZES)} "
                                   "(or give --params N, or --layers L --d-model D)")
            self.size = sizes.SIZES[model.lower()]
        elif layers or d_model:
            if not layers or not d_model or layers < 1 or d_model < 64 or d_model % 64:
                raise UsageProblem(f"--layers {layers} --d-model {d_model}: give both, --layers at least 1 and "
                                   "--d-model a multiple of 64")
            self.size = sizes.ModelSize(f"{layers} layers x d_model {d_model}", layers, max(1, d_model // 128), d_model)
        self.vocab, self.seq_len = vocab, seq_len
        if self.size is not None:
            self.params = float(sizes.param_count(self.size, vocab, seq_len))
            self.matmul_params = float(sizes.matmul_params(self.size, vocab, seq_len))
        else:
            self.params = self.matmul_params = float(_count(params, "--params") or 0)

    def flops_per_token(self) -> float:
        from gcpgpu.trainer.duration import flops_per_token

        if self.size is None:
            return 6 * self.params  # no shape: no attention term (said in the output)
        return flops_per_token(self.matmul_params, self.size.n_layer, self.size.n_embd, self.seq_len)

    def formula(self) -> str:
        if self.size is None:
            return "6N (attention left out: give --layers and --d-model to count it)"
        return f"6N + 12 x layers {self.size.n_layer} x d_model {self.size.n_embd} x seq {self.seq_len}"

    def per_gpu_bytes(self, gpus: int, gpu_bytes: int) -> tuple[bool, int]:
        """(fits, bytes per GPU) for FSDP over `gpus` GPUs, micro-batch 1, activation checkpointing if needed:
        plan memory's estimate where the shape is known; weights, gradients and AdamW state (16 B a parameter,
        sharded) where only the count is."""
        from gcpgpu.trainer.config import LOSS_CHUNK_TOKENS
        from gcpgpu.trainer.memory import RESERVED_FRACTION, plan_memory

        usable = int(gpu_bytes * (1 - RESERVED_FRACTION))
        if self.size is None:
            need = int(16 * self.params / gpus)
            return need <= usable, need
        plan = plan_memory(self.size, gpus, self.seq_len, "bf16", "fsdp" if gpus > 1 else "none", gpus, gpu_bytes,
                           vocab_size=self.vocab, loss_chunk=LOSS_CHUNK_TOKENS)
        if plan.fits:
            return True, plan.total_bytes
        return bool(plan.fits_with_ac), plan.total_ac_bytes


def _fewest_nodes(shape: Shape, per_node: int, gpu_bytes: int) -> int | None:
    nodes = 1
    while nodes <= 65536:
        if shape.per_gpu_bytes(nodes * per_node, gpu_bytes)[0]:
            return nodes
        nodes *= 2
    return None


def _refine(shape: Shape, per_node: int, gpu_bytes: int, upper: int) -> int:
    low = max(1, upper // 2)
    for nodes in range(low, upper + 1):
        if shape.per_gpu_bytes(nodes * per_node, gpu_bytes)[0]:
            return nodes
    return upper


@click.command("train")
@click.option("--model", metavar="SIZE", help="A named size of the bundled trainer (as plan memory's --model).")
@click.option("--params", metavar="N", help="Parameters, e.g. 70B (no shape: no attention FLOPs, a rough memory check).")
@click.option("--layers", type=int, help="Transformer layers (with --d-model).")
@click.option("--d-model", "d_model", type=int, help="Model width (with --layers).")
@click.option("--vocab-size", type=click.IntRange(min=1), default=None, help="Vocabulary (default: the trainer's 50304).")
@click.option("--seq-len", type=click.IntRange(min=1), default=None, help="Tokens per sequence (default: the trainer's).")
@click.option("--tokens", required=True, metavar="N", help="Training tokens, e.g. 1.4T.")
@click.option("--machine-type", required=True, help="GPU machine type (see 'gcpgpu catalog').")
@click.option("--nodes", type=int, help="Nodes (default: the fewest the model fits on, or what --days needs).")
@click.option("--provisioning", default="standard", show_default=True, help="standard, spot, flex-start or reservation.")
@click.option("--region", "price_region", metavar="REGION", help="Price in this region (default: us-central1).")
@click.option("--mfu", type=float, help="Model FLOPs utilization to assume, 0-1 (default: a published run's).")
@click.option("--tokens-per-second", "measured", metavar="N",
              help="Your measured throughput, the whole run (replaces the MFU estimate).")
@click.option("--budget", metavar="USD", help="Say whether the run fits this budget, and what it buys.")
@click.option("--days", metavar="D", help="Propose the nodes that finish in D days.")
@click.pass_obj
def train(settings: Any, model: str | None, params: str | None, layers: int | None, d_model: int | None,
          vocab_size: int | None, seq_len: int | None, tokens: str, machine_type: str, nodes: int | None,
          provisioning: str, price_region: str | None, mfu: float | None, measured: str | None,
          budget: str | None, days: str | None) -> None:
    """Hours and dollars of a training run: FLOPs from the model (6N plus attention, 12 x layers x d_model x
    seq per token), the GPUs' dense bf16 peak, an MFU that published runs of that GPU and size reached (its
    source printed; --mfu or --tokens-per-second to give yours), and the node's price from the Cloud Billing
    Catalog. Perfect scaling with the node count is assumed. With --days it proposes the nodes that finish
    in time; with --budget it says what the budget buys.

    \b
    Example (LLaMA-65B's run, 2048 A100 80GB):
      gcpgpu plan train --layers 80 --d-model 8192 --vocab-size 32000 --seq-len 2048 \\
        --tokens 1.4T --machine-type a2-ultragpu-8g --nodes 256
    """
    from gcpgpu import catalog
    from gcpgpu.cli.catalog import price_region as region_of
    from gcpgpu.trainer.config import TrainConfig
    from gcpgpu.trainer.duration import assumed_mfu, estimate, gpus_for_days, nodes_for
    from gcpgpu.trainer.sizes import DEFAULT_VOCAB_SIZE

    # Every check before any API call (the price is the only one).
    total_tokens = _count(tokens, "--tokens")
    machine = catalog.get_machine_type(machine_type)
    region = region_of(settings, price_region)
    if provisioning.lower() not in MODELS:
        raise UsageProblem(f"--provisioning {provisioning!r} must be one of {', '.join(MODELS)}")
    if nodes is not None and nodes < 1:
        raise UsageProblem(f"--nodes {nodes} must be at least 1")
    if mfu is not None and not 0 < mfu <= 1:
        raise UsageProblem(f"--mfu {mfu} must be above 0 and at most 1 (e.g. 0.4 for 40 %)")
    rate = _count(measured, "--tokens-per-second")
    budget_usd, want_days = _count(budget, "--budget"), _count(days, "--days")
    shape = Shape(model, params, layers, d_model, vocab_size or DEFAULT_VOCAB_SIZE, seq_len or TrainConfig().seq_len)
    gpu_bytes = machine.gpu.memory_gib * GIB
    peak = float(machine.gpu.peak_bf16_tflops or 0) * 1e12
    if not peak:
        raise UsageProblem(f"--machine-type {machine.name}: the catalog has no bf16 peak for its {machine.gpu.model}")
    assumed = assumed_mfu(machine.gpu.model, shape.params)
    mfu_value, mfu_source = (mfu, "--mfu") if mfu is not None else (assumed.value, assumed.source)
    per_token = shape.flops_per_token()
    fewest = _fewest_nodes(shape, machine.gpu_count, gpu_bytes)
    if fewest is None:
        raise UsageProblem(f"--machine-type {machine.name}: the model does not fit its {machine.gpu.memory_gib} GiB "
                           "GPUs at any node count (micro-batch 1, FSDP, activation checkpointing)")
    fewest = _refine(shape, machine.gpu_count, gpu_bytes, fewest)
    for_days = None
    if want_days:
        for_days = max(fewest, nodes_for(gpus_for_days(total_tokens, per_token, want_days, peak, mfu_value),
                                         machine.gpu_count))
    chosen = nodes or for_days or fewest
    fits, need = shape.per_gpu_bytes(chosen * machine.gpu_count, gpu_bytes)
    if not fits:
        raise UsageProblem(f"--nodes {chosen}: the model needs about {need / GIB:,.0f} GiB per GPU on {chosen} x "
                           f"{machine.name} ({machine.gpu.memory_gib} GiB GPUs, FSDP, activation checkpointing); "
                           f"it fits from --nodes {fewest}")
    run = estimate(total_tokens, per_token, chosen * machine.gpu_count, peak, mfu_value, rate)
    _show(settings, shape, machine, region, provisioning.lower(), chosen, run, mfu_source, need, fewest, for_days,
          want_days, budget_usd, total_tokens)


def _show(settings: Any, shape: Shape, machine: Any, region: str, provisioning: str, nodes: int, run: Any,
          mfu_source: str, need: int, fewest: int, for_days: int | None, want_days: float | None,
          budget: float | None, tokens: float) -> None:
    from gcpgpu import pricing

    book = pricing.current()
    prices = book.node(machine, region)
    per_node = prices.of(MODELS[provisioning])
    hours = run.seconds / 3600
    cost = None if per_node is None else per_node * nodes * hours
    per_gpu_rate = run.tokens_per_s / run.gpus
    out: dict[str, Any] = {
        "model": shape.size.name if shape.size else f"{shape.params:,.0f} parameters", "params": shape.params,
        "seq_len": shape.seq_len, "tokens": tokens, "flops_per_token": run.flops_per_token,
        "flops_formula": shape.formula(), "total_flops": run.total_flops, "machine_type": machine.name,
        "nodes": nodes, "gpus": run.gpus, "gpu": machine.gpu.model, "peak_flops_per_gpu": run.peak_flops,
        "mfu": run.mfu, "mfu_source": mfu_source, "tokens_per_s": run.tokens_per_s,
        "tokens_per_s_per_gpu": per_gpu_rate, "tokens_per_s_given": run.given, "implied_mfu": run.implied_mfu,
        "hours": hours, "days": run.days, "region": region,
        "provisioning": provisioning, "price_per_node_hour": per_node, "price_source": prices.source,
        "prices_as_of": prices.as_of, "price_note": book.note,
        "cost_usd": None if cost is None else round(cost, 2), "memory_per_gpu_gib": round(need / GIB, 1),
        "fewest_nodes": fewest, "nodes_for_days": for_days,
        "budget_usd": budget, "budget_covers": None if cost is None or budget is None else cost <= budget,
        "tokens_budget_buys": None if cost is None or budget is None else tokens * min(1.0, budget / cost),
    }
    if settings.format != "table":
        emit(out)
        return
    money = "-" if cost is None else f"${cost:,.0f}"
    price = "-" if per_node is None else f"${per_node:,.2f}"
    rows = [
        ("model", f"{out['model']}: {shape.params / 1e9:,.2f}B parameters, seq {shape.seq_len}"),
        ("FLOPs per token", f"{run.flops_per_token:.3g} ({shape.formula()})"),
        ("FLOPs in all", f"{run.total_flops:.3g} for {tokens:.3g} tokens"),
        ("GPUs", f"{nodes} x {machine.name} = {run.gpus} x {machine.gpu.model}, "
                 f"{run.peak_flops / 1e12:,.0f} TFLOP/s dense bf16 each"),
        ("MFU assumed", f"{run.mfu:.0%} ({mfu_source})"),
        ("throughput", f"{run.tokens_per_s:,.0f} tokens/s ({per_gpu_rate:,.0f} per GPU)"
                       + (f", as given: {run.implied_mfu:.0%} MFU" + (" - more than these GPUs can do"
                                                                       if run.implied_mfu > 1 else "")
                          if out["tokens_per_s_given"] else "")),
        ("time", f"{hours:,.0f} hours = {run.days:,.1f} days (perfect scaling assumed)"),
        ("memory per GPU", f"about {need / GIB:,.1f} GiB of {machine.gpu.memory_gib} (fits from {fewest} "
                           f"node{'s' if fewest > 1 else ''})"),
        ("price per node-hour", f"{price} ({provisioning}, {region}, {prices.source} of {prices.as_of})"),
        ("cost", f"{money} for {nodes * hours:,.0f} node-hours"),
    ]
    if for_days is not None:
        rows.append((f"nodes for {want_days:g} days", f"{for_days} (--nodes {for_days})"))
    if budget is not None and cost is not None:
        verdict = ("within it" if cost <= budget else
                   f"over it: it buys {out['tokens_budget_buys']:.3g} tokens ({budget / cost:.0%})")
        rows.append(("budget", f"${budget:,.0f}: {verdict}; the cost does not depend on the node count "
                               "(perfect scaling)"))
    emit([{"item": k, "value": v} for k, v in rows], [("item", "ITEM"), ("value", "ESTIMATE")],
         title=f"Training time and cost on {machine.name}")
    info(f"Prices: {book.note}.")
