"""Tensor parallelism (--tp) over FSDP2 on a 2-D mesh, and selective activation checkpointing, on CPU."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from _trainer_helpers import TINY, losses, read_log, run_many  # noqa: E402

from gcpgpu.trainer.config import ConfigError, TrainConfig, check  # noqa: E402
from gcpgpu.trainer.dist import DistEnv  # noqa: E402
from gcpgpu.trainer.launch_checks import check_runtime  # noqa: E402
from gcpgpu.trainer.model import GPT, GPTConfig  # noqa: E402
from gcpgpu.trainer.parallel import apply_ac  # noqa: E402
from gcpgpu.trainer.parallel_tp import tp_mesh_shape  # noqa: E402
from gcpgpu.trainer.train import train  # noqa: E402

CPU = dict(local_world_size=4, cuda_available=False, cuda_capability=None, torchao_available=False,
           allow_cpu=False)


@pytest.mark.multiprocess
def test_tp2_over_fsdp2_trains_like_one_process_and_resumes_on_its_mesh(small_text, tmp_path):
    """4 gloo ranks, --tp 2 x FSDP 2: the losses of one process within float rounding; its checkpoints
    (async, on the 2-D mesh) resume bit for bit."""
    pytest.importorskip("numpy", reason="multi-rank torch.distributed.checkpoint needs numpy")
    steps = ["--data", str(small_text), "--steps", "3", "--quiet"]
    cfg = TrainConfig(model="tiny", batch_size=8, seq_len=64, lr=1e-3, warmup_steps=2, data=str(small_text),
                      quiet=True, log_every=1, steps=3)
    ref = train(cfg).losses  # one process, in this one
    ckpt = ["--ckpt-dir", str(tmp_path / "ckpt"), "--ckpt-every", "2"]
    tp = [*TINY, *steps, "--tp", "2", *ckpt]
    # One launch of the 4 ranks: the run, then its resume from the step-2 save (the final one removed
    # first, and the local copies with it); a resume builds its model and optimizer afresh and reads the save.
    run_many(4, [*tp, "--ckpt-mode", "async", "--ckpt-local-dir", str(tmp_path / "local"),
                 "--log-json", str(tmp_path / "tp.jsonl")],
             ["--remove", str(tmp_path / "ckpt" / "step_00000003"), "--remove", str(tmp_path / "local"),
              *tp, "--ckpt-mode", "sync", "--resume", "--log-json", str(tmp_path / "resumed.jsonl")])
    got = losses(tmp_path / "tp.jsonl")
    assert got.keys() == ref.keys() == {0, 1, 2} and ref[2] < ref[0]
    for step in ref:
        assert got[step] == pytest.approx(ref[step], rel=1e-5, abs=1e-6), (step, got, ref)
    (resume,) = read_log(tmp_path / "resumed.jsonl", "resume")
    assert resume["ckpt_step"] == 2
    assert losses(tmp_path / "resumed.jsonl") == {k: v for k, v in got.items() if k >= 2}


@pytest.mark.parametrize("cfg, facts, says", [
    (TrainConfig(model="tiny", tp=4), {}, "--tp: 4 does not divide model tiny's 2 attention heads"),
    (TrainConfig(model="124m", tp=2, parallel="ddp"), {}, "--tp: composes with FSDP2"),
    (TrainConfig(model="tiny", tp=2, seq_len=63), {}, "--seq-len: 63 does not split over --tp 2"),
    (TrainConfig(model="tiny", tp=2, loss_chunk=512), {}, "--loss-chunk: with --tp"),
    (TrainConfig(model="tiny", tp=0), {}, "--tp: must be a whole number of at least 1"),
    (TrainConfig(model="tiny", tp=2, precision="fp8", compile=True), {}, "--precision fp8: not with --tp"),
    (TrainConfig(model="tiny", tp=2), {"world_size": 3, "local_world_size": 3},
     "--tp: 2 does not divide the 3 GPUs (processes) per node"),
    (TrainConfig(model="tiny", tp=2, batch_size=6), {"world_size": 8, "local_world_size": 8},
     "--batch-size: 6 is not divisible by 4 data-parallel ranks (8 / --tp 2)"),
    (TrainConfig(model="tiny", tp=2, parallel="fsdp", fsdp_shard_size=1), {"world_size": 4},
     "--fsdp-shard-size: 1 GPUs is not a whole number of --tp 2 groups"),
])
def test_tp_settings_that_cannot_work_fail_with_one_line_naming_the_option(cfg, facts, says):
    with pytest.raises(ConfigError) as e:
        check(cfg)
        check_runtime(cfg, **(CPU | {"world_size": 4} | facts))
    assert str(e.value).startswith(says), str(e.value)


def test_tp_resolves_auto_to_fsdp_and_the_vocabulary_parallel_loss():
    cfg = TrainConfig(model="tiny", tp=2)
    check(cfg)
    assert check_runtime(cfg, **(CPU | {"world_size": 4})) == "cpu"
    assert (cfg.parallel, cfg.loss_chunk, cfg.compile_scope) == ("fsdp", 0, "block")


def test_the_mesh_keeps_a_tp_group_inside_a_node_and_shards_or_replicates_the_rest():
    one_node = DistEnv(world_size=8, local_world_size=8)
    assert tp_mesh_shape(one_node, 2, None) == ((4, 2), ("shard", "tp"))
    two_nodes = DistEnv(world_size=16, local_world_size=8)
    assert tp_mesh_shape(two_nodes, 4, None) == ((2, 2, 4), ("replicate", "shard", "tp"))  # HSDP x TP
    assert tp_mesh_shape(two_nodes, 4, 16) == ((4, 4), ("shard", "tp"))


def test_heads_are_laid_out_whole_in_the_fused_qkv_so_a_column_split_keeps_them():
    """What TP 2 does to one attention, by hand: each rank runs the model's own forward on its half of the
    qkv rows (its heads) and of the projection's columns; the two partial outputs sum to the whole."""
    import copy

    torch.manual_seed(0)
    attn = GPT(GPTConfig.from_size("tiny", vocab_size=256, seq_len=16)).blocks[0].attn
    x = torch.randn(2, 16, 128)
    rows, cols = attn.qkv.weight.shape[0] // 2, attn.proj.weight.shape[1] // 2
    halves = []
    for r in range(2):
        part = copy.deepcopy(attn)
        part.qkv.weight = torch.nn.Parameter(attn.qkv.weight[r * rows:(r + 1) * rows])
        part.proj.weight = torch.nn.Parameter(attn.proj.weight[:, r * cols:(r + 1) * cols])
        halves.append(part)
    with torch.no_grad():
        assert torch.allclose(halves[0](x) + halves[1](x), attn(x), atol=1e-6)


