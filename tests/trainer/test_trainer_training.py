"""Training on CPU: parallel modes agree with one process, loss falls, fp16 recovers from overflow,
kill-and-resume continues the same loss curve, a dead rank ends the job, the measurement is honest."""

from __future__ import annotations

import json
import math
import re
import signal
import time

import pytest

torch = pytest.importorskip("torch")

from _trainer_helpers import HUNG_S, TINY, free_port, losses, read_log, run, run_many, start, wait  # noqa: E402

from gcpgpu.trainer.config import TrainConfig, check  # noqa: E402
from gcpgpu.trainer.data import Batches, open_source  # noqa: E402
from gcpgpu.trainer.model import GPT, GPTConfig  # noqa: E402
from gcpgpu.trainer.sizes import get_size, param_count  # noqa: E402
from gcpgpu.trainer.train import EXIT_STOPPED, train  # noqa: E402

REQUIRED_LOG_KEYS = {"step", "loss", "lr", "tokens_per_s", "mfu", "step_time_s", "data_wait_frac", "peak_mem_bytes"}


def tiny_cfg(data, **kw) -> TrainConfig:
    cfg = TrainConfig(**{"model": "tiny", "batch_size": 8, "seq_len": 64, "lr": 1e-3, "warmup_steps": 2, "data": str(data),
                         "quiet": True, "timing_warmup": 2, "log_every": 1, **kw})
    check(cfg)
    return cfg


def test_model_shapes_and_tied_embedding():
    cfg = GPTConfig.from_size("tiny", vocab_size=256, seq_len=64)
    model = GPT(cfg)
    assert model.lm_head.weight is model.wte.weight
    assert model.num_params() == param_count(get_size("tiny"), 256, 64, tied=True)
    idx = torch.randint(256, (2, 64))
    assert model(idx).shape == (2, 64, 256)
    assert model(idx, idx).ndim == 0
    assert GPTConfig.from_size("124m", 50257, 1024).vocab_size == 50304  # padded for tensor cores


def test_data_is_deterministic_and_sharded_by_rank(small_text):
    src = open_source(str(small_text), seq_len=64)
    whole = Batches(src, seq_len=64, global_batch=8, rank=0, world_size=1, seed=1, device=torch.device("cpu"))
    halves = [Batches(src, seq_len=64, global_batch=8, rank=r, world_size=2, seed=1, device=torch.device("cpu"))
              for r in (0, 1)]
    for _ in range(3):
        x, y = whole.next()
        parts = [h.next() for h in halves]
        assert torch.equal(x, torch.cat([p[0] for p in parts])) and torch.equal(y, torch.cat([p[1] for p in parts]))
        assert torch.equal(x[:, 1:], y[:, :-1])  # targets are the inputs shifted by one
    # The position is the step: a restored loader continues with the same batches.
    resumed = Batches(src, seq_len=64, global_batch=8, rank=0, world_size=1, seed=1, device=torch.device("cpu"))
    resumed.load_state_dict(whole.state_dict())
    assert torch.equal(resumed.next()[0], whole.next()[0])


def test_token_file_memmap(tmp_path):
    tokens = torch.arange(1000, dtype=torch.int64).to(torch.uint16)
    path = tmp_path / "train.bin"
    path.write_bytes(bytes(tokens.view(torch.uint8).tolist()))  # little-endian uint16, as nanoGPT writes
    src = open_source(str(path), seq_len=16, data_dtype="uint16")
    assert len(src.tokens) == 1000 and src.tokens.dtype == torch.uint16
    x, y = Batches(src, seq_len=16, global_batch=4, rank=0, world_size=1, seed=0, device=torch.device("cpu")).next()
    assert x.dtype == torch.int64 and torch.equal(y - x, torch.ones_like(x))  # consecutive ids


