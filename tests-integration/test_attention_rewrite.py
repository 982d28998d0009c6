"""COIL_ATTENTION=always: attention as HF-style modules write it (an eager chain with a padding
mask and repeat_kv GQA, SDPA with a bool padding mask, T5's learned relative bias, a sliding
window from sizes alone) runs as coil's attention op under torch.compile(backend="coil"),
forward and backward, equal to eager; the op and its backward are planned extern calls in the
wrappers coil generates, not ATen fallbacks (on the CPU the kernels run under Triton's
interpreter)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from coil.backend import COMPILED
from coil.knobs import knobs
from torch import Tensor, nn

pytest.importorskip("coil.runtime.attention")

D, HEADS, KV_HEADS, S = 32, 4, 2, 8
HEAD = D // HEADS


def repeat_kv(x: Tensor, n: int) -> Tensor:
    """HF transformers' repeat_kv."""
    b, heads, s, d = x.shape
    return x[:, :, None, :, :].expand(b, heads, n, s, d).reshape(b, heads * n, s, d)


class SelfAttention(nn.Module):
    """Projections, heads split, GQA keys and values; `core` is the attention as written."""

    def __init__(self, core: Callable[..., Tensor]) -> None:
        super().__init__()
        self.q = nn.Linear(D, D)
        self.k = nn.Linear(D, KV_HEADS * HEAD)
        self.v = nn.Linear(D, KV_HEADS * HEAD)
        self.o = nn.Linear(D, D)
        self.core = core

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        b, s, _ = x.shape
        q = self.q(x).view(b, s, HEADS, HEAD).transpose(1, 2)
        k = self.k(x).view(b, s, KV_HEADS, HEAD).transpose(1, 2)
        v = self.v(x).view(b, s, KV_HEADS, HEAD).transpose(1, 2)
        out = self.core(q, repeat_kv(k, HEADS // KV_HEADS), repeat_kv(v, HEADS // KV_HEADS), mask)
        projected: Tensor = self.o(out.transpose(1, 2).reshape(b, s, D))
        return projected


def eager_padding(q: Tensor, k: Tensor, v: Tensor, mask: Tensor) -> Tensor:
    """HF's eager_attention_forward with an additive 4-D mask."""
    w = torch.matmul(q, k.transpose(2, 3)) * HEAD ** -0.5
    w = w + mask[:, :, :, : k.shape[-2]]
    w = F.softmax(w, dim=-1, dtype=torch.float32).to(q.dtype)
    w = F.dropout(w, p=0.1, training=False)
    return torch.matmul(w, v)


def sdpa_bool_padding(q: Tensor, k: Tensor, v: Tensor, mask: Tensor) -> Tensor:
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask > -1, scale=HEAD ** -0.5)


def sdpa_window(q: Tensor, k: Tensor, v: Tensor, mask: Tensor) -> Tensor:
    """Mistral's sliding window of 3, built from sizes alone."""
    i, j = torch.arange(q.shape[2])[:, None], torch.arange(k.shape[2])[None, :]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=(j <= i) & (j > i - 3))


class T5Core(nn.Module):
    """T5's form: no scaling, a learned relative-position bias added in place, fp32 softmax."""

    def __init__(self, buckets: int = 8) -> None:
        super().__init__()
        self.relative = nn.Embedding(buckets, HEADS)
        self.buckets = buckets

    def forward(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor) -> Tensor:
        i, j = torch.arange(q.shape[2])[:, None], torch.arange(k.shape[2])[None, :]
        bucket = (j - i).clamp(-(self.buckets // 2), self.buckets // 2 - 1) + self.buckets // 2
        scores = torch.matmul(q, k.transpose(3, 2))
        scores += self.relative(bucket).permute(2, 0, 1)[None] + mask
        w = F.softmax(scores.float(), dim=-1).type_as(scores)
        return torch.matmul(F.dropout(w, p=0.1, training=False), v)


def _mask() -> Tensor:
    """Causal and batch 1's first two keys padded, as HF's additive 4-D mask (dtype's lowest)."""
    keep = torch.ones(S, S, dtype=torch.bool).tril()[None, None].repeat(2, 1, 1, 1)
    keep[1, :, :, :2] = False
    keep[1, :, :2, 0] = True  # padded queries keep a key, as a left-padded decoder's do
    return torch.zeros(2, 1, S, S).masked_fill(~keep, torch.finfo(torch.float32).min)


CORES: dict[str, Callable[[], Any]] = {
    "eager_padding": lambda: eager_padding,
    "sdpa_bool_padding": lambda: sdpa_bool_padding,
    "sdpa_window": lambda: sdpa_window,
    "t5_relative_bias": T5Core,
}


def _calls(first: int, op: str) -> int:
    return sum(g.wrapper_source.count(f"torch.ops.coil.{op}.default(") for g in COMPILED[first:])


@pytest.mark.parametrize("name", sorted(CORES))
def test_attention_runs_as_the_op_forward_and_backward(name: str) -> None:
    torch.manual_seed(0)
    model = SelfAttention(CORES[name]())
    x, mask = torch.randn(2, S, D), _mask()
    xc = x.clone().requires_grad_()
    want = model(x.requires_grad_(), mask)
    want.square().sum().backward()
    want_grads = {n: torch.clone(p.grad) for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    first = len(COMPILED)
    with knobs.override(attention="always", fallback_on_error=False):
        got = torch.compile(model, backend="coil")(xc, mask)
        got.square().sum().backward()
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(xc.grad, x.grad, rtol=1e-4, atol=1e-5)
    for n, p in model.named_parameters():
        torch.testing.assert_close(p.grad, want_grads[n], rtol=1e-4, atol=1e-5, msg=n)
    assert (_calls(first, "attention"), _calls(first, "attention_backward")) == (1, 1)
    fallbacks = [f for g in COMPILED[first:] for f in g.fallbacks]
    assert not [f for f in fallbacks if "coil" in f], fallbacks


def test_off_leaves_attention_as_written() -> None:
    model = SelfAttention(eager_padding)
    first = len(COMPILED)
    with knobs.override(attention="off", fallback_on_error=False), torch.no_grad():
        torch.compile(model, backend="coil")(torch.randn(2, S, D), _mask())
    assert _calls(first, "attention") == 0


def test_a_bad_value_names_the_variable() -> None:
    from coil.backend.pipeline import attention

    with knobs.override(attention="sometimes"), pytest.raises(ValueError, match="COIL_ATTENTION"):
        attention.mode()
