"""Options of the trainer: command line (argparse, so containers need no click) and an optional YAML/JSON file.

Every bad option is rejected before any process group or model exists, with one line that names the
option and says what would be right, and exit code 2.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from gcpgpu.trainer.ckpt_local import MODES as CKPT_MODES
from gcpgpu.trainer.ckpt_local import vertex_checkpoint_dir
from gcpgpu.trainer.sizes import SIZES

PARALLELS = ("auto", "none", "ddp", "fsdp")  # auto: ddp when more than one process runs, else none
PRECISIONS = ("fp32", "bf16", "fp16", "fp8")
# Set by the offline emulator (or a user who means it): GPU-only options run on CPU instead of failing.
ALLOW_CPU_ENV = "GCPGPU_TRAINER_ALLOW_CPU"
PROG = "gcpgpu.trainer"
# The oldest torch the trainer runs on: the release line the tests and the image use. It equals
# TORCH_MIN in containers/versions.env (a test checks; the trainer imports nothing outside itself).
MIN_TORCH = "2.13"
# Set to the exact torch version in use to run on an older torch anyway, for a measurement on a machine
# whose torch cannot be changed (gpu_check --accept-torch does this, and says so in its report).
ACCEPT_TORCH_ENV = "GCPGPU_TRAINER_ACCEPT_TORCH"
LOSS_CHUNK_TOKENS = 2048  # --loss-chunk auto where the output layer and its loss run eagerly


class ConfigError(Exception):
    """A bad option: its message is the single line the user sees."""


@dataclass
class TrainConfig:
    """All trainer options; field names are the long options with '-' turned into '_'."""

    model: str = "tiny"
    parallel: str = "auto"  # resolved by resolve_auto once the launch is known
    precision: str = "fp32"
    data: str = "synthetic"
    data_dtype: str = "uint16"
    tokenizer: str = "byte"
    vocab_size: int | None = None
    steps: int = 100
    batch_size: int | str = 8  # or "auto": the largest the memory plan fits
    micro_batch: int | str | None = None  # or "auto"; sets grad_accum = batch / (ranks x micro_batch)
    memory_budget: str | None = None  # device memory the auto batch plans for, e.g. 40GiB (default: the GPU's)
    seq_len: int = 256
    grad_accum: int = 1
    # Chunked output layer + loss: no (tokens x vocab) fp32 logits, which at 124m outweigh the model's state.
    # auto: the plain loss where the whole model is compiled (Inductor fuses the log-softmax and its
    # gradient: one H100, 124m batch 16, 1.56x the chunked path's tokens/s at 1.1x its peak memory),
    # else chunks of LOSS_CHUNK_TOKENS (the eager head; FSDP's per-block compile).
    loss_chunk: int | str = "auto"
    lr: float = 6e-4
    min_lr: float | None = None
    warmup_steps: int | None = None
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    grad_clip: float = 1.0
    seed: int = 1337
    tie_embeddings: bool = True
    compile: bool = False
    compile_mode: str = "default"
    # block: one compile serves every identical block and FSDP's hooks stay outside the graphs;
    # model: one graph over everything (embeddings, head, loss), fewer launches, the loss fused.
    # auto: model in one process (measured on one H100: 124m 1.33x, 350m 1.12x issue 30's block-compiled
    # tokens/s), block with DDP (not yet measured whole) and FSDP.
    compile_scope: str = "auto"
    # Next step's batch gathered and pinned on a thread while the GPU runs this one (off the critical path).
    prefetch: bool = True
    ac: str = "none"
    optimizer_impl: str = "auto"
    tf32: bool = True
    ddp_bucket_mb: int = 25
    ddp_static_graph: bool = True
    ddp_comm_hook: str = "none"
    powersgd_rank: int = 4
    fsdp_reshard_after_forward: bool = True
    fsdp_shard_size: int | None = None
    tp: int = 1  # tensor-parallel degree inside a node (parallel_tp.py); FSDP2 over the rest
    fp16_init_scale: float = 2.0**16
    fp8_recipe: str = "tensorwise"
    fp8_filter: str = "auto"
    device: str = "auto"
    ckpt_dir: str | None = None
    ckpt_every: int = 0
    ckpt_keep: int = 2
    ckpt_mode: str = "auto"  # async where a local disk exists, else sync (ckpt_local.py)
    ckpt_local_dir: str | None = None
    resume: bool = False
    profile_steps: str | None = None
    profile_dir: str = "profile"
    log_json: str | None = None
    log_every: int = 10
    eval_every: int = 0
    eval_steps: int = 20
    val_fraction: float = 0.01
    tensorboard_dir: str | None = None
    stop_check_every: int = 5
    timing_warmup: int | None = None
    dist_timeout: float = 600.0
    quiet: bool = False
    config: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        # A YAML file may say `ac: 2` or `model: 124M`; keep the string forms the checks expect.
        self.model = str(self.model).lower()
        self.ac = str(self.ac).lower()
        self.data = str(self.data)
        if self.profile_steps is not None:
            self.profile_steps = str(self.profile_steps)

    @property
    def ac_every(self) -> int:
        """0: no activation checkpointing; k: every k-th block (1 = every block)."""
        return {"none": 0, "full": 1, "selective": 0}[self.ac] if not self.ac.isdigit() else int(self.ac)

    @property
    def profile_window(self) -> tuple[int, int] | None:
        if not self.profile_steps:
            return None
        a, b = self.profile_steps.split(":")
        return int(a), int(b)

    @property
    def timing_skip(self) -> int:
        """Steps left out of the speed figures: compile and allocator warm-up."""
        if self.timing_warmup is not None:
            return self.timing_warmup
        return 10 if self.compile else 3


class _Parser(argparse.ArgumentParser):
    """argparse, but an error is one line (no usage block) and exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        fail(message)