def test_loss_falls_on_small_text(small_text, tmp_path):
    log = tmp_path / "log.jsonl"
    result = train(tiny_cfg(small_text, steps=40, log_json=str(log)))
    curve = losses(log)
    assert curve[0] > 5.0  # about ln(256): knows nothing
    assert curve[39] < 2.6, curve  # repetitive words: learns a lot in 40 steps
    assert result.steps_done == 40 and not result.stopped


def test_log_records_and_honest_cpu_measurement(small_text, tmp_path):
    log = tmp_path / "log.jsonl"
    result = train(tiny_cfg(small_text, steps=6, log_json=str(log)))
    records = read_log(log)
    assert [r["step"] for r in records] == list(range(6))
    for r in records:
        assert REQUIRED_LOG_KEYS <= r.keys()
        assert r["mfu"] is None  # no peak for a CPU: no MFU rather than a guess
        assert r["tokens_per_s"] > 0 and 0 <= r["data_wait_frac"] < 1 and r["peak_mem_bytes"] > 0
    assert [r["warmup"] for r in records] == [True, True, False, False, False, False]
    assert len(result.step_times) == 4 and result.mfu is None
    summary = json.loads(log.read_text().splitlines()[-1])
    assert summary["kind"] == "summary" and summary["mfu"] is None and summary["steps_timed"] == 4


def test_bf16_autocast_tracks_fp32(small_text):
    fp32 = train(tiny_cfg(small_text, steps=4)).losses
    bf16 = train(tiny_cfg(small_text, steps=4, precision="bf16")).losses
    for step, loss in fp32.items():
        assert bf16[step] == pytest.approx(loss, rel=0.02)


def test_fp16_loss_scaler_skips_overflowing_steps_and_recovers(small_text, tmp_path):
    # A 2^24 loss scale overflows fp16 gradients: the scaler must skip those steps and halve the scale
    # until they fit, then train normally. 4 x 32 tokens a step: fp16 is emulated on a CPU, a quarter of
    # the usual tokens keeps the steps cheap, and the same steps overflow (the first six here).
    log = tmp_path / "log.jsonl"
    train(tiny_cfg(small_text, steps=12, batch_size=4, seq_len=32, precision="fp16", fp16_init_scale=2.0**24,
                   log_json=str(log)))
    records = read_log(log)
    skipped = [r["skipped"] for r in records]
    assert skipped[0] is True and skipped.count(False) >= 4, skipped
    first_ok = skipped.index(False)
    assert all(skipped[:first_ok])
    scales = [r["loss_scale"] for r in records]
    assert scales[0] == 2.0**23 and scales[first_ok] < 2.0**24 / 2**first_ok * 2
    assert all(math.isfinite(r["loss"]) for r in records)
    assert records[-1]["loss"] < records[first_ok]["loss"] - 0.3  # it learns once steps go through


def test_profile_window_writes_a_trace_with_the_ranges(small_text, tmp_path):
    train(tiny_cfg(small_text, steps=4, profile_steps="1:2", profile_dir=str(tmp_path / "prof")))
    traces = list((tmp_path / "prof").glob("*.pt.trace.json"))
    assert len(traces) == 1
    names = {e.get("name") for e in json.loads(traces[0].read_text())["traceEvents"]}
    assert {"data", "forward", "backward", "optimizer"} <= names


@pytest.mark.multiprocess
def test_ddp_and_fsdp_match_one_process(small_text, tmp_path):
    """Same global batch, same losses: 1 process vs 2 ranks of DDP (with accumulation), FSDP2 (with AC)
    and HSDP."""
    common = [*TINY, "--data", str(small_text), "--steps", "5", "--quiet"]
    ref = train(tiny_cfg(small_text, steps=5)).losses  # the one process: here, without a process of its own
    # One launch of 2 ranks trains the three, one after another (torch's start-up paid once per rank).
    run_many(2, [*common, "--parallel", "ddp", "--grad-accum", "2", "--log-json", str(tmp_path / "ddp.jsonl")],
             [*common, "--parallel", "fsdp", "--ac", "full", "--log-json", str(tmp_path / "fsdp.jsonl")],
             # HSDP: a 2 x 1 (replicate x shard) mesh, as two one-GPU nodes would get; with accumulation.
             [*common, "--parallel", "fsdp", "--fsdp-shard-size", "1", "--grad-accum", "2",
              "--log-json", str(tmp_path / "hsdp.jsonl")])
    assert len(ref) == 5 and ref[4] < ref[0]
    for name in ("ddp", "fsdp", "hsdp"):
        got = losses(tmp_path / f"{name}.jsonl")
        assert got.keys() == ref.keys()
        for step in ref:
            assert got[step] == pytest.approx(ref[step], rel=1e-5, abs=1e-6), (name, step, got, ref)