def _flops_and_norms(ac: str) -> tuple[int, int]:
    """FLOPs of one forward + backward, and how many LayerNorm forwards ran (recomputes included)."""
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils.flop_counter import FlopCounterMode

    class CountNorms(TorchDispatchMode):
        count = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            CountNorms.count += func is torch.ops.aten.native_layer_norm.default
            return func(*args, **(kwargs or {}))

    torch.manual_seed(0)
    model = GPT(GPTConfig.from_size("tiny", vocab_size=256, seq_len=64))
    if ac != "none":
        apply_ac(model, 1, selective=ac == "selective")
    idx = torch.randint(256, (4, 64))
    with FlopCounterMode(display=False) as flops, CountNorms():
        model(idx, idx).backward()
    return flops.get_total_flops(), CountNorms.count


def test_selective_checkpointing_recomputes_the_norms_but_no_matmul():
    none, selective, full = (_flops_and_norms(ac) for ac in ("none", "selective", "full"))
    assert selective[0] == none[0] < full[0]  # full recomputes every matmul of the forward; selective none
    assert none[1] == 5 and selective[1] == full[1] == 9  # 2 blocks x 2 LNs + ln_f, then the blocks' again


def test_ac_selective_is_an_option_and_trains_like_no_checkpointing(small_text):
    base = dict(model="tiny", batch_size=8, seq_len=64, lr=1e-3, warmup_steps=2, data=str(small_text),
                quiet=True, log_every=1, steps=2)
    cfg = TrainConfig(**base, ac="selective")
    check(cfg)
    assert train(cfg).losses == pytest.approx(train(TrainConfig(**base)).losses, rel=1e-6)
