"""The output layer and its cross-entropy in chunks of tokens, so no (tokens x vocab) fp32 tensor exists.

The plain path keeps the logits in the compute dtype plus an fp32 copy, its log-softmax and its
gradient: tokens x vocab x (dtype + 8) bytes, 8 GB at 124m with 16 x 1024 tokens, more than the whole
model's state. Here each chunk's logits are made, turned into its loss (and, when gradients are wanted,
its gradients) and dropped before the next chunk, so the peak is one chunk's logits.

Two ways to get the gradients, both exact to the plain path within float rounding:
- precompute (bf16, fp32): the gradients w.r.t. the hidden states and the weight are computed in the
  forward pass, chunk by chunk, and kept in fp32; backward only scales them by the incoming gradient.
  The output matmul runs once forward and twice for gradients, as in the plain path: no extra FLOPs.
- recompute (fp16): the forward keeps only the hidden states and each token's log-sum-exp; backward
  makes every chunk's logits again. fp16 needs it: its gradients must be formed after the loss scale is
  applied (the incoming gradient), or the small ones underflow before the scale could save them.
"""

from __future__ import annotations

import torch

IGNORE_INDEX = -100  # as F.cross_entropy: targets equal to it add nothing to the loss or the mean


def _compute_dtype(hidden: torch.Tensor, weight: torch.Tensor) -> torch.dtype:
    """The matmul dtype the plain path would use: autocast's when it is on, else the inputs'."""
    dev = hidden.device.type
    if torch.is_autocast_enabled(dev):
        return torch.get_autocast_dtype(dev)
    return torch.promote_types(hidden.dtype, weight.dtype)


def _chunk_grad(logits: torch.Tensor, lse: torch.Tensor, tgt: torch.Tensor, valid: torch.Tensor,
                scale: torch.Tensor) -> torch.Tensor:
    """d(loss)/d(logits) for one chunk in fp32: (softmax - one-hot) x scale on the counted tokens."""
    g = (logits - lse[:, None]).exp_()
    rows = torch.arange(len(tgt), device=g.device)
    g[rows, tgt.clamp(min=0)] -= 1.0
    return g.mul_((valid.to(g.dtype) * scale)[:, None])


class _ChunkedLinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, targets, chunk, ignore_index, dtype, mode):
        with torch.autocast(hidden.device.type, enabled=False):
            h, w = hidden.to(dtype), weight.to(dtype)
            valid = targets != ignore_index
            acc = torch.promote_types(torch.float32, dtype)  # logits, loss and gradients in fp32 (or wider)
            count = valid.sum().clamp(min=1).to(acc)
            total = torch.zeros((), dtype=acc, device=hidden.device)
            lses = []
            if mode == "precompute":
                grad_h = torch.empty(hidden.shape, dtype=acc, device=hidden.device)
                grad_w = torch.zeros(weight.shape, dtype=acc, device=weight.device)
            for s in range(0, h.shape[0], chunk):
                hs, tgt, ok = h[s:s + chunk], targets[s:s + chunk], valid[s:s + chunk]
                logits = (hs @ w.t()).to(acc)  # the plain path's logits, then .float(), one chunk of them
                lse = torch.logsumexp(logits, dim=-1)
                picked = logits.gather(1, tgt.clamp(min=0)[:, None]).squeeze(1)
                total += ((lse - picked) * ok).sum()
                if mode == "precompute":
                    g = _chunk_grad(logits, lse, tgt, ok, 1.0 / count).to(dtype)
                    del logits
                    grad_h[s:s + chunk] = g @ w
                    grad_w += (g.t() @ hs).to(acc)
                elif mode == "recompute":
                    lses.append(lse)
            if mode == "precompute":
                ctx.save_for_backward(grad_h, grad_w)
            elif mode == "recompute":
                ctx.save_for_backward(h, w, targets, torch.cat(lses), count)
        ctx.mode, ctx.chunk, ctx.ignore_index = mode, chunk, ignore_index
        ctx.dtypes = (hidden.dtype, weight.dtype)
        return total / count

    @staticmethod
    def backward(ctx, grad_out):
        h_dtype, w_dtype = ctx.dtypes
        if ctx.mode == "precompute":
            grad_h, grad_w = ctx.saved_tensors
            return (grad_h * grad_out).to(h_dtype), (grad_w * grad_out).to(w_dtype), None, None, None, None, None
        h, w, targets, lse, count = ctx.saved_tensors
        grad_h = torch.empty(h.shape, dtype=h_dtype, device=h.device)
        acc = torch.promote_types(torch.float32, h.dtype)
        grad_w = torch.zeros(w.shape, dtype=acc, device=w.device)
        valid = targets != ctx.ignore_index
        scale = grad_out.to(acc) / count  # the loss scale is in grad_out: applied before the cast, as plain does
        with torch.autocast(h.device.type, enabled=False):
            for s in range(0, h.shape[0], ctx.chunk):
                hs = h[s:s + ctx.chunk]
                logits = (hs @ w.t()).to(acc)
                g = _chunk_grad(logits, lse[s:s + ctx.chunk], targets[s:s + ctx.chunk], valid[s:s + ctx.chunk],
                                scale).to(h.dtype)
                del logits
                grad_h[s:s + ctx.chunk] = g @ w
                grad_w += (g.t() @ hs).to(acc)
        return grad_h, grad_w.to(w_dtype), None, None, None, None, None


@torch.compiler.disable  # one graph break at the head under whole-model compile: the loop stays eager
def chunked_linear_cross_entropy(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, *,
                                 chunk_tokens: int, ignore_index: int = IGNORE_INDEX,
                                 recompute: bool | None = None) -> torch.Tensor:
    """Mean cross-entropy of `hidden @ weight.T` against `targets`, chunk_tokens rows at a time.

    hidden: (N, d), weight: (V, d), targets: (N,). recompute defaults to True for fp16 compute (see the
    module docstring) and False otherwise. Without gradients only the loss is computed.
    """
    dtype = _compute_dtype(hidden, weight)
    wants_grad = torch.is_grad_enabled() and (hidden.requires_grad or weight.requires_grad)
    if recompute is None:
        recompute = dtype == torch.float16
    mode = "none" if not wants_grad else "recompute" if recompute else "precompute"
    return _ChunkedLinearCrossEntropy.apply(hidden, weight, targets, max(1, chunk_tokens), ignore_index, dtype, mode)