def fail(message: str) -> None:
    """Print one error line (rank 0 only, so torchrun shows it once) and exit 2."""
    if os.environ.get("RANK", "0") == "0":
        print(f"{PROG}: error: {message}", file=sys.stderr, flush=True)
    sys.exit(2)


def _bool(p: argparse.ArgumentParser, name: str, help: str) -> None:
    p.add_argument(f"--{name}", action=argparse.BooleanOptionalAction, default=argparse.SUPPRESS, help=help)


def build_parser() -> argparse.ArgumentParser:
    d = TrainConfig()
    p = _Parser(prog=f"python -m {PROG}", description="Train a GPT on CPU or GPUs (alone or under torchrun).",
                argument_default=argparse.SUPPRESS)
    a = p.add_argument
    a("--config", help="YAML or JSON file of options (keys like batch_size or batch-size); flags override it")
    g = p.add_argument_group("model and data")
    g.add_argument("--model", help=f"size: {', '.join(SIZES)} (default {d.model})")
    g.add_argument("--data", help="'synthetic', a token file (*.bin, nanoGPT layout) or a text file")
    g.add_argument("--data-dtype", help="element type of a .bin token file: uint16 or uint32 (default uint16)")
    g.add_argument("--tokenizer", help="for text files: byte (built in) or gpt2 (needs tiktoken)")
    g.add_argument("--vocab-size", type=int, help="vocabulary size (default: from the tokenizer or data type)")
    _bool(g, "tie-embeddings", "share the token embedding with the output layer (default on)")
    g.add_argument("--seq-len", type=int, help=f"tokens per sequence (default {d.seq_len})")
    g.add_argument("--batch-size", type=_int_or_auto,
                   help=f"GLOBAL batch in sequences per optimizer step, or auto: ranks x grad-accum x the largest "
                        f"micro-batch the memory plan fits (default {d.batch_size})")
    g.add_argument("--grad-accum", type=int, help="micro-steps per optimizer step (default 1)")
    g.add_argument("--micro-batch", type=_int_or_auto,
                   help="sequences per rank per micro-step, or auto (the largest the memory plan fits); "
                        "gradient accumulation makes up --batch-size")
    g.add_argument("--memory-budget",
                   help="device memory for the auto batch, e.g. 40GiB or 38000MiB (default: the GPU's total)")
    g.add_argument("--loss-chunk", type=_int_or_auto,
                   help=f"tokens per chunk of the output layer + loss, so no full fp32 logits exist "
                        f"(0 = all at once; default auto: 0 when the whole model is compiled, which fuses "
                        f"the loss, else {LOSS_CHUNK_TOKENS})")
    g.add_argument("--steps", type=int, help=f"optimizer steps (default {d.steps})")
    g.add_argument("--seed", type=int, help="seed for weights and data order")
    g = p.add_argument_group("optimizer")
    g.add_argument("--lr", type=float, help=f"peak learning rate (default {d.lr})")
    g.add_argument("--min-lr", type=float, help="final learning rate of the cosine decay (default lr/10)")
    g.add_argument("--warmup-steps", type=int, help="linear warm-up steps (default min(100, steps/10))")
    g.add_argument("--weight-decay", type=float)
    g.add_argument("--beta1", type=float)
    g.add_argument("--beta2", type=float)
    g.add_argument("--grad-clip", type=float, help="clip the global gradient norm (0 = off; default 1.0)")
    g.add_argument("--optimizer-impl", help="AdamW kernel: auto (fused on CUDA), fused, foreach or for")
    g = p.add_argument_group("parallelism and precision")
    g.add_argument("--parallel", help="auto (default: ddp when more than one process runs, else none), none, ddp "
                   "or fsdp (FSDP2; HSDP across nodes)")
    g.add_argument("--precision", help="fp32, bf16, fp16 (with loss scaling) or fp8 (torchao, Hopper+)")
    g.add_argument("--device", help="auto (CUDA when present), cuda or cpu")
    _bool(g, "tf32", "let fp32 matmuls use TF32 tensor cores (default on)")
    g.add_argument("--ddp-bucket-mb", type=int, help="DDP gradient bucket size in MB (default 25)")
    _bool(g, "ddp-static-graph", "tell DDP the graph is the same every step (default on)")
    g.add_argument("--ddp-comm-hook", help="none, bf16, fp16 (compressed all-reduce) or powersgd")
    g.add_argument("--powersgd-rank", type=int, help="matrix approximation rank for powersgd (default 4)")
    _bool(g, "fsdp-reshard-after-forward", "free gathered weights after forward (ZeRO-3; default on)")
    g.add_argument("--fsdp-shard-size", type=int,
                   help="GPUs per shard group; fewer than the world gives HSDP (default: GPUs per node when multi-node)")
    g.add_argument("--tp", type=int, help="tensor-parallel degree: split each layer over N GPUs of a node (NVLink), "
                   "with sequence parallelism, and FSDP2 over the rest (default 1: none)")
    g.add_argument("--fp16-init-scale", type=float, help="initial loss scale for fp16 (default 65536)")
    g.add_argument("--fp8-recipe", help="torchao float8 recipe: tensorwise or rowwise")
    g.add_argument("--fp8-filter", help="which block linears go fp8: auto (torchao's size thresholds, default) or all")
    g = p.add_argument_group("speed")
    _bool(g, "compile", "torch.compile the whole model in one process, each block otherwise (--compile-scope; "
                        "default off)")
    g.add_argument("--compile-scope", help="auto (default: model in one process, else block), block (FSDP-friendly, "
                   "compiles once) or model (one graph with the head and loss; one GPU or DDP)")
    _bool(g, "prefetch", "prepare the next batch on a thread while this step runs (default on)")
    g.add_argument("--compile-mode", help="default, max-autotune, max-autotune-no-cudagraphs or reduce-overhead (CUDA graphs)")
    g.add_argument("--ac", help="activation checkpointing: none, full (recompute whole blocks), K (every K-th "
                   "block), or selective (every block keeps its matmul and attention outputs, recomputes the rest)")
    g = p.add_argument_group("checkpoints")
    g.add_argument("--ckpt-dir", help="folder for torch.distributed.checkpoint saves (shared by all nodes)")
    g.add_argument("--ckpt-every", type=int, help="save every N steps (0 = only at the end and on SIGTERM)")
    g.add_argument("--ckpt-keep", type=int, help="how many recent checkpoints to keep (default 2)")
    g.add_argument("--ckpt-mode", help="async (save to a local disk, upload in the background), sync (write to "
                   "--ckpt-dir while the steps wait) or auto (default: async where a local disk exists)")
    g.add_argument("--ckpt-local-dir", help="the node's own folder for async saves (default $GCPGPU_CKPT_LOCAL_DIR, "
                   "else /mnt/localssd/gcpgpu-ckpt on local SSDs)")
    _bool(g, "resume", "continue from the latest checkpoint in --ckpt-dir (fresh start if there is none)")
    g = p.add_argument_group("measurement and profiling")
    g.add_argument("--log-json", help="JSON-lines metrics file written by rank 0")
    g.add_argument("--log-every", type=int,
                   help="log every N steps (a log synchronizes the GPU, so not every step; default 10)")
    g.add_argument("--eval-every", type=int, help="validation loss every N steps and at the end (0 = never)")
    g.add_argument("--eval-steps", type=int, help="micro-batches per validation (default 20)")
    g.add_argument("--val-fraction", type=float,
                   help="the tail of the data held out for validation when --eval-every is set (default 0.01)")
    g.add_argument("--tensorboard-dir",
                   help="TensorBoard scalars (needs the tensorboard package; default $AIP_TENSORBOARD_LOG_DIR)")
    g.add_argument("--timing-warmup", type=int, help="steps left out of speed figures (default 3, 10 with --compile)")
    g.add_argument("--profile-steps", help="A:B profile steps A..B (nsys capture range on CUDA, torch.profiler on CPU)")
    g.add_argument("--profile-dir", help="where torch.profiler traces go (default ./profile)")
    g.add_argument("--dist-timeout", type=float, help="seconds before a stuck collective fails (default 600)")
    g.add_argument("--stop-check-every", type=int,
                   help="ranks agree on a SIGTERM every N steps (and on log and checkpoint steps; default 5): "
                        "keep N x step time + a save under the notice a preemption gives (30 s on GCE spot)")
    _bool(g, "quiet", "print only the summary")
    return p


