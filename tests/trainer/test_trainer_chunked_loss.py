"""The chunked output layer + cross-entropy equals the plain path (logits for every token) in loss and gradients."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402

from gcpgpu.trainer.loss import IGNORE_INDEX, chunked_linear_cross_entropy  # noqa: E402
from gcpgpu.trainer.model import GPT, GPTConfig  # noqa: E402


def _plain(hidden, weight, targets, dtype=None):
    logits = F.linear(hidden if dtype is None else hidden.to(dtype), weight if dtype is None else weight.to(dtype))
    return F.cross_entropy(logits if dtype is None else logits.float(), targets, ignore_index=IGNORE_INDEX)


def _inputs(n=37, d=16, v=50, seed=0, ignore=0):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(n, d, generator=g, dtype=torch.float64).requires_grad_()
    weight = (0.3 * torch.randn(v, d, generator=g, dtype=torch.float64)).requires_grad_()
    targets = torch.randint(v, (n,), generator=g)
    if ignore:
        targets[torch.randperm(n, generator=g)[:ignore]] = IGNORE_INDEX
    return hidden, weight, targets


@pytest.mark.parametrize("chunk", [1, 5, 16, 37, 1000])  # uneven last chunk, one chunk, chunk > tokens
@pytest.mark.parametrize("recompute", [False, True])
@pytest.mark.parametrize("ignore", [0, 9])
def test_loss_and_gradients_equal_the_plain_path(chunk, recompute, ignore):
    hidden, weight, targets = _inputs(ignore=ignore)
    ref = _plain(hidden, weight, targets)
    ref_gh, ref_gw = torch.autograd.grad(ref * 3.0, (hidden, weight))  # a scaled loss, as accumulation/fp16 do
    got = chunked_linear_cross_entropy(hidden, weight, targets, chunk_tokens=chunk, recompute=recompute)
    gh, gw = torch.autograd.grad(got * 3.0, (hidden, weight))
    torch.testing.assert_close(got, ref, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(gh, ref_gh, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(gw, ref_gw, rtol=1e-10, atol=1e-12)


def test_all_targets_ignored_gives_zero_not_nan():
    hidden, weight, targets = _inputs()
    targets[:] = IGNORE_INDEX
    loss = chunked_linear_cross_entropy(hidden, weight, targets, chunk_tokens=8)
    loss.backward()
    assert loss.item() == 0.0 and torch.isfinite(hidden.grad).all() and hidden.grad.abs().sum() == 0


@pytest.mark.parametrize("recompute", [False, True])
def test_bf16_autocast_matches_the_plain_autocast_path(recompute):
    hidden, weight, targets = _inputs(n=64, d=32, v=96)
    h32, w32 = (t.detach().float().requires_grad_() for t in (hidden, weight))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ref = F.cross_entropy(F.linear(h32, w32).float(), targets)
    ref.backward()
    ref_grads = (h32.grad.clone(), w32.grad.clone())
    h32.grad = w32.grad = None
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = chunked_linear_cross_entropy(h32, w32, targets, chunk_tokens=24, recompute=recompute)
    got.backward()
    assert got.dtype == torch.float32 and h32.grad.dtype == torch.float32 and w32.grad.dtype == torch.float32
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(h32.grad, ref_grads[0], rtol=2e-2, atol=1e-4)
    torch.testing.assert_close(w32.grad, ref_grads[1], rtol=2e-2, atol=1e-4)


def test_no_grad_computes_only_the_loss():
    hidden, weight, targets = _inputs()
    with torch.no_grad():
        loss = chunked_linear_cross_entropy(hidden, weight, targets, chunk_tokens=8)
    assert loss.grad_fn is None
    torch.testing.assert_close(loss, _plain(hidden, weight, targets).detach())


@pytest.mark.parametrize("tied", [True, False])
def test_the_model_with_a_chunked_loss_trains_like_the_plain_one(tied):
    """Whole GPT, tied and untied embeddings: same loss and the same gradient on every parameter."""
    def build(chunk):
        torch.manual_seed(0)
        return GPT(GPTConfig(n_layer=2, n_head=2, n_embd=32, vocab_size=64, seq_len=16, tie_embeddings=tied,
                             loss_chunk=chunk))

    x = torch.randint(64, (3, 16), generator=torch.Generator().manual_seed(1))
    y = torch.roll(x, -1, dims=1)
    plain, chunked = build(0), build(10)
    lp, lc = plain(x, y), chunked(x, y)
    lp.backward()
    lc.backward()
    torch.testing.assert_close(lc, lp, rtol=1e-6, atol=1e-6)
    for (name, p), q in zip(plain.named_parameters(), chunked.parameters(), strict=True):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-7, msg=name)
    assert (plain.lm_head.weight is plain.wte.weight) == tied
