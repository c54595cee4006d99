"""Bad options fail at start with one line naming the option, exit code 2; config files; CLUSTER_SPEC."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from _trainer_helpers import REPO, base_env

from gcpgpu.trainer.config import (
    ConfigError,
    TrainConfig,
    check,
    parse_args,
    vertex_checkpoint_dir,
)
from gcpgpu.trainer.dist import read_env, rendezvous_from_cluster_spec, torchrun_args_from_cluster_spec
from gcpgpu.trainer.launch_checks import check_runtime

CPU = dict(world_size=1, local_world_size=1, cuda_available=False, cuda_capability=None,
           torchao_available=False, allow_cpu=False)


def run_cli(args: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gcpgpu.trainer", *args], cwd=REPO, env=base_env(env),
                          capture_output=True, text=True, timeout=60)


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.strip()]


@pytest.mark.parametrize("args, env, option", [
    (["--model", "7b"], None, "--model"),
    (["--precision", "int4"], None, "--precision"),
    (["--batch-size", "0"], None, "--batch-size"),
    (["--steps", "ten"], None, "--steps"),
    (["--ac", "sometimes"], None, "--ac"),
    (["--data", "/no/such/file.bin"], None, "--data"),
    (["--resume"], None, "--resume"),
    (["--profile-steps", "5"], None, "--profile-steps"),
    (["--no-such-flag"], None, "--no-such-flag"),
    # These need the machine's facts (torch is imported): still one line, still before any work.
    (["--precision", "fp8"], None, "--precision fp8"),  # without --compile
    (["--precision", "fp8", "--compile", "--device", "cpu"], None, "--precision fp8"),
    (["--fp8-filter", "some"], None, "--fp8-filter"),
    (["--batch-size", "5", "--parallel", "ddp"], {"WORLD_SIZE": "2", "RANK": "0", "LOCAL_WORLD_SIZE": "2"}, "--batch-size"),
    (["--parallel", "none"], {"WORLD_SIZE": "2", "RANK": "0", "LOCAL_WORLD_SIZE": "2"}, "--parallel none"),
    # Issue 30's options.
    (["--batch-size", "some"], None, "--batch-size"),
    (["--batch-size", "auto", "--micro-batch", "2"], None, "--micro-batch"),
    (["--micro-batch", "2", "--grad-accum", "2"], None, "--grad-accum"),
    (["--batch-size", "auto"], None, "--batch-size auto: needs the device's memory"),  # CPU, no --memory-budget
    (["--batch-size", "auto", "--memory-budget", "lots"], None, "--memory-budget"),
    (["--loss-chunk", "-1"], None, "--loss-chunk"),
    (["--eval-every", "5", "--eval-steps", "0"], None, "--eval-every/--eval-steps"),
    (["--val-fraction", "1.5"], None, "--val-fraction"),
    (["--eval-every", "5", "--data", "synthetic", "--val-fraction", "0.00001"], None, "--val-fraction"),
    (["--compile-scope", "layer"], None, "--compile-scope"),
    # Issue 40's checkpoint options.
    (["--ckpt-dir", "ck", "--ckpt-mode", "fast"], None, "--ckpt-mode: unknown value 'fast'; choose one of auto, sync"),
    (["--ckpt-mode", "async"], None, "--ckpt-mode: needs --ckpt-dir"),
    (["--ckpt-local-dir", "/mnt/x"], None, "--ckpt-local-dir: needs --ckpt-dir"),
    (["--compile", "--compile-scope", "model", "--parallel", "fsdp"], None, "--compile-scope model"),
])
def test_bad_option_fails_fast_with_one_line(args, env, option):
    proc = run_cli(args, env)
    lines = error_lines(proc.stderr)
    assert proc.returncode == 2, proc.stderr
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("gcpgpu.trainer: error: ") and option in lines[0], lines[0]
    assert proc.stdout == ""


def test_error_lines_say_what_would_be_right():
    def message(cfg: TrainConfig, **facts) -> str:
        with pytest.raises(ConfigError) as e:
            check(cfg)
            check_runtime(cfg, **(CPU | facts))
        return str(e.value)

    assert "add --compile or use bf16" in message(TrainConfig(precision="fp8"))
    fp8 = TrainConfig(precision="fp8", compile=True)
    assert "use bf16" in message(fp8)
    assert "compute capability 9.0" in message(fp8, cuda_available=True, cuda_capability=(8, 0))
    assert "torchao" in message(fp8, cuda_available=True, cuda_capability=(9, 0))
    assert "use a multiple of 4" in message(TrainConfig(batch_size=6, grad_accum=2, parallel="ddp"), world_size=2)
    assert "choose one of tiny, 124m" in message(TrainConfig(model="13b"))
    assert "--fsdp-shard-size" in message(TrainConfig(parallel="fsdp", fsdp_shard_size=3), world_size=4)
    assert "CUDA graphs" in message(TrainConfig(compile=True, compile_mode="reduce-overhead"))
    assert "--device cpu" in message(TrainConfig(device="cuda"))
    assert "use fp16, powersgd or none" in message(TrainConfig(parallel="ddp", ddp_comm_hook="bf16"), world_size=2)
    assert "numpy" in message(TrainConfig(parallel="ddp", ckpt_dir="/tmp/x"), world_size=2, numpy_available=False)


def test_emulator_opt_in_runs_gpu_only_options_on_cpu():
    facts = CPU | {"allow_cpu": True}
    assert check_runtime(TrainConfig(precision="fp8", compile=True), **facts) == "cpu"
    assert check_runtime(TrainConfig(device="cuda"), **facts) == "cpu"


def test_config_file_and_flags_override_it(tmp_path):
    (tmp_path / "c.json").write_text(json.dumps({"model": "tiny", "batch-size": 16, "ac": 2, "steps": 3}))
    cfg = parse_args(["--config", str(tmp_path / "c.json"), "--steps", "5"])
    assert (cfg.batch_size, cfg.ac, cfg.ac_every, cfg.steps) == (16, "2", 2, 5)
    (tmp_path / "c.yaml").write_text("model: tiny\nprecision: bf16\ntie_embeddings: false\n")
    cfg = parse_args(["--config", str(tmp_path / "c.yaml")])
    assert cfg.precision == "bf16" and cfg.tie_embeddings is False
    (tmp_path / "bad.json").write_text(json.dumps({"batch_sise": 16}))
    proc = run_cli(["--config", str(tmp_path / "bad.json")])
    assert proc.returncode == 2 and "unknown option 'batch_sise'" in proc.stderr


def test_cluster_spec_to_torchrun_rendezvous():
    spec = {"cluster": {"workerpool0": ["chief-0:2222"], "workerpool1": ["w-0:2222", "w-1:2222"]},
            "task": {"type": "workerpool1", "index": 1}}
    r = rendezvous_from_cluster_spec(json.dumps(spec))
    assert (r.nnodes, r.node_rank, r.master_addr, r.master_port) == (3, 2, "chief-0", 2222)
    spec["task"] = {"type": "workerpool0", "index": 0}
    assert rendezvous_from_cluster_spec(json.dumps(spec)).node_rank == 0
    assert torchrun_args_from_cluster_spec(json.dumps(spec), 8) == [
        "--nnodes=3", "--node-rank=0", "--nproc-per-node=8", "--master-addr=chief-0", "--master-port=2222"]
    for bad in ("not json", json.dumps({"cluster": {}, "task": {"type": "workerpool0"}}),
                json.dumps({"cluster": {"workerpool0": ["c:1"]}, "task": {"type": "workerpool2", "index": 0}})):
        with pytest.raises(ValueError, match="CLUSTER_SPEC"):
            rendezvous_from_cluster_spec(bad)


def test_torchrun_variables_are_read():
    env = read_env({"RANK": "5", "LOCAL_RANK": "1", "WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "4",
                    "MASTER_ADDR": "h", "MASTER_PORT": "1234"})
    assert (env.rank, env.local_rank, env.world_size, env.nnodes, env.master_addr, env.master_port) == (5, 1, 8, 2, "h", 1234)
    assert read_env({}).world_size == 1 and not read_env({}).distributed


def test_vertex_checkpoint_dir_defaults(monkeypatch):
    assert vertex_checkpoint_dir({"AIP_CHECKPOINT_DIR": "gs://b/run/checkpoints/"}) == "/gcs/b/run/checkpoints/"
    assert vertex_checkpoint_dir({}) is None
    monkeypatch.setenv("AIP_CHECKPOINT_DIR", "/mnt/ckpt")
    assert parse_args(["--resume"]).ckpt_dir == "/mnt/ckpt"
    assert parse_args(["--ckpt-dir", "/elsewhere"]).ckpt_dir == "/elsewhere"
