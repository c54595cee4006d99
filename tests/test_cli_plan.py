"""`gcpgpu plan memory`: the trainer's planner behind the CLI, with the catalog's GPU memory."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from gcpgpu.cli import main


def test_plan_memory_uses_the_machines_gpus_and_memory():
    result = CliRunner().invoke(main, ["--format", "json", "plan", "memory", "--model", "1.3b", "--batch-size", "16",
                                       "--seq-len", "2048", "--machine-type", "a3-highgpu-8g"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["gpus"] == 8 and data["gpu_memory_bytes"] == 80 * 1024**3
    assert data["machine_type"] == "a3-highgpu-8g" and data["fits"] is True
    # Sharding (FSDP) must shrink the per-GPU static memory below DDP's for the same setup.
    fsdp = json.loads(CliRunner().invoke(main, ["--format", "json", "plan", "memory", "--model", "1.3b", "--batch-size",
                                                "16", "--parallel", "fsdp", "--machine-type", "a3-highgpu-8g"]).stdout)
    assert fsdp["optimizer_bytes"] * 8 == pytest.approx(data["optimizer_bytes"], rel=0.01)


@pytest.mark.parametrize(("args", "needle"), [
    (["--model", "7b", "--batch-size", "8"], "--model '7b'"),
    (["--model", "124m", "--batch-size", "10", "--gpus", "4"], "--batch-size 10"),
    (["--model", "124m", "--batch-size", "8", "--precision", "int4"], "--precision 'int4'"),
    (["--model", "124m", "--batch-size", "8", "--parallel", "none", "--gpus", "2"], "--parallel none"),
    (["--model", "124m", "--batch-size", "8", "--machine-type", "h100"], "--machine-type 'h100'"),
])
def test_plan_memory_bad_input_is_one_line(args, needle):
    result = CliRunner().invoke(main, ["plan", "memory", *args])
    assert result.exit_code == 2
    assert len(result.output.strip().splitlines()) == 1 and needle in result.output


@pytest.mark.parametrize("flags", [
    [],
    ["--model", "124m"],
    ["--model", "350m", "--batch-size", "32", "--precision", "bf16"],
    ["--model", "1.3b", "--batch-size", "16", "--seq-len", "2048", "--parallel", "fsdp", "--grad-accum", "2"],
])
@pytest.mark.parametrize("gpus", [1, 8])
def test_plan_memory_and_the_trainer_read_the_same_flags_as_the_same_run(flags, gpus):
    """Issue 24 item 9: the planner assumed 1024-token sequences while the trainer defaults to 256."""
    from gcpgpu.trainer.config import parse_args, resolve_auto

    if gpus > 1 and "--batch-size" not in flags:
        flags = [*flags, "--batch-size", "16"]
    result = CliRunner().invoke(main, ["--format", "json", "plan", "memory", *flags, "--gpus", str(gpus)])
    assert result.exit_code == 0, result.output
    planned = json.loads(result.stdout)
    run = resolve_auto(parse_args(flags), world_size=gpus)
    assert {k: planned[k] for k in ("model", "batch_size", "seq_len", "precision", "parallel", "grad_accum")} == {
        "model": run.model, "batch_size": run.batch_size, "seq_len": run.seq_len, "precision": run.precision,
        "parallel": run.parallel, "grad_accum": run.grad_accum}


def test_plan_memory_counts_the_trainers_chunked_loss_and_the_plain_one_when_asked():
    """124m, 16 x 1024 tokens, bf16: all logits at once hold 16384 x 50304 x (2 + 8) bytes (7.7 GiB); the
    trainer's default chunks hold one chunk's plus fp32 gradients of the hidden states and the head."""
    def plan(*extra):
        result = CliRunner().invoke(main, ["--format", "json", "plan", "memory", "--model", "124m", "--batch-size",
                                           "16", "--seq-len", "1024", "--precision", "bf16", *extra])
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)

    chunked, plain = plan(), plan("--loss-chunk", "0")
    assert chunked["loss_chunk"] == 2048 and plain["loss_chunk"] == 0
    tokens, vocab, h = 16 * 1024, 50304, 768
    saved = tokens * vocab * (2 + 8) - (2048 * vocab * (2 * 2 + 8) + tokens * h * 4 + vocab * h * 4)
    assert plain["activations_bytes"] - chunked["activations_bytes"] == saved
    assert saved > 6 * 1024**3


def test_plan_memory_proposes_a_layout_that_fits_for_6_7b_on_an_a3_node():
    result = CliRunner().invoke(main, ["--format", "json", "plan", "memory", "--model", "6.7b",
                                       "--machine-type", "a3-highgpu-8g"])
    assert result.exit_code == 0, result.output
    lay = json.loads(result.stdout)["layout"]
    assert lay["fits"] and lay["micro_batch"] >= 1 and "--parallel fsdp" in lay["flags"] and lay["why"]
    table = CliRunner().invoke(main, ["plan", "memory", "--model", "6.7b", "--machine-type", "a3-highgpu-8g"])
    assert "proposed layout" in table.output and lay["flags"] in table.output


def test_plan_memory_counts_tp_selective_ac_and_the_compiled_head():
    def plan(*extra):
        result = CliRunner().invoke(main, ["--format", "json", "plan", "memory", "--model", "350m", "--batch-size",
                                           "8", "--seq-len", "1024", "--precision", "bf16", *extra])
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)

    eager, compiled = plan("--loss-chunk", "0"), plan("--compile")
    assert compiled["compiled"] and compiled["loss_chunk"] == 0 and compiled["total_bytes"] < eager["total_bytes"]
    tp = plan("--tp", "2", "--gpus", "8", "--ac", "selective")
    assert tp["parallel"] == "fsdp" and tp["tp"] == 2 and tp["total_for_ac_bytes"] < tp["total_bytes"]
    bad = CliRunner().invoke(main, ["plan", "memory", "--model", "350m", "--tp", "3", "--gpus", "6"])
    assert bad.exit_code == 2 and "tp 3 must divide the model's 16 heads" in bad.output
