"""Review items of the trainer's GPU paths that CPU can check: the torch floor, CUDA-graph compile
modes under DDP/FSDP, and FSDP keeping its gradients sharded through an accumulation."""

from __future__ import annotations

import subprocess
import sys

import pytest
from _trainer_helpers import REPO, base_env

from gcpgpu.trainer.config import MIN_TORCH, ConfigError, TrainConfig
from gcpgpu.trainer.launch_checks import check_runtime

CPU = dict(world_size=1, local_world_size=1, cuda_available=False, cuda_capability=None,
           torchao_available=False, allow_cpu=True)


@pytest.mark.parametrize("version, ok", [
    ("2.6.0a0+ecf3bae40a.nv24.12", False),  # NGC 24.12's build, the image's old base
    ("2.12.1+cu130", False),
    ("2.13.0", True),
    ("2.13.0+cpu", True),
    ("2.14.1", True),
])
def test_torch_older_than_the_tested_line_is_refused_in_one_line(version, ok):
    cfg = TrainConfig()
    if ok:
        assert check_runtime(cfg, torch_version=version, **CPU) == "cpu"
        return
    with pytest.raises(ConfigError) as e:
        check_runtime(cfg, torch_version=version, **CPU)
    assert f"torch {version}" in str(e.value) and f">= {MIN_TORCH}" in str(e.value)
    assert "\n" not in str(e.value)


def test_an_older_torch_runs_only_when_that_exact_version_is_accepted(monkeypatch):
    from gcpgpu.trainer.config import ACCEPT_TORCH_ENV

    monkeypatch.setenv(ACCEPT_TORCH_ENV, "2.11.0+cu130")
    assert check_runtime(TrainConfig(), torch_version="2.11.0+cu130", **CPU) == "cpu"
    with pytest.raises(ConfigError):
        check_runtime(TrainConfig(), torch_version="2.10.0+cu130", **CPU)


@pytest.mark.parametrize("mode", ["max-autotune", "reduce-overhead"])
@pytest.mark.parametrize("parallel", ["ddp", "fsdp"])
def test_cuda_graph_compile_modes_are_refused_with_ddp_and_fsdp(mode, parallel):
    cfg = TrainConfig(compile=True, compile_mode=mode, parallel=parallel, batch_size=8)
    with pytest.raises(ConfigError) as e:
        check_runtime(cfg, **{**CPU, "world_size": 2, "local_world_size": 2})
    assert f"--compile-mode {mode}" in str(e.value) and "max-autotune-no-cudagraphs" in str(e.value)


@pytest.mark.parametrize("mode", ["max-autotune", "max-autotune-no-cudagraphs", "reduce-overhead"])
def test_cuda_graph_compile_modes_stay_allowed_on_one_process(mode):
    cfg = TrainConfig(compile=True, compile_mode=mode, parallel="none")
    assert check_runtime(cfg, **CPU) == "cpu"


def test_max_autotune_without_cudagraphs_is_allowed_with_fsdp():
    cfg = TrainConfig(compile=True, compile_mode="max-autotune-no-cudagraphs", parallel="fsdp", batch_size=8)
    assert check_runtime(cfg, **{**CPU, "world_size": 2, "local_world_size": 2}) == "cpu"


# A one-rank FSDP2 run of the trainer's own parallelize + grad_sync: after the FIRST micro-step of an
# accumulation every parameter already holds its sharded gradient (reduce-scattered), so no GPU ever
# keeps a full unsharded fp32 gradient across micro-steps. With set_requires_gradient_sync(False), FSDP2
# keeps the unsharded gradient internally and leaves .grad unset until the last micro-step.
_FSDP_ACCUM = r"""
import os, torch, torch.distributed as dist
os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                  MASTER_PORT=os.environ["PORT"])
dist.init_process_group("gloo")
from gcpgpu.trainer.dist import read_env
from gcpgpu.trainer.model import GPT, GPTConfig
from gcpgpu.trainer.parallel import parallelize
from gcpgpu.trainer.train import grad_sync
torch.manual_seed(0)
model = GPT(GPTConfig.from_size("tiny", vocab_size=64, seq_len=16))
model = parallelize(model, parallel="fsdp", env=read_env(), device=torch.device("cpu"), param_dtype=None,
                    ac_every=0, compile=False, compile_mode="default")
x = torch.randint(0, 64, (2, 16))
with grad_sync(model, "fsdp", sync=False):
    loss = model(x, x)
    # Between forward and backward: resharded modules hold sharded DTensors, the others unsharded tensors.
    from torch.distributed.tensor import DTensor
    print("ROOT_SHARDED", isinstance(model.lm_head.weight, DTensor), "FIRST_BLOCK_SHARDED",
          isinstance(next(model.blocks[0].parameters()), DTensor))
    loss.backward()
missing = [n for n, p in model.named_parameters() if p.grad is None]
print("MISSING", len(missing), "OF", len(list(model.parameters())))
dist.destroy_process_group()
"""


