"""The training loop. Read top to bottom: setup, data, model, optimizer, resume, loop, summary."""

from __future__ import annotations

import contextlib
import functools
import gc
import os
import signal
import sys
import time

import torch
import torch.distributed as dist

from gcpgpu.trainer import autobatch, checkpoint, ckpt_local, tb
from gcpgpu.trainer.checkpointer import Checkpointer, SaveRecord
from gcpgpu.trainer.config import (
    ALLOW_CPU_ENV,
    PROG,
    ConfigError,
    TrainConfig,
    fail,
    parse_args,
    resolve_auto,
)
from gcpgpu.trainer.data import Batches, Prefetcher, TokenSource, open_source, split
from gcpgpu.trainer.dist import LEAVE_WAIT_S, DistEnv, init_process_group, leave_process_group, read_env
from gcpgpu.trainer.evaluate import should_eval, validation_loss
from gcpgpu.trainer.launch_checks import check_runtime
from gcpgpu.trainer.metrics import (
    JsonLog,
    SpeedWindow,
    cuda_memory_detail,
    fmt_bytes,
    fmt_rate,
    mfu,
    peak_flops,
    peak_memory,
)
from gcpgpu.trainer.model import GPT, GPTConfig
from gcpgpu.trainer.optim import build_optimizer, clip_grad_norm, grad_sync, lr_at  # noqa: F401 (grad_sync: tests)
from gcpgpu.trainer.parallel import apply_fp8, parallelize
from gcpgpu.trainer.parallel_tp import local_loss, loss_context
from gcpgpu.trainer.profiling import Ranges, StepProfiler
from gcpgpu.trainer.sizes import flops_per_token, get_size, pad_vocab
from gcpgpu.trainer.summary import RunResult, write_summary

# Exit code after a SIGTERM stop (128 + 15, as a shell reports it): the checkpoint is saved, resume to go on.
EXIT_STOPPED = 143
EXIT_PEER_FAILED = 1
# Test hook: "RANK:STEP" makes that rank send itself SIGTERM when STEP starts (a deterministic preemption).
SIGTERM_AT_ENV = "GCPGPU_TRAINER_TEST_SIGTERM_AT"
# Test hook: "RANK:STEP" makes that rank die abruptly (os._exit) when STEP starts.
DIE_AT_ENV = "GCPGPU_TRAINER_TEST_DIE_AT"
# After a SIGTERM, how long a pending checkpoint may still take to reach --ckpt-dir: a GCE Spot VM gives 30 s
# of notice and the cluster job agent stops the container 25 s after its SIGTERM (docker --stop-timeout).
STOP_GRACE_S = 20.0


class StopFlag:
    """Set by SIGTERM (spot VM preemption, torchrun shutting down) or a first Ctrl-C (SIGINT); all ranks agree
    before acting on it. A second Ctrl-C stops at once (KeyboardInterrupt, one line from __main__)."""

    def __init__(self) -> None:
        self.requested = False
        self.at: float | None = None  # time.monotonic() of the first SIGTERM this rank got
        self.why = "SIGTERM"  # or "Ctrl-C": what the stop line names, and exit 130 instead of 143
        self._previous: dict[int, object] = {}

    def install(self) -> None:
        self._previous = {sig: signal.signal(sig, self._handle) for sig in (signal.SIGTERM, signal.SIGINT)}

    def uninstall(self) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)  # type: ignore[arg-type]

    def _handle(self, signum, frame) -> None:
        if signum == signal.SIGINT:
            if self.requested:
                raise KeyboardInterrupt  # a second Ctrl-C: now, not after the save
            self.why = "Ctrl-C"
            print(f"{PROG}: Ctrl-C: stopping after this step and saving; Ctrl-C again to stop at once",
                  file=sys.stderr, flush=True)
        self.requested = True  # only a flag: the step in flight finishes, then every rank saves together
        self.at = self.at or time.monotonic()

    def agreed(self) -> bool:
        """True on every rank if any rank was signalled (a CPU all-reduce: gloo, no GPU sync).

        A collective: every rank must call it at the same steps (see should_check_stop)."""
        if not dist.is_initialized():
            return self.requested
        flag = torch.tensor([1 if self.requested else 0], dtype=torch.int32)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return bool(flag.item())


