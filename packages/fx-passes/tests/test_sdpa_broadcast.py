"""widen_broadcast_kv: SDPA calls whose keys and values broadcast over the query's batch or heads
get them widened (on the devices whose fused kernels need that; the CPU here, by argument). The
oracle: eager SDPA on the original tensors, forward and backward; and the graph's SDPA call
receiving keys as wide as its queries."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from coil.fx_passes import run_pre_grad_passes, widen_broadcast_kv
from coil.fx_passes.passes.causal_mask import value_of
from coil.fx_passes.passes.sdpa_broadcast import FUSED_NEED_EQUAL_HEADS, broadcast_kv_widened
from dynamo_capture import capture
from torch.fx import GraphModule

Fn = Callable[..., torch.Tensor]


def _sdpa_shapes(gm: GraphModule) -> list[tuple[tuple[int, ...], ...]]:
    """The (q, k, v) shapes each SDPA call of `gm` receives."""
    out = []
    for n in gm.graph.nodes:
        if "scaled_dot_product_attention" in str(n.target):
            vals = [value_of(a) for a in n.args[:3]]
            out.append(tuple(tuple(v.shape) for v in vals if v is not None))
    return out


def multi_query(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """One key/value head for every query head, causal (Falcon's older architecture)."""
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def masked(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """An additive mask read from the inputs: the call keeps it."""
    return F.scaled_dot_product_attention(q, k, v, attn_mask=q[..., :1] * 0.1, scale=0.5)


def _inputs(kv_lead: tuple[int, int], requires_grad: bool = False) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 4, 6, 8, generator=g)
    k = torch.randn(*kv_lead, 6, 8, generator=g)
    v = torch.randn(*kv_lead, 6, 8, generator=g)
    return tuple(t.requires_grad_(requires_grad) for t in (q, k, v))


@pytest.mark.parametrize("fn", [multi_query, masked])
@pytest.mark.parametrize("kv_lead", [(2, 1), (1, 4), (1, 1)])
def test_broadcast_keys_are_widened_and_values_and_gradients_match_eager(fn: Fn, kv_lead: tuple[int, int]) -> None:
    gm, _ = capture(fn, *_inputs(kv_lead))
    res = broadcast_kv_widened(gm, {"cpu"})
    assert res.modified
    assert _sdpa_shapes(gm) == [((2, 4, 6, 8),) * 3]
    got = _inputs(kv_lead, requires_grad=True)
    want = _inputs(kv_lead, requires_grad=True)
    out = gm(*got)
    ref = fn(*want)
    torch.testing.assert_close(out if isinstance(out, torch.Tensor) else out[0], ref)
    grad = torch.randn(ref.shape, generator=torch.Generator().manual_seed(1))
    (out if isinstance(out, torch.Tensor) else out[0]).backward(grad)
    ref.backward(grad)
    for a, b in zip(got, want, strict=True):
        assert a.grad is not None and b.grad is not None
        torch.testing.assert_close(a.grad, b.grad)  # the broadcast dims' gradients summed back


def test_equal_heads_and_grouped_heads_are_left_alone() -> None:
    gm, _ = capture(multi_query, *_inputs((2, 4)))
    assert not broadcast_kv_widened(gm, {"cpu"}).modified

    def grouped(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)

    gm, _ = capture(grouped, *_inputs((2, 2)))
    assert not broadcast_kv_widened(gm, {"cpu"}).modified


def test_the_pipeline_widens_only_on_devices_whose_fused_kernels_need_it() -> None:
    """On the CPU, whose flash kernel broadcasts itself, the pre-grad pipeline changes nothing."""
    assert "cpu" not in FUSED_NEED_EQUAL_HEADS and "cuda" in FUSED_NEED_EQUAL_HEADS
    gm, example = capture(multi_query, *_inputs((2, 1)))
    assert not widen_broadcast_kv(gm).modified
    gm = run_pre_grad_passes(gm, example)
    assert _sdpa_shapes(gm) == [((2, 4, 6, 8), (2, 1, 6, 8), (2, 1, 6, 8))]


def one_input_mqa(x: torch.Tensor) -> torch.Tensor:
    """Queries, one key head and one value head from one tensor, so that their batch and length
    are one symbol each when traced with symbolic sizes (as a model's projections are)."""
    return F.scaled_dot_product_attention(x * 0.5, x[:, :1], x[:, 1:2], attn_mask=x[..., :1] * 0.1)


def test_symbolic_sizes_are_read_from_the_query() -> None:
    """A graph traced with symbolic batch and length widens to the query's symbolic batch (a
    `size` node), and the rewritten graph serves other sizes equal to eager."""
    x = torch.randn(2, 4, 6, 8, generator=torch.Generator().manual_seed(0))
    gm, example = capture(one_input_mqa, x, dynamic=True)
    assert any(not isinstance(s, int) for s in _sdpa_shapes(gm)[0][0])  # traced with symbols
    assert broadcast_kv_widened(gm, {"cpu"}).modified
    assert _sdpa_shapes(gm)[0][1] == _sdpa_shapes(gm)[0][0]
    assert "size" in [n.target for n in gm.graph.nodes if n.op == "call_method"]
    for batch, length in ((3, 5), (5, 9)):
        y = torch.randn(batch, 4, length, 8, generator=torch.Generator().manual_seed(batch))
        sizes = iter(y.shape)
        args = [y if isinstance(a, torch.Tensor) else next(sizes) for a in example]
        (out,) = gm(*args)
        torch.testing.assert_close(out, one_input_mqa(y))