def test_fsdp_reduce_scatters_every_micro_step_of_an_accumulation():
    from _trainer_helpers import free_port

    proc = subprocess.run([sys.executable, "-c", _FSDP_ACCUM], cwd=REPO, capture_output=True, text=True,
                          timeout=120, env=base_env({"PORT": str(free_port())}))
    assert proc.returncode == 0, proc.stderr[-2000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("MISSING"))
    assert line.split()[1] == "0", line
    # The root (tied embedding + head) stays gathered from forward into backward, as torchtitan leaves
    # it (fully_shard's default for the root); the first block is resharded and re-gathered in backward.
    assert "ROOT_SHARDED False FIRST_BLOCK_SHARDED True" in proc.stdout, proc.stdout


# fp8 as torchao intends: which block linears of each size go fp8 under torchao's own size thresholds
# (from its H100 benchmarks), per recipe. Conversion runs on the meta device: no GPU, no memory.
@pytest.mark.parametrize("size, recipe, which, converted", [
    ("124m", "tensorwise", "auto", 24),  # qkv and fc of 12 blocks; proj layers (N = 768) stay bf16
    ("124m", "rowwise", "auto", 0),      # every 124m linear is under the rowwise thresholds
    ("124m", "rowwise", "all", 48),
    ("1.3b", "tensorwise", "auto", 96),
    ("1.3b", "rowwise", "auto", 48),
])
def test_fp8_converts_only_the_linears_torchao_expects_to_gain(size, recipe, which, converted):
    import torch

    from gcpgpu.trainer.model import GPT, GPTConfig
    from gcpgpu.trainer.parallel import apply_fp8

    with torch.device("meta"):
        model = GPT(GPTConfig.from_size(size, 50304, 1024))
    assert apply_fp8(model, recipe, fsdp=False, which=which) == (converted, 4 * model.cfg.n_layer)
    assert type(model.lm_head).__name__ == "Linear"  # the output layer stays bf16


def test_fp8_without_compile_is_refused():
    from gcpgpu.trainer.config import check

    with pytest.raises(ConfigError) as e:
        check(TrainConfig(precision="fp8"))
    assert "--compile" in str(e.value) and "\n" not in str(e.value)
    check(TrainConfig(precision="fp8", compile=True))


def test_ranks_agree_on_a_sigterm_every_n_steps_not_every_step():
    from gcpgpu.trainer.train import should_check_stop

    cfg = TrainConfig(steps=23, log_every=10, stop_check_every=5, ckpt_every=4)
    checked = [s for s in range(1, 24) if should_check_stop(s, cfg)]
    # every 5th, every log step (10, 20), every checkpoint step (4, 8, ...), and the last step
    assert checked == [4, 5, 8, 10, 12, 15, 16, 20, 23]


def test_a_sigterm_stops_at_the_next_agreed_step_and_saves_there(small_text, tmp_path, monkeypatch):
    """One process: SIGTERM arrives as step 1 starts; with agreement every 3 steps it stops after step
    index 2 (3 steps done) and saves that checkpoint."""
    from gcpgpu.trainer.train import SIGTERM_AT_ENV, train

    monkeypatch.setenv(SIGTERM_AT_ENV, "0:1")
    cfg = TrainConfig(model="tiny", batch_size=8, seq_len=64, data=str(small_text), quiet=True, steps=9,
                      log_every=10, stop_check_every=3, ckpt_dir=str(tmp_path / "ckpt"))
    result = train(cfg)
    assert result.stopped and result.steps_done == 3
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == ["step_00000003"]


def test_nccl_failures_end_in_an_exception_not_sigabrt(monkeypatch):
    """The watchdog cleans up and lets the loop raise (main() then exits 1 with one line); a user's
    own setting wins."""
    from gcpgpu.trainer import dist as tdist

    assert tdist.NCCL_ENV_DEFAULTS == {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "2"}
    calls = []
    monkeypatch.setattr("torch.cuda.set_device", lambda device: calls.append(device))
    monkeypatch.setattr("torch.distributed.init_process_group", lambda *a, **k: calls.append((a, k)))
    for preset, expected in ((None, "2"), ("3", "3")):
        if preset is None:
            monkeypatch.delenv("TORCH_NCCL_ASYNC_ERROR_HANDLING", raising=False)
        else:
            monkeypatch.setenv("TORCH_NCCL_ASYNC_ERROR_HANDLING", preset)
        tdist.init_process_group(tdist.read_env({}), "cuda", 60)
        import os

        assert os.environ["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == expected
    assert calls[1][0] == ("cuda:nccl,cpu:gloo",)