# FSDP2 (bf16 policy) on 2 ranks for 7 steps: the two tests that stop such a run and resume it compare the
# resumed losses with one uninterrupted run, made once.
FSDP_7 = [*TINY, "--steps", "7", "--quiet", "--parallel", "fsdp", "--precision", "bf16"]


@pytest.fixture(scope="module")
def fsdp_straight(small_text, tmp_path_factory) -> dict[int, float]:
    """The losses of an uninterrupted FSDP_7 run."""
    log = tmp_path_factory.mktemp("fsdp-straight") / "straight.jsonl"
    run(2, [*FSDP_7, "--data", str(small_text), "--log-json", str(log)])
    return losses(log)


def ckpt_mode(mode: str, tmp_path) -> list[str]:
    """The trainer's flags for a checkpoint mode; async saves into a local folder of the test's own."""
    return ["--ckpt-mode", mode] + (["--ckpt-local-dir", str(tmp_path / "local")] if mode == "async" else [])


@pytest.mark.multiprocess
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_sigterm_on_one_rank_stops_all_and_resume_is_bitwise_identical(small_text, tmp_path, fsdp_straight, mode):
    """FSDP2 (bf16 policy) on 2 ranks: rank 0 alone gets SIGTERM at step 3; both save and stop; resume.
    Async: the trainer waits for the upload before it exits, so the stop's checkpoint is complete."""
    pytest.importorskip("numpy", reason="multi-rank torch.distributed.checkpoint needs numpy")
    common = [*FSDP_7, "--data", str(small_text), *ckpt_mode(mode, tmp_path)]
    ckpt = ["--ckpt-dir", str(tmp_path / "ckpt"), "--log-json", str(tmp_path / "resumed.jsonl")]
    first = run(2, [*common, *ckpt], env={"GCPGPU_TRAINER_TEST_SIGTERM_AT": "0:3"}, check=False)
    assert [p.returncode for p in first] == [EXIT_STOPPED, EXIT_STOPPED], first[0].stderr + first[1].stderr
    assert "checkpoint saved" in first[0].stdout
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == ["step_00000004"]
    assert (tmp_path / "ckpt" / "step_00000004" / ".metadata").is_file()
    run(2, [*common, *ckpt, "--resume"])
    (resume,) = read_log(tmp_path / "resumed.jsonl", "resume")
    local_copy = resume["read_from"] != resume["path"] == str(tmp_path / "ckpt" / "step_00000004")
    assert local_copy == (mode == "async")  # async left a local copy of the same save: resume reads it
    assert losses(tmp_path / "resumed.jsonl") == fsdp_straight  # every step, bit for bit (on CPU, where the kernels are deterministic)


# One process for 60 steps: the run a SIGTERM interrupts at an arbitrary moment; its uninterrupted losses
# are made once for both checkpoint modes.
ONE_60 = [*TINY, "--steps", "60", "--quiet"]


@pytest.fixture(scope="module")
def one_straight(small_text, tmp_path_factory) -> dict[int, float]:
    """The losses of an uninterrupted ONE_60 run."""
    log = tmp_path_factory.mktemp("one-straight") / "straight.jsonl"
    run(1, [*ONE_60, "--data", str(small_text), "--log-json", str(log)])
    return losses(log)