def should_check_stop(step: int, cfg: TrainConfig) -> bool:
    """Steps after which the ranks agree on a SIGTERM: every --stop-check-every steps, the last step, and
    every log or checkpoint step (which synchronize anyway). A function of the step alone, so all ranks
    call the agreement together; not every step, because across nodes each agreement is a network round
    trip."""
    return (step % cfg.stop_check_every == 0 or step == cfg.steps or step % cfg.log_every == 0
            or bool(cfg.ckpt_every and step % cfg.ckpt_every == 0))


def _say(env: DistEnv, cfg: TrainConfig, msg: str, always: bool = False) -> None:
    if env.is_main and (always or not cfg.quiet):
        print(msg, flush=True)


def _test_hooks(env: DistEnv, step: int) -> None:
    for name in (SIGTERM_AT_ENV, DIE_AT_ENV):
        spec = os.environ.get(name)
        if spec and spec == f"{env.rank}:{step}":
            if name == DIE_AT_ENV:
                os._exit(3)
            os.kill(os.getpid(), signal.SIGTERM)


def train(cfg: TrainConfig, env: DistEnv | None = None, device_type: str | None = None,
          source: TokenSource | None = None) -> RunResult:
    """Run one training job in this process (one rank); the other ranks run the same call."""
    env = env or read_env()
    resolve_auto(cfg, env.world_size)  # --parallel, --compile-scope, --loss-chunk auto, for callers that skip check_runtime
    device_type = device_type or ("cuda" if torch.cuda.is_available() and cfg.device != "cpu" else "cpu")
    result = RunResult()

    # ---- setup: device, process group, seeds ----
    if device_type == "cuda":
        device = torch.device("cuda", env.local_rank)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
        if env.local_world_size > 1 and "OMP_NUM_THREADS" not in os.environ:
            # Ranks sharing a CPU would oversubscribe its cores: split them instead.
            torch.set_num_threads(max(1, (os.cpu_count() or 1) // env.local_world_size))
    if cfg.tf32:
        torch.backends.cuda.matmul.allow_tf32 = True  # fp32 matmuls on tensor cores (10-bit mantissa inputs)
        torch.backends.cudnn.allow_tf32 = True
    use_pg = env.distributed or cfg.parallel != "none"
    if use_pg and not dist.is_initialized():
        init_process_group(env, device_type, cfg.dist_timeout)
    torch.manual_seed(cfg.seed)  # the same weights on every rank

    # ---- data ----
    source = source or open_source(cfg.data, seq_len=cfg.seq_len, data_dtype=cfg.data_dtype,
                                   tokenizer=cfg.tokenizer, vocab_size=cfg.vocab_size, seed=cfg.seed)
    if cfg.batch_size == "auto" or cfg.micro_batch is not None:  # main() resolves it first; direct callers here
        _say(env, cfg, f"{PROG}: {resolve_batch(cfg, env, device_type, source.vocab_size)}")
    val_batches = None
    # The ranks of one tensor-parallel group (consecutive ranks, parallel_tp.py) read the same slice.
    dp_rank, dp_size = env.rank // cfg.tp, env.world_size // cfg.tp
    micro_batch = cfg.batch_size // (dp_size * cfg.grad_accum)
    if cfg.eval_every:
        source, val_source = split(source, cfg.val_fraction, cfg.seq_len)
        # Its own seed stream: the same held-out windows at every evaluation, none drawn for training.
        val_batches = Batches(val_source, seq_len=cfg.seq_len, global_batch=dp_size * micro_batch,
                              rank=dp_rank, world_size=dp_size, seed=cfg.seed + 1, device=device)
    batches = Batches(source, seq_len=cfg.seq_len, global_batch=cfg.batch_size, rank=dp_rank,
                      world_size=dp_size, seed=cfg.seed, device=device)
    if cfg.prefetch:
        batches = Prefetcher(batches)

    # ---- model ----
    gcfg = GPTConfig.from_size(cfg.model, source.vocab_size, cfg.seq_len, cfg.tie_embeddings, cfg.loss_chunk)
    with device:
        model = GPT(gcfg)  # built straight on the device: no host copy of a large model
    n_params = model.num_params()
    fpt = flops_per_token(get_size(cfg.model), gcfg.vocab_size, cfg.seq_len, cfg.tie_embeddings)
    compute_dtype = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16, "fp8": torch.bfloat16}[cfg.precision]
    fp8 = cfg.precision == "fp8" and device_type == "cuda"
    if cfg.precision == "fp8" and not fp8:
        _say(env, cfg, f"{PROG}: fp8 needs a Hopper GPU; running bf16 on CPU because {ALLOW_CPU_ENV} is set")
    if fp8:
        converted, total = apply_fp8(model, cfg.fp8_recipe, fsdp=cfg.parallel == "fsdp", which=cfg.fp8_filter)
        _say(env, cfg, f"fp8 ({cfg.fp8_recipe}, filter {cfg.fp8_filter}): {converted} of {total} block linears "
                       "converted" + ("; none is large enough to gain from fp8 by torchao's H100 thresholds, so "
                                      "this run is bf16 in effect (--fp8-filter all converts them anyway)"
                                      if converted == 0 else ""), always=converted == 0)
    # FSDP2 casts parameters itself (param_dtype); plain and DDP runs use autocast over fp32 weights.
    use_autocast = compute_dtype is not None and cfg.parallel != "fsdp"
    model = parallelize(
        model, parallel=cfg.parallel, env=env, device=device,
        param_dtype=compute_dtype if cfg.parallel == "fsdp" else None, ac_every=cfg.ac_every,
        compile=cfg.compile, compile_mode=cfg.compile_mode, compile_scope=cfg.compile_scope,
        ac_selective=cfg.ac == "selective", tp=cfg.tp, fsdp_reshard_after_forward=cfg.fsdp_reshard_after_forward,
        fsdp_shard_size=cfg.fsdp_shard_size, ddp_bucket_mb=cfg.ddp_bucket_mb,
        # DDP's static graph cannot skip syncs (no_sync) during accumulation: use it only without accumulation.
        ddp_static_graph=cfg.ddp_static_graph and cfg.grad_accum == 1,
        ddp_comm_hook=cfg.ddp_comm_hook, powersgd_rank=cfg.powersgd_rank)
    autocast = torch.autocast(device_type, dtype=compute_dtype) if use_autocast else contextlib.nullcontext()
    fp8_fsdp_scales = fp8 and cfg.parallel == "fsdp" and cfg.fp8_recipe == "tensorwise"

    # ---- optimizer, loss scaler ----
    optimizer = build_optimizer(model, cfg, device_type)
    params = [p for p in model.parameters() if p.requires_grad]
    # fp16 overflows where bf16 does not: scale the loss up, skip steps whose gradients hit inf/nan.
    scaler = torch.amp.GradScaler(device_type, init_scale=cfg.fp16_init_scale, enabled=cfg.precision == "fp16")

    # ---- checkpoints (sync or async, ckpt_local.py) and resume ----
    ckpt = None
    if cfg.ckpt_dir:
        place = ckpt_local.resolve(cfg.ckpt_mode, cfg.ckpt_dir, cfg.ckpt_local_dir)
        ckpt = Checkpointer(cfg.ckpt_dir, place, rank=env.rank, local_rank=env.local_rank, keep=cfg.ckpt_keep,
                            device_type=device_type, dist_timeout=cfg.dist_timeout)
        result.ckpt_mode = place.mode
        _say(env, cfg, f"{PROG}: checkpoints {place.why}")
    start_step = 0
    if cfg.resume:
        path = checkpoint.latest(cfg.ckpt_dir)  # the newest step complete in --ckpt-dir: only those count
        if path is None:
            _say(env, cfg, f"no checkpoint in {cfg.ckpt_dir}: starting from step 0")
        else:
            copy = checkpoint.fastest_copy(path, place.local_dir)
            state = checkpoint.load(copy, model=model, optimizer=optimizer, scaler=scaler,
                                    data_state=batches.state_dict(), rank=env.rank, device_type=device_type)
            batches.load_state_dict(state["data"])
            start_step = int(state["step"])
            result.resumed = {"kind": "resume", "ckpt_step": start_step, "path": str(path), "read_from": str(copy)}
            _say(env, cfg, f"resumed from {path} at step {start_step}"
                           + (f" (read from its local copy {copy})" if copy != path else ""))

    # ---- measurement ----
    device_name = torch.cuda.get_device_name(device) if device_type == "cuda" else None
    peak = peak_flops(device_name)
    tokens_per_step = cfg.batch_size * cfg.seq_len
    planned = None
    if device_type == "cuda":
        planned = autobatch.run_plan(cfg, env.world_size, cfg.batch_size, gcfg.vocab_size, cfg.grad_accum)
        torch.cuda.reset_peak_memory_stats(device)
    result.planned_mem_bytes = planned
    _say(env, cfg, (
        f"{PROG}: model {cfg.model} ({n_params / 1e6:.1f}M params, {fpt / 1e9:.2f} GFLOP/token) | "
        f"{cfg.parallel} x {env.world_size}" + (f" (tp {cfg.tp} x dp {dp_size})" if cfg.tp > 1 else "") + f" on {device_name or 'cpu'} | {cfg.precision} | "
        f"batch {cfg.batch_size} = {dp_size} ranks x {micro_batch} x {cfg.grad_accum} accum, seq {cfg.seq_len} | "
        f"data {source.description} | peak {'%.0f TFLOP/s bf16' % (peak / 1e12) if peak else 'unknown: no MFU'}"
        + (" (fp8 MFU is against the bf16 peak)" if fp8 and peak else "")))
    jlog = JsonLog(cfg.log_json, env.is_main)
    if result.resumed:
        jlog.write(result.resumed)
    scalars = tb.Scalars(tb.resolve(cfg.tensorboard_dir)[0], env.is_main)
    window = SpeedWindow()
    ranges = Ranges(nvtx=device_type == "cuda")
    profiler = StepProfiler(cfg.profile_window, device_type, cfg.profile_dir, env.rank, ranges)
    stop = StopFlag()
    stop.install()

    # ---- the loop ----
    step = start_step
    t_last = time.perf_counter()
    data_time = 0.0
    last_logged = start_step
    try:
        while step < cfg.steps:
            _test_hooks(env, step)
            profiler.step_begin(step)
            lr = lr_at(step, cfg)
            for group in optimizer.param_groups:
                group["lr"] = lr
            t0 = time.perf_counter()
            with ranges("data"):
                x, y = batches.next()
            data_time += time.perf_counter() - t0
            loss_sum = torch.zeros((), device=device)
            will_log = (step + 1) % cfg.log_every == 0 or step + 1 == cfg.steps or should_eval(
                step + 1, cfg.eval_every, cfg.steps)
            # Reading the scale syncs the GPU: only on steps that are logged anyway.
            scale_before = scaler.get_scale() if scaler.is_enabled() and will_log else None
            for k in range(cfg.grad_accum):
                xs, ys = x[k * micro_batch:(k + 1) * micro_batch], y[k * micro_batch:(k + 1) * micro_batch]
                with grad_sync(model, cfg.parallel, sync=k == cfg.grad_accum - 1), loss_context(cfg.tp):
                    with ranges("forward"), autocast:
                        # Divide by the micro-step count: the gradients add up to the mean over the batch.
                        loss = local_loss(model(xs, ys)) / cfg.grad_accum
                    with ranges("backward"):
                        scaler.scale(loss).backward()
                loss_sum += loss.detach()
            with ranges("optimizer"):
                grad_norm = None
                if cfg.grad_clip > 0:
                    scaler.unscale_(optimizer)  # clip the true gradients, not the scaled ones
                    grad_norm = clip_grad_norm(params, cfg.grad_clip)
                scaler.step(optimizer)  # skipped by the scaler if fp16 gradients overflowed
                scaler.update()
                optimizer.zero_grad(set_to_none=True)
                if fp8_fsdp_scales:
                    from torchao.float8 import precompute_float8_dynamic_scale_for_fsdp

                    # One all-reduce for all fp8 weight scales instead of one per weight.
                    precompute_float8_dynamic_scale_for_fsdp(model)
            profiler.step_end(step)
            step += 1
            stopping = stop.agreed() if should_check_stop(step, cfg) else False

            evaluate = should_eval(step, cfg.eval_every, cfg.steps) and not stopping
            if step % cfg.log_every == 0 or step == cfg.steps or stopping or evaluate:
                if device_type == "cuda":
                    torch.cuda.synchronize()  # time what the GPU did, not what the host queued
                now = time.perf_counter()
                n = step - last_logged
                step_time = (now - t_last) / n
                data_frac = data_time / (now - t_last)
                tok_s = tokens_per_step / step_time / env.world_size
                warm = last_logged - start_step < cfg.timing_skip  # interval includes warm-up/compile steps
                win = cfg.profile_window
                profiled = win is not None and last_logged <= win[1] and step - 1 >= win[0]
                if not (warm or profiled):  # profiler overhead is not the trainer's speed either
                    window.add(step_time, data_frac, n)
                if dist.is_initialized():
                    dist.all_reduce(loss_sum)  # SUM: gloo has no AVG
                    loss_sum /= env.world_size
                loss_val = loss_sum.item()
                result.losses[step - 1] = loss_val
                if evaluate:  # after the timing above, so the speed figures leave it out
                    with ranges("eval"):
                        result.val_loss = validation_loss(model, val_batches, cfg.eval_steps, parallel=cfg.parallel,
                                                          autocast=autocast, device=device, tp=cfg.tp)
                    result.val_losses[step - 1] = result.val_loss
                mem, mem_kind = peak_memory(device_type)
                detail = cuda_memory_detail() if device_type == "cuda" else {}
                record = {
                    "step": step - 1, "loss": loss_val, "lr": lr, "tokens_per_s": tok_s,
                    "mfu": mfu(tok_s, fpt, peak), "step_time_s": step_time, "data_wait_frac": data_frac,
                    "peak_mem_bytes": mem, "peak_mem_kind": mem_kind, "warmup": warm,
                    "grad_norm": None if grad_norm is None else grad_norm.item(),
                    "tokens": step * tokens_per_step, "world_size": env.world_size, **detail,
                }
                if cfg.eval_every:
                    record["val_loss"] = result.val_loss if evaluate else None
                if scaler.is_enabled():
                    record["loss_scale"] = scaler.get_scale()
                    # The scaler halves its scale on overflow: that is how a skipped step shows.
                    record["skipped"] = None if scale_before is None else record["loss_scale"] < scale_before
                jlog.write(record)
                scalars.write(step - 1, {**record, "peak_mem_gib": mem / 2**30})
                m = record["mfu"]
                _say(env, cfg, (
                    f"step {step - 1:>6} | loss {loss_val:.4f} | lr {lr:.2e} | {fmt_rate(tok_s)} tok/s/gpu | "
                    f"mfu {'n/a' if m is None else f'{m * 100:.1f}%'} | {step_time * 1e3:.1f} ms | "
                    f"data {data_frac * 100:.1f}% | mem {fmt_bytes(mem)}"
                    + (f" | val loss {result.val_loss:.4f}" if evaluate else "")
                    + (" | overflow: step skipped" if record.get("skipped") else "")))
                last_logged = step

            if ckpt and ((cfg.ckpt_every and step % cfg.ckpt_every == 0) or step == cfg.steps or stopping):
                blocked = ckpt.save(step, functools.partial(
                    checkpoint.state_dict, step, model=model, optimizer=optimizer, scaler=scaler,
                    data_state=batches.state_dict(), rank=env.rank, device_type=device_type))
                if last_logged != step:  # a save between log steps: keep its time out of the next interval
                    t_last += blocked
            if ckpt:
                _report_saves(env, cfg, ckpt.collect(), jlog, result)
            if last_logged == step:
                t_last, data_time = time.perf_counter(), 0.0  # logging and saving stay out of step times
            if stopping:
                result.stopped = True
                if ckpt:
                    _finish_saves(env, cfg, ckpt, stop, jlog, result)
                _say(env, cfg, f"{PROG}: {stop.why}: stopped after step {step - 1}"
                      + (", checkpoint saved; rerun with --resume to continue"
                         if cfg.ckpt_dir and not result.ckpt_incomplete else ""), always=True)
                break
        if ckpt and not result.stopped:
            _finish_saves(env, cfg, ckpt, stop, jlog, result)  # the last step's save, at the end of the run
    finally:
        if ckpt:
            ckpt.close()
        stop.uninstall()
        jlog.close()
        scalars.close()
        if isinstance(batches, Prefetcher):
            batches.close()

    # ---- summary ----
    result.steps_done = step
    result.step_times = window.step_times
    result.step_time_s = window.median_step_time()
    result.data_wait_frac = window.median_data_frac()
    result.peak_mem_bytes, result.peak_mem_kind = peak_memory(device_type)
    result.mem_detail = cuda_memory_detail() if device_type == "cuda" else {}
    if result.step_time_s:
        result.tokens_per_s_per_gpu = tokens_per_step / result.step_time_s / env.world_size
        result.mfu = mfu(result.tokens_per_s_per_gpu, fpt, peak)
    write_summary(env, cfg, result, jlog_path=cfg.log_json)
    return result


def _report_saves(env: DistEnv, cfg: TrainConfig, records: list[SaveRecord], jlog: JsonLog,
                  result: RunResult) -> None:
    for record in records:
        _say(env, cfg, record.line())
        jlog.write(record.log())
        result.checkpoints.append(record.log())


def _finish_saves(env: DistEnv, cfg: TrainConfig, ckpt: Checkpointer, stop: StopFlag, jlog: JsonLog,
                  result: RunResult) -> None:
    """The last checkpoint reaches --ckpt-dir before the run ends; after a SIGTERM, only until STOP_GRACE_S
    after the signal, so the process still leaves before the VM or container is stopped."""
    if not ckpt.pending:
        return
    t0 = time.perf_counter()
    timeout = max(0.0, (stop.at or time.monotonic()) + STOP_GRACE_S - time.monotonic()) if result.stopped else None
    result.ckpt_incomplete = not ckpt.wait(timeout)
    if result.ckpt_incomplete:
        _say(env, cfg, f"{PROG}: the last checkpoint did not reach {cfg.ckpt_dir} within {STOP_GRACE_S:.0f} s of "
                       "the SIGTERM; --resume takes the newest complete one", always=True)
        return
    _say(env, cfg, f"waited {time.perf_counter() - t0:.2f} s at the end for the last checkpoint's upload")
    _report_saves(env, cfg, ckpt.collect(), jlog, result)


def resolve_batch(cfg: TrainConfig, env: DistEnv, device_type: str, vocab_size: int) -> str | None:
    """--batch-size auto / --micro-batch into numbers (in cfg) from the memory plan; the line to print."""
    memory = torch.cuda.get_device_properties(env.local_rank).total_memory if device_type == "cuda" else None
    return autobatch.apply(cfg, env.world_size, pad_vocab(vocab_size), memory)


def _machine_facts() -> dict:
    from importlib.util import find_spec

    cuda = torch.cuda.is_available()
    # find_spec, not import: importing torchao on a machine without its GPU kernels prints warnings.
    return {"cuda_available": cuda, "cuda_capability": torch.cuda.get_device_capability() if cuda else None,
            "torchao_available": find_spec("torchao") is not None, "numpy_available": find_spec("numpy") is not None,
            "torch_version": torch.__version__}


def main(argv: list[str] | None = None) -> int:
    """Entry point: check options, train, and turn a lost peer into one clear message instead of a hang."""
    cfg = parse_args(argv)
    env = read_env()
    allow_cpu = os.environ.get(ALLOW_CPU_ENV, "") not in ("", "0")
    try:
        device_type = check_runtime(cfg, world_size=env.world_size, local_world_size=env.local_world_size,
                                    allow_cpu=allow_cpu, **_machine_facts())
        if device_type == "cuda" and env.local_rank >= torch.cuda.device_count():
            raise ConfigError(f"--nproc-per-node: local rank {env.local_rank} but this machine has "
                              f"{torch.cuda.device_count()} GPUs; launch one process per GPU")
        # Open the data before any process group: a bad file is a startup error, not a hang.
        source = open_source(cfg.data, seq_len=cfg.seq_len, data_dtype=cfg.data_dtype, tokenizer=cfg.tokenizer,
                             vocab_size=cfg.vocab_size, seed=cfg.seed)
        if cfg.eval_every:
            split(source, cfg.val_fraction, cfg.seq_len)  # too little data to hold some out: say so now
        batch_line = resolve_batch(cfg, env, device_type, source.vocab_size)
        tb_note = tb.resolve(cfg.tensorboard_dir)[1]
    except ConfigError as e:
        fail(str(e))
    for line in (batch_line, tb_note):
        if line:
            _say(env, cfg, f"{PROG}: {line}")
    try:
        result = train(cfg, env, device_type, source)
    except Exception as e:  # noqa: BLE001 - classified below, re-raised when it is not a peer failure
        if not (env.distributed and _is_peer_failure(e)):
            raise
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        print(f"{PROG}: rank {env.rank}: a collective failed: another rank has probably died or hung "
              f"(see its log); exiting. [{type(e).__name__}: {first[:300]}]", file=sys.stderr, flush=True)
        # Skip interpreter teardown: destroying a group whose peer is gone can block.
        os._exit(EXIT_PEER_FAILED)
    if result.ckpt_incomplete:  # its upload thread may still hold the checkpoint group: no orderly teardown
        sys.stdout.flush()
        os._exit(EXIT_STOPPED)
    # Free the model's reference cycles (FSDP state) while the interpreter is whole, then the groups:
    # left to interpreter teardown, gloo's threads can abort the process after a successful run.
    gc.collect()
    # After a SIGTERM (a preemption's short notice) the others are not waited for long.
    leave_process_group(env, wait_s=10.0 if result.stopped else LEAVE_WAIT_S)
    return EXIT_STOPPED if result.stopped else 0


def _is_peer_failure(e: BaseException) -> bool:
    if isinstance(e, dist.DistError):
        return True
    text = str(e).lower()
    return isinstance(e, RuntimeError) and any(s in text for s in (
        "connection closed", "connection reset", "broken pipe", "timed out", "timeout", "nccl", "gloo",
        "socket", "peer"))
