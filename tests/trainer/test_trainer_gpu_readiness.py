"""Review items of the trainer's GPU paths that CPU can check: the torch floor, CUDA-graph compile
modes under DDP/FSDP, and FSDP keeping its gradients sharded through an accumulation."""

from __future__ import annotations

import subprocess
import sys

import pytest
from _trainer_helpers import REPO, base_env

from gcpgpu.trainer.config import MIN_TORCH, ConfigError, TrainConfig, check_runtime

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
    model(x, x).backward()
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