@pytest.mark.multiprocess
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_external_sigterm_mid_run_then_resume_matches(small_text, tmp_path, one_straight, mode):
    """A real SIGTERM at an arbitrary moment (a spot preemption) on a single process, then --resume."""
    common = [*ONE_60, "--data", str(small_text)]
    ckpt = ["--ckpt-dir", str(tmp_path / "ckpt"), "--ckpt-every", "10", "--log-json", str(tmp_path / "resumed.jsonl"),
            *ckpt_mode(mode, tmp_path)]
    procs = start(1, [*common, *ckpt])
    deadline = time.time() + HUNG_S
    while time.time() < deadline:  # let it get a few steps in
        log = tmp_path / "resumed.jsonl"
        if log.exists() and len(log.read_text().splitlines()) >= 5:
            break
        time.sleep(0.05)
    procs[0].send_signal(signal.SIGTERM)
    (first,) = wait(procs)
    assert first.returncode == EXIT_STOPPED, first.stderr
    assert max(losses(tmp_path / "resumed.jsonl")) < 59  # it stopped early
    run(1, [*common, *ckpt, "--resume"])
    assert losses(tmp_path / "resumed.jsonl") == one_straight


@pytest.mark.multiprocess
def test_a_save_killed_midway_is_ignored_by_resume_and_removed_by_the_next_save(small_text, tmp_path, fsdp_straight):
    """2 ranks of FSDP save every 2 steps; rank 0 dies in the save of step 4 after both ranks wrote their
    shards but before DCP's .metadata (the commit): resume takes step 2, the half folder is removed."""
    pytest.importorskip("numpy", reason="multi-rank torch.distributed.checkpoint needs numpy")
    common = [*FSDP_7, "--data", str(small_text), "--dist-timeout", "60"]
    ckpt_dir = tmp_path / "ckpt"
    ckpt = ["--ckpt-dir", str(ckpt_dir), "--ckpt-every", "2", "--log-json", str(tmp_path / "resumed.jsonl")]
    killed = run(2, [*common, *ckpt], env={"GCPGPU_TRAINER_TEST_DIE_IN_SAVE": "4"}, check=False)
    assert killed[0].returncode == 3 and killed[1].returncode != 0, killed[1].stderr
    half = ckpt_dir / "step_00000004"
    assert sorted(p.name for p in ckpt_dir.iterdir()) == ["step_00000002", "step_00000004"]
    assert any(half.glob("*.distcp")) and not (half / ".metadata").exists()  # shards written, not committed
    assert (ckpt_dir / "step_00000002" / ".metadata").is_file()

    run(2, [*common, *ckpt, "--resume"])
    steps = [r["step"] for r in read_log(tmp_path / "resumed.jsonl") if "loss" in r]
    assert steps == [0, 1, 2, 3, 2, 3, 4, 5, 6]  # killed in step 4's save; resumed after step 2's
    # The half folder went with the next save; the newest two complete ones stay (--ckpt-keep 2).
    assert sorted(p.name for p in ckpt_dir.iterdir()) == ["step_00000006", "step_00000007"]
    assert losses(tmp_path / "resumed.jsonl") == fsdp_straight


