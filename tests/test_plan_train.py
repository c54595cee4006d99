"""`gcpgpu plan train`: a training run's time from its FLOPs, the GPUs' peak and an MFU with its source, and its
cost from the node's catalog price; node counts for --days, what --budget buys; bad input refused first."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from gcpgpu.cli import main

# The training seed's LLaMA-70B configuration: 80 layers, d_model 8192, 1.4T tokens of 2048, LLaMA's 32000-token
# vocabulary; bf16 (the default) with FSDP (what plan train assumes on more than one GPU).
LLAMA = ["--layers", "80", "--d-model", "8192", "--vocab-size", "32000", "--seq-len", "2048", "--tokens", "1.4T",
         "--machine-type", "a2-ultragpu-8g"]
TOKENS = 1.4e12


def plan(*argv: str) -> dict:
    result = CliRunner().invoke(main, ["--format", "json", "plan", "train", *argv])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_llama_on_2048_a100s_takes_about_the_21_days_its_authors_reported():
    run = plan(*LLAMA, "--nodes", "256")
    assert run["gpus"] == 2048 and run["gpu"] == "A100 80GB"
    assert run["days"] == pytest.approx(21, rel=0.25)  # Touvron et al. 2023: "approximately 21 days"
    # FLOPs per token as stated: 6N + 12 x layers x d_model x seq
    assert run["flops_per_token"] == pytest.approx(6 * run["params"] + 12 * 80 * 8192 * 2048, rel=0.01)
    assert "LLaMA 65B on 2048 A100 80GB" in run["mfu_source"]
    assert run["tokens_per_s"] * run["days"] * 86400 == pytest.approx(TOKENS)


def test_the_seeds_64_gpus_take_far_longer_and_its_50k_tokens_per_s_means_324_days():
    big, seed = plan(*LLAMA, "--nodes", "256"), plan(*LLAMA, "--nodes", "8")
    assert seed["gpus"] == 64
    assert seed["days"] == pytest.approx(big["days"] * 2048 / 64)  # the same MFU: 32 times fewer GPUs
    assert seed["days"] > 600  # not 21
    # The seed's own throughput, ~50K tokens/s: 1.4e12 tokens / 50,000 tokens/s = 28,000,000 s = 324 days
    assert TOKENS / 50_000 / 86400 == pytest.approx(324, abs=0.5)
    given = plan(*LLAMA, "--nodes", "8", "--tokens-per-second", "50000")
    assert given["days"] == pytest.approx(324, abs=0.5)
    assert given["implied_mfu"] > 1  # 781 tokens/s per A100 at 404 GFLOP a token: more than its peak
    table = CliRunner().invoke(main, ["plan", "train", *LLAMA, "--nodes", "8"])
    assert "24,2" in table.stdout and "tokens/s" in table.stdout  # the throughput it assumes, to compare


def test_days_proposes_the_nodes_that_finish_in_time():
    run = plan(*LLAMA, "--days", "30")
    assert run["nodes"] == run["nodes_for_days"] and run["days"] <= 30
    fewer = plan(*LLAMA, "--nodes", str(run["nodes"] - 1))
    assert fewer["days"] > 30


def test_budget_says_what_it_buys():
    run = plan(*LLAMA, "--nodes", "256", "--budget", "1000000")
    assert run["cost_usd"] > 1_000_000 and run["budget_covers"] is False
    assert run["tokens_budget_buys"] == pytest.approx(TOKENS * 1_000_000 / run["cost_usd"])


def test_the_cost_is_the_catalogs_price_for_the_region_and_provisioning(gcp):
    run = plan("--params", "70B", "--tokens", "1T", "--machine-type", "a4-highgpu-8g", "--nodes", "16",
               "--region", "us-east5", "--provisioning", "spot")
    assert run["price_source"] == "Cloud Billing Catalog"
    assert run["price_per_node_hour"] == pytest.approx(8 * 4.9542, abs=1e-3)  # 8 Spot B200 slices, the snapshot's
    assert run["cost_usd"] == pytest.approx(8 * 4.9542 * 16 * run["hours"], rel=1e-4)
    assert "assumed as H100 (no B200 figure)" in run["mfu_source"]
    assert run["flops_formula"].startswith("6N (attention left out")


@pytest.mark.parametrize(("argv", "words"), [
    (["--model", "124m", "--tokens", "0"], "--tokens '0' must be a number above 0"),
    (["--model", "124m", "--tokens", "-5"], "--tokens '-5' must be a number above 0"),
    (["--model", "124m", "--tokens", "lots"], "--tokens 'lots'"),
    (["--params", "70B", "--tokens", "1T", "--nodes", "1"], "--nodes 1: the model needs about"),
    (["--model", "124m", "--tokens", "1T", "--region", "mars-north1"], "--region 'mars-north1' is not a region"),
    (["--model", "124m", "--params", "1B", "--tokens", "1T"], "give the model as one of"),
    (["--model", "9000b", "--tokens", "1T"], "--model '9000b' must be one of"),
    (["--model", "124m", "--tokens", "1T", "--provisioning", "cheap"], "--provisioning 'cheap'"),
])
def test_bad_input_is_one_line_naming_the_field_before_any_call(gcp, argv, words):
    from helpers import refused

    line = refused(gcp, "plan", "train", "--machine-type", "a2-ultragpu-8g", *argv)
    assert words in line


def test_an_unknown_machine_type_is_refused_before_any_call(gcp):
    from helpers import refused

    line = refused(gcp, "plan", "train", "--model", "124m", "--tokens", "1T", "--machine-type", "a2-ultragpu-9g")
    assert "--machine-type 'a2-ultragpu-9g' is not a known GPU machine type" in line
