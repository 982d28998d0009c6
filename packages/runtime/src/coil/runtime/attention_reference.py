"""The attention op's semantics in plain torch math: the fp64 path of `coil::attention`.

It materialises the (B, H, Sq, Sk) scores, so it is for fp64 inputs (tests, CPU) only; every other
dtype runs the Triton kernels. The formulas are the ones the kernels implement (runtime README,
"Attention"), written in the input's dtype.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["backward", "forward"]


def _widen(x: Tensor, heads: int) -> Tensor:
    """k or v with each key/value head repeated for the query heads that read it."""
    return x.repeat_interleave(heads // x.shape[1], dim=1)


def _scores(q: Tensor, k: Tensor, bias: Tensor | None, keep: Tensor | None,
            alibi: Tensor | None, scale: float, causal: bool, window: int, softcap: float,
            ) -> tuple[Tensor, Tensor | None]:
    """(masked scores, tanh of the capped scores or None)."""
    sq, sk = q.shape[2], k.shape[2]
    s = (q @ _widen(k, q.shape[1]).transpose(-1, -2)) * scale
    t = None
    if softcap > 0:
        t = torch.tanh(s / softcap)
        s = softcap * t
    i = torch.arange(sq, device=q.device)[:, None]
    j = torch.arange(sk, device=q.device)[None, :]
    if alibi is not None:
        slope = alibi.to(torch.float32)[:, None, None] * (j - i).to(torch.float32)
        s = s + slope.to(q.dtype).to(s.dtype)
    if bias is not None:
        s = s + bias.to(s.dtype)
    allowed = torch.ones((sq, sk), dtype=torch.bool, device=q.device)
    if causal:
        allowed &= j <= i
    if window > 0:
        allowed &= j > i - window
    mask = allowed if keep is None else keep & allowed
    return s.masked_fill(~mask, float("-inf")), t


def _weights(s: Tensor, lse: Tensor) -> Tensor:
    """softmax weights exp(s - lse), 0 on rows with no visible key."""
    safe = torch.where(torch.isinf(lse) & (lse < 0), torch.zeros_like(lse), lse)
    return torch.exp(s - safe[..., None])


def forward(q: Tensor, k: Tensor, v: Tensor, bias: Tensor | None, keep: Tensor | None,
            alibi: Tensor | None, scale: float, causal: bool, window: int, softcap: float,
            ) -> tuple[Tensor, Tensor]:
    """(out, lse) with out in q's dtype and lse in fp32 (see `coil::attention`)."""
    s, _ = _scores(q, k, bias, keep, alibi, scale, causal, window, softcap)
    lse = torch.logsumexp(s, dim=-1)
    out = _weights(s, lse) @ _widen(v, q.shape[1])
    return out.contiguous(), lse.to(torch.float32)


def backward(grad_out: Tensor, grad_lse: Tensor | None, q: Tensor, k: Tensor, v: Tensor,
             out: Tensor, lse: Tensor, bias: Tensor | None, keep: Tensor | None,
             alibi: Tensor | None, scale: float, causal: bool, window: int, softcap: float,
             bias_grad: bool) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(dq, dk, dv, ds) of `coil::attention_backward` (ds fp32 (B, H, Sq, Sk) or empty)."""
    heads = q.shape[1]
    batch, kv_heads, sk, d = k.shape
    del lse  # fp32 by the contract: recomputed in the inputs' precision instead
    s, t = _scores(q, k, bias, keep, alibi, scale, causal, window, softcap)
    p = _weights(s, torch.logsumexp(s, dim=-1))
    delta = (grad_out * out).sum(-1)
    if grad_lse is not None:
        delta = delta - grad_lse.to(delta.dtype)
    ds = p * (grad_out @ _widen(v, heads).transpose(-1, -2) - delta[..., None])
    dbias = ds.to(torch.float32) if bias_grad else q.new_zeros((0,), dtype=torch.float32)
    if t is not None:
        ds = ds * (1 - t * t)
    dq = (ds @ _widen(k, heads)) * scale
    group = (batch, kv_heads, heads // kv_heads, sk, d)
    dk = ((ds.transpose(-1, -2) @ q) * scale).reshape(group).sum(2)
    dv = (p.transpose(-1, -2) @ grad_out).reshape(group).sum(2)
    return dq.contiguous(), dk.contiguous(), dv.contiguous(), dbias
