"""--batch-size auto / --micro-batch auto|N: the batch from the memory plan, on a CPU memory budget."""

from __future__ import annotations

import json

import pytest
from _trainer_helpers import run

from gcpgpu.trainer import autobatch
from gcpgpu.trainer.config import ConfigError, TrainConfig, parse_bytes
from gcpgpu.trainer.memory import RESERVED_FRACTION, plan_memory

VOCAB = 50304


def budget_for(micro: int, **plan) -> int:
    """The smallest device memory on which `micro` sequences per rank fit with the stated margin."""
    total = plan_memory(plan.get("model", "124m"), plan.get("gpus", 1) * micro, 1024, "bf16",
                        plan.get("parallel", "none"), plan.get("gpus", 1), None, vocab_size=VOCAB,
                        loss_chunk=plan.get("loss_chunk", 2048)).total_bytes
    return int(total * (1 + autobatch.AUTO_MARGIN) / (1 - RESERVED_FRACTION)) + 1


def cfg(**kw) -> TrainConfig:
    base = {"model": "124m", "seq_len": 1024, "precision": "bf16", "parallel": "none"}
    return TrainConfig(**{**base, **kw})


def test_batch_size_auto_takes_the_largest_micro_batch_the_plan_fits_with_the_margin():
    budget = budget_for(12)
    c = cfg(batch_size="auto")
    line = autobatch.apply(c, 1, VOCAB, budget)
    assert (c.batch_size, c.grad_accum, c.micro_batch) == (12, 1, None)
    assert "micro-batch 12 per rank" in line and "+10% margin" in line and "batch 12" in line
    assert "1 ranks" not in line and " x 1 rank x " in line  # issue 51's wording: one rank, not "1 ranks"
    # One byte less and 12 no longer fits: 11.
    c = cfg(batch_size="auto")
    autobatch.apply(c, 1, VOCAB, budget - 2)
    assert c.batch_size == 11


def test_batch_size_auto_keeps_the_accumulation_asked_for_and_counts_every_rank():
    c = cfg(batch_size="auto", grad_accum=4, parallel="ddp")
    autobatch.apply(c, 8, VOCAB, budget_for(6, gpus=8, parallel="ddp"))
    assert (c.batch_size, c.grad_accum) == (8 * 4 * 6, 4)


def test_micro_batch_auto_makes_up_the_global_batch_with_accumulation():
    # 7 sequences fit; the largest divisor of the 64 per rank that fits is 4: 16 micro-steps.
    c = cfg(batch_size=64, micro_batch="auto")
    line = autobatch.apply(c, 1, VOCAB, budget_for(7))
    assert (c.batch_size, c.grad_accum) == (64, 16)
    assert "micro-batch 4 per rank" in line and "16 accum" in line


def test_micro_batch_number_sets_the_accumulation():
    c = cfg(batch_size=64, micro_batch=8, parallel="ddp")
    autobatch.apply(c, 2, VOCAB, None)
    assert (c.batch_size, c.grad_accum) == (64, 4)
    with pytest.raises(ConfigError, match="--micro-batch: 3 x 2 ranks does not divide --batch-size 64"):
        autobatch.apply(cfg(batch_size=64, micro_batch=3, parallel="ddp"), 2, VOCAB, None)


def test_the_chunked_loss_lets_a_larger_batch_fit():
    """The plan counts the output layer: all logits in fp32 at once, or one chunk of them."""
    budget = parse_bytes("40GiB")
    plain, chunked = cfg(batch_size="auto", loss_chunk=0), cfg(batch_size="auto")
    autobatch.apply(plain, 1, VOCAB, budget)
    autobatch.apply(chunked, 1, VOCAB, budget)
    assert chunked.batch_size > 1.5 * plain.batch_size


def test_without_a_gpu_or_budget_auto_says_what_to_give_and_nothing_fitting_is_an_error():
    with pytest.raises(ConfigError, match="--batch-size auto: needs the device's memory.*--memory-budget"):
        autobatch.apply(cfg(batch_size="auto"), 1, VOCAB, None)
    with pytest.raises(ConfigError, match="--micro-batch auto: not even micro-batch 1 fits"):
        autobatch.apply(cfg(batch_size=8, micro_batch="auto"), 1, VOCAB, parse_bytes("1GiB"))
    with pytest.raises(ConfigError, match="--memory-budget: expected a size such as 40GiB"):
        parse_bytes("lots")
    assert parse_bytes("1.5GiB") == 3 * 2**29 and parse_bytes("38000MiB") == 38000 * 2**20


def test_the_trainer_prints_the_auto_batch_with_the_plans_figure_and_trains_with_it(tmp_path):
    log = tmp_path / "log.jsonl"
    budget = 24 * 2**20  # tiny fp32: 6 MiB of weights and optimizer state, under 1 MiB per sequence of 64
    [p] = run(1, ["--model", "tiny", "--seq-len", "64", "--vocab-size", "256", "--steps", "2", "--log-every", "1",
                  "--batch-size", "auto", "--memory-budget", str(budget), "--log-json", str(log)])
    c = TrainConfig(model="tiny", seq_len=64, batch_size="auto", memory_budget=str(budget), parallel="none")
    expected = autobatch.choose(c, 1, 256, None)
    assert 4 < expected.batch_size < 64
    assert expected.line in p.stdout
    first = json.loads(log.read_text().splitlines()[0])
    assert first["tokens"] == expected.batch_size * 64
