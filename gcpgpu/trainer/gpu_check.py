"""`make gpu-check` / `python -m gcpgpu.trainer.gpu_check`: measure this machine's GPUs with the trainer.

It runs the trainer the way users will (torchrun, synthetic data, the same flags `job submit` passes)
and prints one table: 124m and 350m bf16 with torch.compile on one GPU (tokens/s per GPU, MFU, peak
reserved memory against `gcpgpu plan memory`), FSDP and DDP over every GPU, fp8 against bf16 (Hopper
and newer), a SIGTERM-then-resume run whose final loss must match an uninterrupted one within a stated
tolerance, tensor parallelism (--tp 2, alone and over FSDP) against its target where there are 2 GPUs or
more, and the all-reduce bus bandwidth. On a machine with no GPU it says so in one line and exits 0.

`--cpu-smoke` runs the same plan scaled down (the tiny model, 2 CPU processes over gloo, no compile, no
fp8) so the mechanics are tested where there is no GPU; its figures mean nothing, so it launches each kind
of run once (one process with the auto batch, FSDP, DDP in kill-and-resume, the all-reduce).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from importlib.util import find_spec
from pathlib import Path

PROG = "gpu-check"
# GPU nondeterminism (flash-attention backward, compile autotuning) makes a resumed run drift from an
# uninterrupted one; on CPU the trainer's resume is bit-identical. The GPU tolerance on the final loss:
RESUME_TOLERANCE = 0.02  # relative
SIGTERM_AT_ENV = "GCPGPU_TRAINER_TEST_SIGTERM_AT"  # the trainer's own test hook (train.py)
MFU_TARGET = 0.50  # the best single-node trainers' level, at 350m on one H100
# The baseline (one H100 80GB, torch 2.11, bf16, compile, seq 1024, synthetic data, before the chunked
# loss and the auto batch): model -> (batch in sequences, tokens/s per GPU, MFU, peak reserved GiB).
BASELINE = {"124m": (16, 356_564, 0.308, 16.4), "350m": (8, 150_653, 0.369, 17.0), "1.3b": (8, 54_961, 0.471, 35.8)}
# TP rows: tokens/s per GPU against the same model and batch per tp group on one GPU. TP=2 adds two
# all-gathers and two reduce-scatters per block on the critical path; over NVLink at 1.3b they should cost
# under a fifth of the step.
TP_MODEL, TP_TARGET = "1.3b", 0.80


@dataclass
class Run:
    """One row of the table: a trainer (or all-reduce bench) launch and what it measured."""

    name: str
    nproc: int
    args: list[str]
    env: dict[str, str] = field(default_factory=dict)
    ok: bool = False
    note: str = ""
    summary: dict = field(default_factory=dict)
    wall_s: float = 0.0


@dataclass
class Plan:
    runs: list[Run]
    resume: tuple[Run, Run, Run] | None  # straight, stopped by SIGTERM, resumed
    allreduce: Run | None


def write_corpus(path: Path, min_bytes: int = 2_000_000) -> Path:
    """A text the model can learn (this package's own source, repeated), so a resumed run's loss curve
    is compared while it falls; on synthetic random tokens the loss sits at log(vocab) whatever happens."""
    root = Path(__file__).resolve().parents[1]
    text = "\n".join(p.read_text(errors="replace") for p in sorted(root.rglob("*.py")))
    path.write_text(text * max(1, -(-min_bytes // max(1, len(text)))))
    return path


def build_plan(ngpu: int, capability: tuple[int, int] | None, cpu_smoke: bool, steps: int,
               corpus: str = "corpus.txt", torchao: bool = True) -> Plan:
    """What to run on this machine: one GPU rows (the fixed batches, then the auto batch), all-GPU rows,
    fp8 where the GPU and torchao have it."""
    if cpu_smoke:
        # fp32 and a 256-token vocabulary: bf16 matmuls are emulated on most CPUs (seconds per step).
        base = ["--seq-len", "64", "--device", "cpu", "--quiet", "--log-every", "2", "--timing-warmup", "2"]
        synthetic = ["--data", "synthetic", "--vocab-size", "256"]
        prec, label, compile_ = [], "fp32", []
        n, small, mid, batch1, steps = 2, "tiny", "tiny", 8, min(steps, 8)
        auto = ["--batch-size", "auto", "--memory-budget", "32MiB"]  # a CPU has no device memory to plan for
    else:
        base = ["--seq-len", "1024", "--quiet", "--log-every", "10"]
        synthetic = ["--data", "synthetic"]
        prec, label, compile_ = ["--precision", "bf16"], "bf16", ["--compile"]
        n, small, mid, batch1 = ngpu, "124m", "350m", 16
        auto = ["--batch-size", "auto"]
    common = [*base, *synthetic, "--steps", str(steps)]
    pc = [*prec, *compile_]
    # The smoke launches each kind of run once, as torch's start-up is most of its time: one process (the auto
    # row, which plans its batch too), FSDP over n, and DDP over n in the kill-and-resume runs below.
    runs = [] if cpu_smoke else [Run(f"{small} {label} 1 GPU", 1, [*common, "--model", small, *pc,
                                                                   "--batch-size", str(batch1)])]
    if mid != small:
        runs.append(Run(f"{mid} {label} 1 GPU", 1, [*common, "--model", mid, *pc, "--batch-size", str(batch1 // 2)]))
    # The batch the memory plan picks for the whole card (the rows above leave most of an 80 GB GPU idle).
    for model in dict.fromkeys([small, mid] + ([] if cpu_smoke else ["1.3b"])):
        runs.append(Run(f"{model} {label} auto 1 GPU", 1, [*common, "--model", model, *pc, *auto]))
    if n > 1:
        runs.append(Run(f"{mid} {label} FSDP x{n}", n, [*common, "--model", mid, *pc, "--parallel", "fsdp",
                                                        "--batch-size", str(n * batch1 // 2)]))
        if not cpu_smoke:
            runs.append(Run(f"{small} {label} DDP x{n}", n, [*common, "--model", small, *pc, "--parallel", "ddp",
                                                             "--batch-size", str(n * batch1)]))
    if n > 1 and not cpu_smoke:
        tp_common = [*common, "--model", TP_MODEL, *pc, "--tp", "2"]
        runs.append(Run(f"{TP_MODEL} {label} TP2 x2", 2, [*tp_common, "--batch-size", "8"]))
        if n >= 4:
            runs.append(Run(f"{TP_MODEL} {label} TP2 FSDP x{n}", n, [*tp_common, "--batch-size", str(8 * n // 2)]))
    fp8 = not cpu_smoke and capability is not None and capability >= (9, 0) and torchao
    if fp8:
        # Against the bf16 row of the same model. Tensorwise only: for 350m torchao's rowwise thresholds
        # convert no linear at all (a test shows which layers each recipe takes).
        runs.append(Run(f"{mid} fp8 tensorwise 1 GPU", 1, [*common, "--model", mid, "--precision", "fp8",
                                                          "--fp8-recipe", "tensorwise", "--compile",
                                                          "--batch-size", str(batch1 // 2)]))
    if not cpu_smoke:
        # 1.3b at the baseline's batch: the third row of its table, and fp8's bf16 baseline. Every block linear
        # of 1.3b is past torchao's thresholds, where fp8 should pay if it ever does.
        for big in (["--precision", "bf16"], ["--precision", "fp8", "--fp8-recipe", "tensorwise"])[:1 + fp8]:
            runs.append(Run(f"1.3b {big[1]}{' tensorwise' if big[1] == 'fp8' else ''} 1 GPU", 1,
                            [*common, "--model", "1.3b", *big, "--compile", "--batch-size", "8"]))
    # Kill-and-resume: DDP over every GPU, a SIGTERM to rank 0 halfway, then --resume.
    par = ["--parallel", "ddp"] if n > 1 else []
    rsteps = max(4, steps // 2 * 2)
    rbase = [*base, "--data", corpus, "--model", small, *prec, *par, "--batch-size", str(n * batch1),
             "--steps", str(rsteps), "--stop-check-every", "1", "--lr", "1e-3"]
    resume = (Run("resume: straight", n, rbase),
              Run("resume: SIGTERM", n, rbase, env={SIGTERM_AT_ENV: f"0:{rsteps // 2}"}),
              Run("resume: resumed", n, [*rbase, "--resume"]))
    # The smoke's sizes stop at 8M: gloo sums on the CPU, and its figures mean nothing (64M cost seconds more).
    ar = Run(f"all-reduce x{n}", n, ["--min-bytes", "1M", "--max-bytes", "8M" if cpu_smoke else "1G",
                                     "--iters", "5" if cpu_smoke else "20"])
    return Plan(runs, resume, ar)


def _launch(nproc: int, module: str, args: list[str], env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
           "-m", module, *args]
    return subprocess.run(cmd, env={**os.environ, "OMP_NUM_THREADS": "1", **env}, capture_output=True,
                          text=True, timeout=timeout)


def _first_error(proc: subprocess.CompletedProcess) -> str:
    """The trainer's own error line if it printed one, else the last line of stderr."""
    lines = [x.strip() for x in (proc.stderr or "").splitlines() if x.strip()]
    mine = [x for x in lines if x.startswith("gcpgpu.trainer") and ("error" in x or "failed" in x)]
    return (mine or lines or [f"exit {proc.returncode}"])[0 if mine else -1][:200]


def run_trainer(run: Run, workdir: Path, timeout: float, extra: list[str] | None = None) -> Run:
    log = workdir / (re.sub(r"[^a-z0-9]+", "-", run.name.lower()) + ".jsonl")
    log.unlink(missing_ok=True)
    t0 = time.perf_counter()
    try:
        proc = _launch(run.nproc, "gcpgpu.trainer", [*run.args, *(extra or []), "--log-json", str(log)],
                       run.env, timeout)
    except subprocess.TimeoutExpired:
        run.note = f"timed out after {timeout:.0f} s"
        return run
    run.wall_s = time.perf_counter() - t0
    records = [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []
    summaries = [r for r in records if r.get("kind") == "summary"]
    run.summary = summaries[-1] if summaries else {}
    run.summary["final_loss"] = next((r["loss"] for r in reversed(records) if "loss" in r), None)
    run.summary["first_loss"] = next((r["loss"] for r in records if "loss" in r), None)
    stopped = run.summary.get("stopped")
    run.ok = proc.returncode == 0 or (proc.returncode == 143 and stopped is True) or (
        SIGTERM_AT_ENV in run.env and proc.returncode != 0 and bool(records))
    if not run.ok:
        run.note = _first_error(proc)
    return run


def run_allreduce(run: Run, timeout: float) -> Run:
    t0 = time.perf_counter()
    try:
        proc = _launch(run.nproc, "gcpgpu.trainer.bench_allreduce", run.args, {}, timeout)
    except subprocess.TimeoutExpired:
        run.note = f"timed out after {timeout:.0f} s"
        return run
    run.wall_s = time.perf_counter() - t0
    rows = [x.split() for x in proc.stdout.splitlines() if x.strip() and not x.startswith("#")]
    if proc.returncode != 0 or not rows:
        run.note = _first_error(proc)
        return run
    size, busbw, wrong = int(rows[-1][0]), float(rows[-1][6]), int(rows[-1][7])
    run.ok = wrong == 0
    run.summary = {"bytes": size, "busbw_gbps": busbw, "wrong": wrong}
    run.note = "" if run.ok else f"{wrong} wrong elements"
    return run


def resume_verdict(straight: Run, resumed: Run, tolerance: float) -> tuple[bool, str]:
    """Final loss of the resumed run against the uninterrupted one, within a relative tolerance."""
    a, b = straight.summary.get("final_loss"), resumed.summary.get("final_loss")
    if a is None or b is None:
        return False, "no final loss to compare"
    rel = abs(b - a) / max(abs(a), 1e-12)
    return rel <= tolerance, f"final loss {b:.4f} vs {a:.4f} uninterrupted: {rel * 100:.2f}% (tolerance {tolerance * 100:.0f}%)"


def _gib(n: float | None) -> str:
    return "-" if not n else f"{n / 2**30:.1f} GiB"


def _batch(s: dict) -> str:
    b, a = s.get("batch_size"), s.get("grad_accum") or 1
    return "-" if not b else f"{b}" if a == 1 else f"{b}={b // a}x{a}"


def mfu_lines(plan: Plan) -> list[str]:
    """Each model's 1-GPU rows beside the baseline and the 50 % MFU target."""
    out = []
    for r in plan.runs:
        model = r.name.split()[0]
        if model not in BASELINE or not r.name.endswith(" 1 GPU") or " bf16 " not in r.name:
            continue
        b_batch, b_tok, b_mfu, _ = BASELINE[model]
        s = r.summary
        tok, m = s.get("tokens_per_s"), s.get("mfu")
        if not r.ok or m is None:
            verdict = "FAILED" if not r.ok else "no MFU (GPU peak unknown)"
            out.append(f"  {r.name:<22} {verdict}; baseline: {b_mfu * 100:.1f}% at batch {b_batch}")
            continue
        gap = "meets it" if m >= MFU_TARGET else f"{(MFU_TARGET - m) * 100:.1f} points short"
        out.append(f"  {r.name:<22} batch {_batch(s):<7} {tok:>9,.0f} tok/s ({tok / b_tok:.2f}x the baseline's "
                   f"{b_tok:,} at {b_batch})  MFU {m * 100:.1f}% (baseline: {b_mfu * 100:.1f}%; target "
                   f"{MFU_TARGET:.0%}: {gap})")
    if out:
        out.insert(0, f"MFU against the {MFU_TARGET:.0%} target and the baseline (one H100, torch 2.11, bf16, "
                      "compile, seq 1024):")
    return out


def tp_lines(plan: Plan) -> list[str]:
    """Each TP row's tokens/s per GPU beside its target: TP_TARGET of the same model's one-GPU row."""
    one = next((r for r in plan.runs if r.name == f"{TP_MODEL} bf16 1 GPU"), None)
    ref = one.summary.get("tokens_per_s") if one and one.ok else None
    out = []
    for r in plan.runs:
        if " TP" not in r.name:
            continue
        tok = r.summary.get("tokens_per_s")
        if not r.ok or not tok:
            out.append(f"  {r.name:<22} {'FAILED' if not r.ok else 'no speed figure'}; target {TP_TARGET:.2f}x")
            continue
        if ref:
            ratio = tok / ref
            verdict = "meets it" if ratio >= TP_TARGET else f"{(TP_TARGET - ratio) * 100:.0f} points short"
            vs = f"{ratio:.2f}x the one-GPU row's {ref:,.0f} (target {TP_TARGET:.2f}x: {verdict})"
        else:
            vs = f"no one-GPU {TP_MODEL} row to compare (target {TP_TARGET:.2f}x of it)"
        m = r.summary.get("mfu")
        out.append(f"  {r.name:<22} {tok:>9,.0f} tok/s/GPU{f', MFU {m * 100:.1f}%' if m else ''}: {vs}")
    if out:
        out.insert(0, f"Tensor parallelism against its target ({TP_TARGET:.0%} of one GPU's tokens/s per GPU at the "
                      "same batch per model replica):")
    return out


def table(plan: Plan, resume_line: str | None) -> str:
    """The report, plain text: one row per run, then the MFU comparison."""
    head = (f"{'run':<26} {'batch':>9} {'tok/s/GPU':>10} {'MFU':>6} {'peak reserved':>14} {'plan':>9} "
            f"{'meas/plan':>9}  note")
    out = [head, "-" * len(head)]
    for r in plan.runs + (list(plan.resume) if plan.resume else []):
        s = r.summary
        tok, m = s.get("tokens_per_s"), s.get("mfu")
        mem, planned = s.get("peak_mem_bytes"), s.get("planned_mem_bytes")
        ratio = f"{mem / planned:.2f}" if mem and planned else "-"
        if s.get("peak_mem_kind") == "cpu_rss":
            mem = None
        note = r.note if not r.ok else (f"{s['alloc_retries']} alloc retries" if s.get("alloc_retries") else "")
        out.append(f"{r.name:<26} {_batch(s):>9} {tok and f'{tok:,.0f}' or '-':>10} {m and f'{m * 100:.1f}%' or '-':>6} "
                   f"{_gib(mem):>14} {_gib(planned):>9} {ratio:>9}  {'FAILED: ' if not r.ok else ''}{note}")
    if plan.allreduce:
        a = plan.allreduce
        bw = f"busbw {a.summary['busbw_gbps']:.1f} GB/s at {a.summary['bytes'] / 2**20:.0f} MiB" if a.ok else ""
        out.append(f"{a.name:<26} {bw}{'FAILED: ' + a.note if not a.ok else ''}")
    if resume_line:
        out.append(resume_line)
    return "\n".join(out + mfu_lines(plan) + tp_lines(plan))


def gpu_facts() -> tuple[int, str | None, tuple[int, int] | None, str]:
    import torch

    if not torch.cuda.is_available():
        return 0, None, None, torch.__version__
    return (torch.cuda.device_count(), torch.cuda.get_device_name(0), torch.cuda.get_device_capability(0),
            torch.__version__)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m gcpgpu.trainer.gpu_check", description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=60, help="optimizer steps per run (default 60)")
    p.add_argument("--timeout", type=float, default=900, help="seconds per run before it counts as failed")
    p.add_argument("--out", default="gpu-check.json", help="where the figures go as JSON (default gpu-check.json)")
    p.add_argument("--cpu-smoke", action="store_true", help="the same plan, tiny, on CPU: tests the mechanics")
    p.add_argument("--only", choices=("all", "speed", "resume", "auto", "mfu", "tp"), default="all",
                   help="run only the speed rows, only kill-and-resume, only the auto-batch rows, only the "
                        "one-GPU bf16 rows the baseline has (auto first, then the fixed batches), or only the TP "
                        "rows and their one-GPU reference (default all)")
    p.add_argument("--accept-torch", action="store_true",
                   help="run even if this torch is older than the trainer's floor (a machine you cannot change)")
    args = p.parse_args(argv)
    ngpu, name, capability, torch_version = gpu_facts()
    if ngpu == 0 and not args.cpu_smoke:
        print(f"{PROG}: no NVIDIA GPU visible to torch {torch_version}; nothing to measure", flush=True)
        return 0
    from gcpgpu.trainer.config import ACCEPT_TORCH_ENV, MIN_TORCH
    from gcpgpu.trainer.launch_checks import _release

    args.accept_torch = args.accept_torch and _release(torch_version) < _release(MIN_TORCH)  # only when it is older
    if args.accept_torch:
        os.environ[ACCEPT_TORCH_ENV] = torch_version
    tmp = tempfile.TemporaryDirectory(prefix="gpu-check-")
    work = Path(tmp.name)
    plan = build_plan(ngpu, capability, args.cpu_smoke, args.steps, str(write_corpus(work / "corpus.txt")),
                      torchao=find_spec("torchao") is not None)
    select(plan, args.only)
    count = len(plan.runs) + 3 * bool(plan.resume) + bool(plan.allreduce)
    print(f"{PROG}: {ngpu or 'no'} x {name or 'cpu'} (capability {capability}), torch {torch_version}"
          f"{f' (older than the tested {MIN_TORCH} line: accepted)' if args.accept_torch else ''}; "
          f"{count} runs", flush=True)
    resume_line, resume_ok = None, True
    with tmp:
        for r in plan.runs:
            run_trainer(r, work, args.timeout)
            print(f"  {progress_line(r)}", flush=True)
        if plan.resume:
            resume_ok, resume_line = kill_and_resume(plan.resume, work, args.timeout,
                                                     0.0 if args.cpu_smoke else RESUME_TOLERANCE)
        if plan.allreduce:
            run_allreduce(plan.allreduce, args.timeout)
    print(table(plan, resume_line), flush=True)
    every = plan.runs + list(plan.resume or []) + ([plan.allreduce] if plan.allreduce else [])
    Path(args.out).write_text(json.dumps({
        "device": name, "gpus": ngpu, "capability": capability, "torch": torch_version, "cpu_smoke": args.cpu_smoke,
        "torch_floor_accepted": args.accept_torch,
        "resume_tolerance": RESUME_TOLERANCE, "resume_ok": resume_ok if plan.resume else None,
        "runs": [asdict(r) for r in every]}, indent=2))
    print(f"{PROG}: figures in {args.out}", flush=True)
    return 0 if all(r.ok for r in every) and resume_ok else 1


def select(plan: Plan, only: str) -> Plan:
    """Keep the rows `--only` names, in place. 'mfu': the one-GPU bf16 rows the baseline has,
    the auto-batch ones first, so a run cut short by a time limit has them."""
    if only == "resume":
        plan.runs, plan.allreduce = [], None
    if only in ("speed", "auto", "mfu", "tp"):
        plan.resume = None
    if only == "tp":
        plan.allreduce = None
        plan.runs = [r for r in plan.runs if r.name == f"{TP_MODEL} bf16 1 GPU" or " TP" in r.name]
    if only in ("auto", "mfu"):
        plan.allreduce = None
        one_gpu_bf16 = [r for r in plan.runs if r.name.endswith(" 1 GPU") and r.name.split()[1] == "bf16"]
        plan.runs = [r for r in one_gpu_bf16 if " auto " in r.name]
        if only == "mfu":
            plan.runs += [r for r in one_gpu_bf16 if " auto " not in r.name]
    return plan


def progress_line(r: Run) -> str:
    """One row's outcome as soon as it ends, with its figures: a check stopped by a time limit keeps them."""
    if not r.ok:
        return f"{r.name}: FAILED: {r.note} ({r.wall_s:.0f} s)"
    s = r.summary
    tok, m = s.get("tokens_per_s"), s.get("mfu")
    figures = [f"batch {_batch(s)}", f"{tok:,.0f} tok/s/GPU" if tok else "", f"MFU {m * 100:.1f}%" if m else "",
               f"peak {_gib(s.get('peak_mem_bytes'))}" if s.get("peak_mem_kind") == "cuda_reserved" else ""]
    return f"{r.name}: ok, {', '.join(f for f in figures if f)} ({r.wall_s:.0f} s)"


def kill_and_resume(trio: tuple[Run, Run, Run], work: Path, timeout: float, tolerance: float) -> tuple[bool, str]:
    """Uninterrupted, then SIGTERM'd halfway and resumed from its checkpoint: final losses compared
    (CPU: bit-identical, tolerance 0; GPU: within RESUME_TOLERANCE)."""
    straight, stopped, resumed = trio
    ckpt = ["--ckpt-dir", str(work / "ckpt")]
    run_trainer(straight, work, timeout)
    run_trainer(stopped, work, timeout, ckpt)
    run_trainer(resumed, work, timeout, ckpt)
    ok, line = resume_verdict(straight, resumed, tolerance)
    stopped_early = stopped.summary.get("stopped") is True
    first = straight.summary.get("first_loss")
    line += f"; it fell from {first:.3f}" if first is not None else ""
    ok = ok and stopped_early
    return ok, (f"kill-and-resume: {'ok' if ok else 'FAILED'}: {line}"
                + ("" if stopped_early else "; the SIGTERM run did not stop early"))


if __name__ == "__main__":
    sys.exit(main())
