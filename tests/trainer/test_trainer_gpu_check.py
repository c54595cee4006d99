"""`make gpu-check`: one line and exit 0 without a GPU; the plan it would run on GPUs; and its whole
mechanics (torchrun launches, log parsing, kill-and-resume comparison, all-reduce) run on CPU."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from _trainer_helpers import REPO, base_env

from gcpgpu.trainer.gpu_check import (
    Plan,
    Run,
    build_plan,
    mfu_lines,
    progress_line,
    resume_verdict,
    select,
    table,
)


def test_without_a_gpu_it_says_so_in_one_line_and_exits_0():
    proc = subprocess.run([sys.executable, "-m", "gcpgpu.trainer.gpu_check"], cwd=REPO, env=base_env(),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines() == [proc.stdout.strip()]
    assert "no NVIDIA GPU" in proc.stdout


def test_the_make_target_runs_it():
    assert "$(BIN)/python -m gcpgpu.trainer.gpu_check" in (REPO / "Makefile").read_text()


def _names(plan: Plan) -> list[str]:
    return [r.name for r in plan.runs]


def test_on_eight_hopper_gpus_it_measures_every_row_the_issue_asks_for():
    plan = build_plan(8, (9, 0), cpu_smoke=False, steps=60)
    assert _names(plan) == ["124m bf16 1 GPU", "350m bf16 1 GPU", "124m bf16 auto 1 GPU", "350m bf16 auto 1 GPU",
                            "1.3b bf16 auto 1 GPU", "350m bf16 FSDP x8", "124m bf16 DDP x8",
                            "350m fp8 tensorwise 1 GPU", "1.3b bf16 1 GPU", "1.3b fp8 tensorwise 1 GPU"]
    for r in plan.runs[2:5]:  # issue 30: the batch from the memory plan, not a fixed one
        assert r.args[r.args.index("--batch-size") + 1] == "auto" and "--memory-budget" not in r.args
    for r in plan.runs:
        assert "--compile" in r.args and "--data" in r.args
    fsdp = plan.runs[5]
    assert fsdp.nproc == 8 and fsdp.args[fsdp.args.index("--parallel") + 1] == "fsdp"
    straight, stopped, resumed = plan.resume
    assert stopped.env == {"GCPGPU_TRAINER_TEST_SIGTERM_AT": "0:30"} and "--resume" in resumed.args
    assert straight.args[straight.args.index("--data") + 1] == "corpus.txt"  # a text the model learns
    for r in plan.resume:  # bf16 without compile, whatever the speed rows use
        assert r.args[r.args.index("--precision") + 1] == "bf16" and "--compile" not in r.args
    assert plan.allreduce.nproc == 8 and plan.allreduce.args[-3:] == ["1G", "--iters", "20"]


def test_an_ampere_gpu_gets_no_fp8_rows_and_one_gpu_no_multi_gpu_rows():
    assert not any("fp8" in n for n in _names(build_plan(8, (8, 0), cpu_smoke=False, steps=60)))
    # Nor a Hopper without torchao (a machine's own torch image): those rows could only fail.
    assert not any("fp8" in n for n in _names(build_plan(1, (9, 0), cpu_smoke=False, steps=60, torchao=False)))
    assert _names(build_plan(1, (9, 0), cpu_smoke=False, steps=60))[:2] == ["124m bf16 1 GPU", "350m bf16 1 GPU"]
    assert not any("x1" in n for n in _names(build_plan(1, (9, 0), cpu_smoke=False, steps=60)))


def test_only_mfu_runs_issue_30s_one_gpu_bf16_rows_auto_first_even_without_torchao():
    # A lent GPU machine's own torch image has no torchao: issue 30's 1.3b row at batch 8 is still measured.
    plan = select(build_plan(1, (9, 0), cpu_smoke=False, steps=40, torchao=False), "mfu")
    assert _names(plan) == ["124m bf16 auto 1 GPU", "350m bf16 auto 1 GPU", "1.3b bf16 auto 1 GPU",
                            "124m bf16 1 GPU", "350m bf16 1 GPU", "1.3b bf16 1 GPU"]
    assert plan.resume is None and plan.allreduce is None
    eight = select(build_plan(8, (9, 0), cpu_smoke=False, steps=40), "mfu")
    assert "1.3b fp8 tensorwise 1 GPU" not in _names(eight) and "350m bf16 FSDP x8" not in _names(eight)
    assert _names(select(build_plan(1, (9, 0), cpu_smoke=False, steps=40), "auto"))[-1] == "1.3b bf16 auto 1 GPU"


def test_each_row_prints_its_figures_as_it_ends_so_a_cut_off_check_keeps_them():
    row = Run("350m bf16 auto 1 GPU", 1, [], ok=True, wall_s=61.2, summary={
        "tokens_per_s": 201234.0, "mfu": 0.493, "batch_size": 48, "grad_accum": 1,
        "peak_mem_bytes": 70 * 2**30, "peak_mem_kind": "cuda_reserved"})
    assert progress_line(row) == ("350m bf16 auto 1 GPU: ok, batch 48, 201,234 tok/s/GPU, MFU 49.3%, "
                                  "peak 70.0 GiB (61 s)")
    bad = Run("1.3b bf16 auto 1 GPU", 1, [], ok=False, note="CUDA out of memory", wall_s=3)
    assert progress_line(bad) == "1.3b bf16 auto 1 GPU: FAILED: CUDA out of memory (3 s)"


def test_resume_verdict_holds_the_stated_tolerance():
    def run(loss):
        return Run("r", 1, [], summary={"final_loss": loss})

    assert resume_verdict(run(3.00), run(3.05), 0.02)[0]
    ok, line = resume_verdict(run(3.00), run(3.10), 0.02)
    assert not ok and "3.33%" in line and "tolerance 2%" in line
    assert not resume_verdict(run(3.0), run(None), 0.02)[0]


def test_table_compares_the_reserved_peak_with_the_plan():
    row = Run("124m bf16 1 GPU", 1, [], ok=True, summary={
        "tokens_per_s": 181234.0, "mfu": 0.412, "peak_mem_bytes": 30 * 2**30, "planned_mem_bytes": 25 * 2**30,
        "peak_mem_kind": "cuda_reserved", "alloc_retries": 2})
    bad = Run("350m bf16 1 GPU", 1, [], ok=False, note="gcpgpu.trainer: error: CUDA out of memory")
    text = table(Plan([row, bad], None, None), None)
    line = next(x for x in text.splitlines() if x.startswith("124m"))
    assert "181,234" in line and "41.2%" in line and "30.0 GiB" in line and "25.0 GiB" in line
    assert "1.20" in line and "2 alloc retries" in line
    assert "FAILED: gcpgpu.trainer: error: CUDA out of memory" in text


def test_each_mfu_is_shown_beside_the_50_percent_target_and_the_baseline():
    def row(name, batch, accum, tok, m):
        return Run(name, 1, [], ok=True, summary={"tokens_per_s": tok, "mfu": m, "batch_size": batch,
                                                  "grad_accum": accum})

    plan = Plan([row("124m bf16 auto 1 GPU", 48, 1, 420_000.0, 0.363), row("350m bf16 auto 1 GPU", 64, 2, 205_000.0, 0.52),
                 Run("1.3b bf16 auto 1 GPU", 1, [], ok=False, note="OOM"), row("124m bf16 DDP x8", 128, 1, 1.0, 0.3)],
                None, None)
    lines = mfu_lines(plan)
    assert lines[0].startswith("MFU against the 50% target and the baseline")
    assert len(lines) == 4  # the DDP row is not one of the table's
    assert "batch 48" in lines[1] and "1.18x the baseline's 356,564 at 16" in lines[1]
    assert "MFU 36.3% (baseline: 30.8%; target 50%: 13.7 points short)" in lines[1]
    assert "batch 64=32x2" in lines[2] and "MFU 52.0% (baseline: 36.9%; target 50%: meets it)" in lines[2]
    assert "FAILED; baseline: 47.1% at batch 8" in lines[3]
    assert lines[-1] in table(plan, None)
    assert not [line for line in lines if "issue" in line.lower()]  # no tracker numbers in what users read


def test_the_cpu_smoke_launches_each_kind_of_run_once():
    """torch's start-up is most of a smoke run: one process, FSDP and the all-reduce once each, DDP in the
    kill-and-resume runs (a DDP speed row would launch the same thing a fourth time)."""
    plan = build_plan(0, None, cpu_smoke=True, steps=4)
    assert _names(plan) == ["tiny fp32 auto 1 GPU", "tiny fp32 FSDP x2"]
    assert [r.nproc for r in plan.resume] == [2, 2, 2]
    assert all(r.args[r.args.index("--parallel") + 1] == "ddp" for r in plan.resume)
    assert plan.allreduce.name == "all-reduce x2"


@pytest.mark.multiprocess
def test_the_whole_check_runs_scaled_down_on_cpu(tmp_path):
    """torchrun launches of every row, a SIGTERM'd run resumed bit-identically, and the all-reduce bench.
    4 steps a run (the smoke's own default is 8): 2 timed after the 2 warm-up steps, the SIGTERM at step 2."""
    out = tmp_path / "gc.json"
    proc = subprocess.run([sys.executable, "-m", "gcpgpu.trainer.gpu_check", "--cpu-smoke", "--steps", "4", "--out", str(out)],
                          cwd=REPO, env=base_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "kill-and-resume: ok: final loss" in proc.stdout and "(tolerance 0%)" in proc.stdout
    report = json.loads(out.read_text())
    assert report["resume_ok"] and report["cpu_smoke"]
    runs = {r["name"]: r for r in report["runs"]}
    assert set(runs) == {"tiny fp32 auto 1 GPU", "tiny fp32 FSDP x2", "resume: straight", "resume: SIGTERM",
                         "resume: resumed", "all-reduce x2"}
    assert runs["tiny fp32 auto 1 GPU"]["summary"]["batch_size"] > 8  # planned on the smoke's memory budget
    assert all(r["ok"] for r in runs.values())
    assert runs["tiny fp32 FSDP x2"]["summary"]["tokens_per_s"] > 0
    assert runs["resume: straight"]["summary"]["tokens_per_s"] > 0
    assert runs["resume: SIGTERM"]["summary"]["stopped"] is True
    assert runs["all-reduce x2"]["summary"]["busbw_gbps"] > 0


def test_make_gpu_check_runs_from_the_checkout_with_a_machines_own_torch_and_no_venv():
    """A fresh GPU machine (no network, a python3 that has CUDA torch) has no .venv: the target must not
    try to build one. BIN points nowhere here, as on such a machine; without a GPU it ends in one line."""
    proc = subprocess.run(["make", "-s", "gpu-check", "BIN=/nonexistent", f"PYTHON={sys.executable}"], cwd=REPO,
                          env=base_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().startswith("gpu-check: no NVIDIA GPU visible to torch")
    assert "pip" not in proc.stdout + proc.stderr