def _int_or_auto(value: str) -> int | str:
    if value == "auto":
        return value
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number or 'auto', got {value!r}") from None


_UNITS = {"": 1, "b": 1, "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40, "kb": 10**3, "mb": 10**6,
          "gb": 10**9, "tb": 10**12}


def parse_bytes(text: str) -> int:
    """'40GiB', '38000MiB', '1e10' -> bytes; ConfigError naming --memory-budget otherwise."""
    m = re.fullmatch(r"\s*([0-9.eE+]+)\s*([a-zA-Z]*)\s*", str(text))
    try:
        value = float(m.group(1)) * _UNITS[m.group(2).lower()] if m else -1
    except (KeyError, ValueError):
        value = -1
    if value <= 0:
        raise ConfigError(f"--memory-budget: expected a size such as 40GiB or 38000MiB, got {text!r}")
    return int(value)


def _load_file(path: str) -> dict[str, Any]:
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"--config: no such file {path}")
    text = p.read_text()
    try:
        if p.suffix in (".yaml", ".yml"):
            try:
                import yaml
            except ImportError:
                raise ConfigError(f"--config: {path} is YAML but PyYAML is not installed; use a .json file") from None
            data = yaml.safe_load(text) or {}
        else:
            data = json.loads(text)
    except (ValueError, ImportError) as e:
        raise ConfigError(f"--config: cannot parse {path}: {str(e).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"--config: {path} must hold a mapping of option: value")
    names = {f.name for f in fields(TrainConfig)} - {"config"}
    out = {}
    for key, value in data.items():
        name = str(key).replace("-", "_")
        if name not in names:
            raise ConfigError(f"--config: unknown option {key!r} in {path}")
        out[name] = value
    return out


def parse_args(argv: list[str] | None = None) -> TrainConfig:
    """Parse flags (and --config) into a TrainConfig and check it; exits 2 with one line on a bad option.

    On Vertex AI with a base output directory, checkpoints default to its AIP_CHECKPOINT_DIR.
    """
    try:
        ns = vars(build_parser().parse_args(argv))
        values = _load_file(ns["config"]) if ns.get("config") else {}
        values.update(ns)
        if values.get("ckpt_dir") is None and vertex_checkpoint_dir():
            values["ckpt_dir"] = vertex_checkpoint_dir()
        cfg = TrainConfig(**values)
        check(cfg)
    except ConfigError as e:
        fail(str(e))
    return cfg


def _choice(option: str, value: Any, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ConfigError(f"{option}: unknown value {value!r}; choose one of {', '.join(choices)}")


def check(cfg: TrainConfig) -> None:
    """Checks that need no torch and no GPU; raises ConfigError naming the option."""
    _choice("--model", cfg.model, tuple(SIZES))
    _choice("--parallel", cfg.parallel, PARALLELS)
    _choice("--precision", cfg.precision, PRECISIONS)
    _choice("--device", cfg.device, ("auto", "cuda", "cpu"))
    _choice("--data-dtype", cfg.data_dtype, ("uint16", "uint32"))
    _choice("--tokenizer", cfg.tokenizer, ("byte", "gpt2"))
    _choice("--optimizer-impl", cfg.optimizer_impl, ("auto", "fused", "foreach", "for"))
    _choice("--ddp-comm-hook", cfg.ddp_comm_hook, ("none", "bf16", "fp16", "powersgd"))
    _choice("--fp8-recipe", cfg.fp8_recipe, ("tensorwise", "rowwise"))
    _choice("--fp8-filter", cfg.fp8_filter, ("auto", "all"))
    if cfg.precision == "fp8" and not cfg.compile:
        # torchao's float8 is slower than bf16 in eager mode: compile fuses its scale and cast kernels.
        raise ConfigError("--precision fp8: needs --compile to be faster than bf16 (torchao's float8 relies on "
                          "torch.compile to fuse its casts); add --compile or use bf16")
    _choice("--compile-mode", cfg.compile_mode,
            ("default", "max-autotune", "max-autotune-no-cudagraphs", "reduce-overhead"))
    _choice("--compile-scope", cfg.compile_scope, ("auto", "block", "model"))
    for opt, value in (("--batch-size", cfg.batch_size), ("--micro-batch", cfg.micro_batch)):
        if value is not None and value != "auto" and (not isinstance(value, int) or isinstance(value, bool)
                                                      or value < 1):
            raise ConfigError(f"{opt}: must be a whole number of at least 1 or 'auto', got {value!r}")
    if cfg.micro_batch is not None and cfg.batch_size == "auto":
        raise ConfigError("--micro-batch: with --batch-size auto the batch follows from the micro-batch; "
                          "give --batch-size a number, or drop --micro-batch")
    if cfg.micro_batch is not None and cfg.grad_accum != 1:
        raise ConfigError("--grad-accum: set by --micro-batch (batch / (ranks x micro-batch)); drop one of them")
    if cfg.memory_budget is not None:
        parse_bytes(cfg.memory_budget)
    if cfg.loss_chunk != "auto" and (not isinstance(cfg.loss_chunk, int) or isinstance(cfg.loss_chunk, bool)
                                     or cfg.loss_chunk < 0):
        raise ConfigError(f"--loss-chunk: must be a whole number of tokens, 0 for the plain loss, or auto, "
                          f"got {cfg.loss_chunk!r}")
    if cfg.eval_every < 0 or cfg.eval_steps < 1:
        raise ConfigError(f"--eval-every/--eval-steps: need eval-every >= 0 and eval-steps >= 1, got "
                          f"{cfg.eval_every} and {cfg.eval_steps}")
    if not 0 < cfg.val_fraction < 1:
        raise ConfigError(f"--val-fraction: must be between 0 and 1 (e.g. 0.01), got {cfg.val_fraction}")
    for opt, value in (("--steps", cfg.steps), ("--seq-len", cfg.seq_len),
                       ("--grad-accum", cfg.grad_accum), ("--log-every", cfg.log_every),
                       ("--ckpt-keep", cfg.ckpt_keep), ("--ddp-bucket-mb", cfg.ddp_bucket_mb),
                       ("--powersgd-rank", cfg.powersgd_rank), ("--stop-check-every", cfg.stop_check_every)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ConfigError(f"{opt}: must be a whole number of at least 1, got {value!r}")
    for opt, value in (("--ckpt-every", cfg.ckpt_every), ("--warmup-steps", cfg.warmup_steps),
                       ("--timing-warmup", cfg.timing_warmup)):
        if value is not None and (not isinstance(value, int) or value < 0):
            raise ConfigError(f"{opt}: must be a whole number of at least 0, got {value!r}")
    if cfg.lr <= 0 or (cfg.min_lr is not None and not 0 <= cfg.min_lr <= cfg.lr):
        raise ConfigError(f"--lr/--min-lr: need lr > 0 and 0 <= min-lr <= lr, got {cfg.lr} and {cfg.min_lr}")
    if cfg.grad_clip < 0 or cfg.weight_decay < 0 or cfg.dist_timeout <= 0:
        raise ConfigError("--grad-clip, --weight-decay and --dist-timeout must not be negative")
    if cfg.fp16_init_scale <= 0:
        raise ConfigError(f"--fp16-init-scale: must be positive, got {cfg.fp16_init_scale}")
    if cfg.ac not in ("none", "full", "selective") and not (cfg.ac.isdigit() and int(cfg.ac) >= 1):
        raise ConfigError(f"--ac: unknown value {cfg.ac!r}; use none, full, selective, or a block interval K >= 1")
    _check_tp(cfg)
    if cfg.vocab_size is not None and cfg.vocab_size < 2:
        raise ConfigError(f"--vocab-size: must be at least 2, got {cfg.vocab_size}")
    if cfg.profile_steps is not None:
        parts = cfg.profile_steps.split(":")
        if len(parts) != 2 or not all(x.isdigit() for x in parts) or int(parts[0]) > int(parts[1]):
            raise ConfigError(f"--profile-steps: expected A:B with 0 <= A <= B (e.g. 10:15), got {cfg.profile_steps!r}")
        if int(parts[1]) >= cfg.steps:
            raise ConfigError(f"--profile-steps: step {parts[1]} is past the last step {cfg.steps - 1}; use B < --steps")
    _choice("--ckpt-mode", cfg.ckpt_mode, CKPT_MODES)
    for opt, given in (("--resume", cfg.resume), ("--ckpt-every", cfg.ckpt_every),
                       ("--ckpt-local-dir", cfg.ckpt_local_dir), ("--ckpt-mode", cfg.ckpt_mode != "auto")):
        if given and not cfg.ckpt_dir:
            raise ConfigError(f"{opt}: needs --ckpt-dir to know where checkpoints live")
    if cfg.ddp_comm_hook != "none" and cfg.parallel not in ("ddp", "auto"):
        raise ConfigError(f"--ddp-comm-hook: only applies to --parallel ddp, not {cfg.parallel}")
    if cfg.data != "synthetic":
        path = Path(cfg.data)
        if not path.is_file():
            raise ConfigError(f"--data: no such file {cfg.data}; give a .bin token file, a text file or 'synthetic'")
        if path.suffix == ".bin" and cfg.data_dtype == "uint32" and cfg.vocab_size is None:
            raise ConfigError("--vocab-size: required with --data-dtype uint32 (the vocabulary is not in the file)")


def _check_tp(cfg: TrainConfig) -> None:
    """--tp against the other options (its fit to the launched ranks is checked by launch_checks)."""
    if not isinstance(cfg.tp, int) or isinstance(cfg.tp, bool) or cfg.tp < 1:
        raise ConfigError(f"--tp: must be a whole number of at least 1, got {cfg.tp!r}")
    if cfg.tp == 1:
        return
    heads = SIZES[cfg.model].n_head
    if heads % cfg.tp:
        raise ConfigError(f"--tp: {cfg.tp} does not divide model {cfg.model}'s {heads} attention heads; "
                          f"use a divisor of {heads}")
    if cfg.parallel not in ("auto", "fsdp"):
        raise ConfigError(f"--tp: composes with FSDP2 over the other GPUs, not --parallel {cfg.parallel}; "
                          "use --parallel fsdp (or auto)")
    if cfg.seq_len % cfg.tp:
        raise ConfigError(f"--seq-len: {cfg.seq_len} does not split over --tp {cfg.tp} (sequence parallelism "
                          f"gives each rank a slice); use a multiple of {cfg.tp}")
    if cfg.loss_chunk not in ("auto", 0):
        raise ConfigError("--loss-chunk: with --tp the loss runs on vocabulary shards (no rank holds all the "
                          "logits); use auto or 0")
    if cfg.compile and cfg.compile_scope == "model":
        raise ConfigError("--compile-scope model: --tp runs FSDP2, which shards per block; use --compile-scope block")
    if cfg.precision == "fp8":
        # torchao's Float8Linear needs its own float8 TP styles, which the trainer does not apply.
        raise ConfigError("--precision fp8: not with --tp yet; use bf16 with --tp, or fp8 without it")


def resolve_auto(cfg: TrainConfig, world_size: int) -> TrainConfig:
    """The settings left to the launch, in place (returns cfg): --parallel auto becomes ddp when more than
    one process runs and none otherwise, so a multi-process job (torchrun, Vertex replicas, a cluster's
    nodes) needs no --parallel (fsdp under --tp); then --compile-scope and --loss-chunk auto (see TrainConfig)."""
    if cfg.parallel == "auto":
        cfg.parallel = "fsdp" if cfg.tp > 1 else "ddp" if world_size > 1 else "none"
    if cfg.compile_scope == "auto":
        cfg.compile_scope = "model" if cfg.parallel == "none" else "block"
    if cfg.loss_chunk == "auto":
        cfg.loss_chunk = 0 if (cfg.compile and cfg.compile_scope == "model") or cfg.tp > 1 else LOSS_CHUNK_TOKENS
    return cfg