@pytest.mark.multiprocess
def test_a_run_killed_mid_upload_resumes_from_the_newest_step_complete_in_the_ckpt_dir(small_text, tmp_path,
                                                                                      fsdp_straight):
    """Async, 2 ranks of FSDP saving every 2 steps: rank 0 dies in the background upload of step 4, after its
    shards reached --ckpt-dir and before `.metadata`. Step 4 is complete on the local disk, half in
    --ckpt-dir: resume takes step 2 (read from its local copy), never step 4."""
    pytest.importorskip("numpy", reason="multi-rank torch.distributed.checkpoint needs numpy")
    ckpt_dir, local_root = tmp_path / "ckpt", tmp_path / "local"
    common = [*FSDP_7, "--data", str(small_text), "--dist-timeout", "60", "--ckpt-dir", str(ckpt_dir),
              "--ckpt-every", "2", *ckpt_mode("async", tmp_path)]
    killed = run(2, [*common, "--log-json", str(tmp_path / "killed.jsonl")],
                 env={"GCPGPU_TRAINER_TEST_DIE_IN_UPLOAD": "4"}, check=False)
    assert killed[0].returncode == 3 and killed[1].returncode != 0, killed[1].stderr
    (local,) = local_root.iterdir()  # this --ckpt-dir's folder on the "node"
    assert (local / "step_00000004" / ".metadata").is_file()  # complete on the local disk...
    assert sorted(p.name for p in ckpt_dir.iterdir()) == ["step_00000002", "step_00000004"]
    half = ckpt_dir / "step_00000004"
    assert (half / "__0_0.distcp").is_file() and not (half / ".metadata").exists()  # ...half uploaded

    run(2, [*common, "--resume", "--log-json", str(tmp_path / "resumed.jsonl")])
    (resume,) = read_log(tmp_path / "resumed.jsonl", "resume")
    assert resume == {"kind": "resume", "ckpt_step": 2, "path": str(ckpt_dir / "step_00000002"),
                      "read_from": str(local / "step_00000002")}
    assert losses(tmp_path / "resumed.jsonl") == {k: v for k, v in fsdp_straight.items() if k >= 2}
    # The half upload went with the next save of step 4; both places keep the newest two (--ckpt-keep 2).
    assert sorted(p.name for p in ckpt_dir.iterdir()) == ["step_00000006", "step_00000007"]
    assert sorted(p.name for p in local.iterdir()) == ["step_00000006", "step_00000007"]


@pytest.mark.multiprocess
def test_dead_rank_brings_the_others_down_with_a_clear_message(small_text):
    procs = run(2, [*TINY, "--data", str(small_text), "--steps", "20", "--parallel", "ddp", "--quiet",
                    "--dist-timeout", "60"], env={"GCPGPU_TRAINER_TEST_DIE_AT": "1:2"}, check=False)
    assert procs[1].returncode == 3  # the injected death
    assert procs[0].returncode == 1
    assert "another rank has probably died" in procs[0].stderr
    assert "Traceback" not in procs[0].stderr
    # Told by the closed connection, not after waiting out the 60 s collective timeout (the cause is in
    # brackets; a wall-clock bound would say the same only on an idle machine).
    assert re.search(r"connection (closed|reset) by peer", procs[0].stderr, re.I), procs[0].stderr
    assert "timed out" not in procs[0].stderr.lower()


@pytest.mark.multiprocess
def test_cluster_spec_launches_torchrun(small_text, tmp_path):
    """On Vertex the trainer starts torchrun itself from CLUSTER_SPEC (here one node, two CPU processes)."""
    spec = {"cluster": {"workerpool0": [f"127.0.0.1:{free_port()}"]}, "task": {"type": "workerpool0", "index": 0}}
    (proc,) = run(1, [*TINY, "--data", str(small_text), "--steps", "3", "--parallel", "fsdp", "--quiet",
                      "--log-json", str(tmp_path / "log.jsonl")],
                  env={"CLUSTER_SPEC": json.dumps(spec), "GCPGPU_NPROC_PER_NODE": "2"})
    assert "--nnodes=1 --node-rank=0 --nproc-per-node=2" in proc.stdout
    records = read_log(tmp_path / "log.jsonl")
    assert [r["step"] for r in records] == [0, 1, 2] and records[0]["world_size"] == 2


@pytest.mark.slow
def test_compile_matches_eager(small_text, tmp_path):
    """torch.compile per block (about 20 s on CPU) gives the same losses as eager."""
    eager = train(tiny_cfg(small_text, steps=3))
    compiled = train(tiny_cfg(small_text, steps=3, compile=True))
    for step, loss in eager.losses.items():
        assert compiled.losses[step] == pytest.approx(loss, rel=1e-4)
