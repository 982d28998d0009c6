"""causal_masks: an attention mask that is computed from sizes alone and equals the causal mask
becomes `is_causal=True`; every other mask stays. The oracle: the graph's own output before the
rewrite (the masked SDPA call), and eager SDPA with `is_causal=True`."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from coil.fx_passes import causal_masks, run_pre_grad_passes
from dynamo_capture import capture
from torch.fx import GraphModule

L = S = 12
Fn = Callable[..., torch.Tensor]


def _sdpa(gm: GraphModule) -> list[torch.fx.Node]:
    return [n for n in gm.graph.nodes if "scaled_dot_product_attention" in str(n.target)]


def _qkv(lq: int = L, lk: int = S) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return (torch.randn(2, 3, lq, 8, generator=g), torch.randn(2, 3, lk, 8, generator=g),
            torch.randn(2, 3, lk, 8, generator=g))


def causal_bool(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """An HF-style mask: key index <= query index, from aranges, expanded over the batch."""
    qi = torch.arange(q.shape[-2])[:, None]
    ki = torch.arange(k.shape[-2])[None, :]
    mask = (ki <= qi)[None, None].expand(q.shape[0], 1, -1, -1)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def causal_additive_inf(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    upper = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).triu(1)
    mask = torch.zeros(q.shape[-2], k.shape[-2]).masked_fill(upper, float("-inf"))
    return F.scaled_dot_product_attention(q, k, v, mask, scale=0.3)


def causal_additive_lowest(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    upper = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).triu(1)
    mask = torch.zeros(q.shape[-2], k.shape[-2]).masked_fill(upper, torch.finfo(torch.float32).min)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def sliding_window(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    qi = torch.arange(q.shape[-2])[:, None]
    ki = torch.arange(k.shape[-2])[None, :]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=(ki <= qi) & (ki > qi - 4))


def from_an_input(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """A mask that reads an input's values (a padding mask): never evaluated."""
    qi = torch.arange(q.shape[-2])[:, None]
    ki = torch.arange(k.shape[-2])[None, :]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=(ki <= qi) & (v[..., :1] > -10))


def bottom_right(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Queries aligned to the last keys (a cache): not SDPA's top-left causal mask."""
    qi = torch.arange(q.shape[-2])[:, None] + (k.shape[-2] - q.shape[-2])
    ki = torch.arange(k.shape[-2])[None, :]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=ki <= qi)


@pytest.mark.parametrize("fn", [causal_bool, causal_additive_inf, causal_additive_lowest],
                         ids=lambda f: f.__name__)
def test_a_causal_mask_from_sizes_becomes_is_causal(fn: Fn) -> None:
    q, k, v = _qkv()
    gm, inputs = capture(fn, q, k, v)
    (want,) = gm(*inputs)
    assert causal_masks(gm).modified
    (node,) = _sdpa(gm)
    assert node.kwargs.get("is_causal") is True and node.kwargs.get("attn_mask") is None
    assert len(node.args) <= 3 or node.args[3] is None
    (got,) = gm(*inputs)
    torch.testing.assert_close(got, want)
    scale = 0.3 if fn is causal_additive_inf else None
    torch.testing.assert_close(got, F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale))
    assert not causal_masks(gm).modified  # a fixpoint


@pytest.mark.parametrize("fn", [sliding_window, from_an_input], ids=lambda f: f.__name__)
def test_other_masks_stay(fn: Fn) -> None:
    gm, _ = capture(fn, *_qkv())
    assert not causal_masks(gm).modified
    assert all(n.kwargs.get("is_causal") in (None, False) for n in _sdpa(gm))


def test_a_shorter_query_keeps_a_bottom_right_mask_and_takes_a_top_left_one() -> None:
    """SDPA's is_causal is the top-left `tril` of L x S: a mask aligned to the last keys differs."""
    q, k, v = _qkv(lq=5)
    gm, _ = capture(bottom_right, q, k, v)
    assert not causal_masks(gm).modified
    gm, inputs = capture(causal_bool, q, k, v)
    (want,) = gm(*inputs)
    assert causal_masks(gm).modified
    torch.testing.assert_close(gm(*inputs)[0], want)


def test_symbolic_sizes_leave_the_mask_alone() -> None:
    q, k, v = _qkv()
    gm, _ = capture(causal_bool, q, k, v, dynamic=True)
    assert not causal_masks(gm).modified


def test_the_pre_grad_pipeline_rewrites_and_drops_the_mask() -> None:
    q, k, v = _qkv()
    gm, inputs = capture(causal_bool, q, k, v)
    (want,) = gm(*inputs)
    out = run_pre_grad_passes(gm, inputs)
    assert [n.kwargs.get("is_causal") for n in _sdpa(out)] == [True]
    assert not [n for n in out.graph.nodes if "arange" in str(n.target)]  # the mask's nodes are gone
    torch.testing.assert_close(out(*inputs)[0], want)
