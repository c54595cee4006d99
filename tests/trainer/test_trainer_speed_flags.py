"""The speed switches' wiring on CPU: prefetching, compile scope, fused AdamW, the chunked loss flag."""

from __future__ import annotations

import pytest
from _trainer_helpers import TINY, losses

torch = pytest.importorskip("torch")

from gcpgpu.trainer.config import ConfigError, TrainConfig, parse_args, resolve_auto  # noqa: E402
from gcpgpu.trainer.data import Batches, Prefetcher, TokenSource  # noqa: E402
from gcpgpu.trainer.launch_checks import check_runtime  # noqa: E402
from gcpgpu.trainer.optim import build_optimizer  # noqa: E402
from gcpgpu.trainer.parallel import parallelize  # noqa: E402

MACHINE = {"world_size": 1, "local_world_size": 1, "cuda_available": False, "cuda_capability": None,
           "torchao_available": False, "allow_cpu": False}


def _batches() -> Batches:
    src = TokenSource(torch.arange(5000) % 97, 97, "counting")
    return Batches(src, seq_len=16, global_batch=4, rank=0, world_size=1, seed=3, device=torch.device("cpu"))


def test_prefetched_batches_are_the_same_batches_and_resume_at_the_same_step():
    plain, ahead = _batches(), Prefetcher(_batches())
    try:
        for _ in range(3):
            for a, b in zip(plain.next(), ahead.next(), strict=True):
                assert torch.equal(a, b)
        state = ahead.state_dict()
        assert state["step"] == 3  # the step consumed, not the one being prefetched
        again = Prefetcher(_batches())
        again.load_state_dict(state)
        assert torch.equal(again.next()[0], plain.next()[0])
        again.close()
    finally:
        ahead.close()


def test_defaults_turn_the_speed_switches_on_and_each_can_be_turned_off():
    on = parse_args([])
    assert (on.prefetch, on.loss_chunk, on.compile_scope, on.optimizer_impl) == (True, "auto", "auto", "auto")
    off = parse_args(["--no-prefetch", "--loss-chunk", "0", "--compile-scope", "model"])
    assert (off.prefetch, off.loss_chunk, off.compile_scope) == (False, 0, "model")
    assert parse_args(["--compile-scope", "block", "--loss-chunk", "512"]).loss_chunk == 512


@pytest.mark.parametrize("flags, world, resolved", [
    # One GPU with --compile: the flags measured fastest on one H100 (124m 474,584 tok/s against 303,524
    # block-compiled with the chunked loss; 350m 169,394 against 140,582): one graph, the loss fused in it.
    (["--compile"], 1, ("none", "model", 0)),
    (["--compile", "--batch-size", "auto"], 1, ("none", "model", 0)),
    ([], 1, ("none", "model", 2048)),  # eager: the head runs as written, so chunk it
    (["--compile"], 2, ("ddp", "block", 2048)),
    (["--compile", "--parallel", "fsdp"], 2, ("fsdp", "block", 2048)),
    (["--compile", "--compile-scope", "block"], 1, ("none", "block", 2048)),
    (["--compile", "--loss-chunk", "1024"], 1, ("none", "model", 1024)),  # what the user set stays
])
def test_auto_compile_scope_and_loss_chunk_follow_the_launch(flags, world, resolved):
    cfg = resolve_auto(parse_args(flags), world_size=world)
    assert (cfg.parallel, cfg.compile_scope, cfg.loss_chunk) == resolved


def test_whole_model_compile_is_refused_with_fsdp_in_one_line():
    cfg = TrainConfig(compile=True, compile_scope="model", parallel="fsdp")
    with pytest.raises(ConfigError, match="--compile-scope model: FSDP shards per block"):
        check_runtime(cfg, **{**MACHINE, "world_size": 2, "local_world_size": 2})


def test_compile_scope_picks_what_is_compiled(monkeypatch):
    from gcpgpu.trainer.dist import DistEnv
    from gcpgpu.trainer.model import GPT, GPTConfig

    calls = []
    monkeypatch.setattr(torch, "compile", lambda m, **kw: calls.append(("block", type(m).__name__)) or m)
    monkeypatch.setattr(torch.nn.Module, "compile", lambda self, **kw: calls.append(("whole", type(self).__name__)))
    env = DistEnv()
    for scope in ("block", "model"):
        calls.clear()
        model = GPT(GPTConfig(n_layer=2, n_head=2, n_embd=32, vocab_size=64, seq_len=8))
        parallelize(model, parallel="none", env=env, device=torch.device("cpu"), param_dtype=None, ac_every=0,
                    compile=True, compile_mode="default", compile_scope=scope)
        assert calls == ([("block", "Block")] * 2 if scope == "block" else [("whole", "GPT")])


def test_adamw_is_fused_on_cuda_and_foreach_on_cpu_unless_told():
    model = torch.nn.Linear(4, 4)
    assert build_optimizer(model, TrainConfig(), "cpu").defaults["foreach"] is True
    assert build_optimizer(model, TrainConfig(optimizer_impl="for"), "cpu").defaults["foreach"] is False
    # The CUDA choice without a GPU: the option it passes, not a kernel run.
    captured = {}
    real = torch.optim.AdamW

    class Spy(real):
        def __init__(self, *a, **kw):
            captured.update(kw)
            super().__init__(*a, **{k: v for k, v in kw.items() if k != "fused"})

    torch.optim.AdamW = Spy
    try:
        build_optimizer(model, TrainConfig(), "cuda")
    finally:
        torch.optim.AdamW = real
    assert captured.get("fused") is True


def test_the_chunked_and_plain_loss_train_alike_and_prefetch_changes_nothing(small_text, tmp_path):
    from gcpgpu.trainer.train import train

    runs = {}
    for name, extra in (("chunked", ["--loss-chunk", "100"]), ("plain", ["--loss-chunk", "0", "--no-prefetch"])):
        # The flags as the command line gives them, trained here: no process (and torch start-up) of their own.
        log = tmp_path / f"{name}.jsonl"
        train(parse_args([*TINY, "--data", str(small_text), "--steps", "4", "--quiet", "--log-json", str(log), *extra]))
        runs[name] = losses(log)
    assert runs["chunked"].keys() == runs["plain"].keys()
    for step, loss in runs["plain"].items():
        assert runs["chunked"][step] == pytest.approx(loss, rel=1e-5)
