"""operand_copies_in_source_order: a product operand's copy keeps its source's inner order."""

from __future__ import annotations

import torch
from coil.fx_passes import check_graph
from coil.fx_passes.passes.channels_last import FREE_OUTPUTS
from coil.fx_passes.passes.operand_copies import operand_copies_in_source_order
from torch.fx import GraphModule

aten = torch.ops.aten


def _clones(gm: GraphModule) -> list[torch.fx.Node]:
    return [n for n in gm.graph.nodes if n.target is aten.clone.default]


def _transposing(gm: GraphModule) -> list[torch.fx.Node]:
    """Clones whose source runs along a different dim than the copy (a transposing copy)."""
    out = []
    for n in _clones(gm):
        src, dst = n.args[0].meta["val"], n.meta["val"]
        if src.dim() >= 2 and src.stride(-1) != 1 and dst.stride(-1) == 1:
            out.append(n)
    return out


def _scores(q: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """q @ kᵀ with k a head split of x ([B, S, H * D] -> [B, H, S, D]), as eager attention writes it."""
    b, s, hd = x.shape
    k = x.view(b, s, q.shape[1], hd // q.shape[1]).transpose(1, 2)
    return torch.softmax(torch.matmul(q, k.transpose(-1, -2)), dim=-1)


def test_transposed_key_copy_becomes_a_plain_copy(trace) -> None:
    q, x = torch.randn(2, 3, 8, 16), torch.randn(2, 8, 48)
    gm = trace(_scores, q, x)
    assert _transposing(gm)  # the matmul's reshape of kᵀ copies across dims
    assert operand_copies_in_source_order(gm).modified
    check_graph(gm, pass_name="operand_copies_in_source_order")
    assert not _transposing(gm)
    bmm = next(n for n in gm.graph.nodes if n.target is aten.bmm.default)
    kt = bmm.args[1].meta["val"]
    assert kt.shape == (6, 16, 8) and kt.stride()[-2:] == (1, 16)  # column-major operand
    gm.recompile()
    torch.testing.assert_close(gm(q, x), _scores(q, x))
    assert not operand_copies_in_source_order(gm).modified  # a fixpoint


def test_unaligned_column_major_operand_is_left_alone(trace) -> None:
    """The column-major copy's leading dim would be 6 floats (24 bytes, unaligned) where the
    row-major one is 8: cuBLAS would fall back to its slow kernels, so the copy stays."""
    q, x = torch.randn(2, 3, 8, 6), torch.randn(2, 8, 18)
    gm = trace(_scores, q, x)
    before = len(_transposing(gm))
    assert before and not operand_copies_in_source_order(gm).modified
    assert len(_transposing(gm)) == before


def test_copy_with_another_reader_is_left_alone(trace) -> None:
    def f(q: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        kt = x.transpose(-1, -2).contiguous()  # [B, D, S], read by the product and returned
        return torch.bmm(q, kt), kt

    q, x = torch.randn(2, 8, 16), torch.randn(2, 8, 16)
    gm = trace(f, q, x)
    assert not operand_copies_in_source_order(gm).modified
    gm.recompile()
    got = gm(q, x)
    assert got[1].is_contiguous()
    torch.testing.assert_close(got[0], f(q, x)[0])


class _Scores(torch.nn.Module):
    def forward(self, q: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return _scores(q, x).sum(-1)


def test_forward_and_backward_graphs(aot) -> None:
    """Through AOTAutograd: both graphs rewritten and checked; values and gradients equal eager's."""

    def transform(gm: GraphModule, is_backward: bool) -> GraphModule:
        if not is_backward:  # the saved kᵀ is free to change layout, as coil's backend marks it
            outs = next(n for n in gm.graph.nodes if n.op == "output").args[0]
            gm.meta[FREE_OUTPUTS] = tuple(range(1, len(outs)))
        operand_copies_in_source_order(gm)
        check_graph(gm, pass_name="operand_copies_in_source_order")
        gm.recompile()
        return gm

    q, x = torch.randn(2, 3, 8, 16, requires_grad=True), torch.randn(2, 8, 48, requires_grad=True)
    captured = aot(_Scores(), [q, x], transform)
    got = captured.fn(q, x)
    want = _Scores()(q, x)
    torch.testing.assert_close(got, want)
    assert not _transposing(captured.after[0])
    g1 = torch.autograd.grad(got.pow(2).sum(), (q, x))
    g2 = torch.autograd.grad(want.pow(2).sum(), (q, x))
    for a, b in zip(g1, g2, strict=True):
        torch.testing.assert_close(a, b)


def test_a_view_the_new_layout_cannot_take_undoes_the_rewrite(trace) -> None:
    """The copy is flattened into the rows of a 2-D product: a column-major copy cannot be
    viewed so, so the graph stays as it was."""

    def f(a: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        rows = x.transpose(-1, -2).reshape(-1, x.shape[1])  # [B * D, S]: a copy, then a view
        return rows @ a

    a, x = torch.randn(8, 4), torch.randn(2, 8, 16)
    gm = trace(f, a, x)
    assert _transposing(gm)
    assert not operand_copies_in_source_order(gm).modified
    check_graph(gm, pass_name="operand_copies_in_source_order")
    gm.recompile()
    torch.testing.assert_close(gm(a, x), f(a, x))


def test_a_transposed_view_saved_for_the_backward_follows_the_copy(trace) -> None:
    """A forward that returns, at a position free to change layout, a transpose of the copy's
    batch view (what the partitioner saves for the backward's product): rewritten, and the
    output's strides are the new layout's."""

    def f(q: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        b, s, hd = x.shape
        k = x.view(b, s, 2, hd // 2).transpose(1, 2)
        kt = k.transpose(-1, -2).reshape(b * 2, hd // 2, s)  # the matmul decomposition's copy
        return torch.bmm(q, kt), kt.transpose(1, 2)

    q, x = torch.randn(4, 8, 16), torch.randn(2, 8, 32)
    gm = trace(f, q, x)
    gm.meta[FREE_OUTPUTS] = (1,)
    assert operand_copies_in_source_order(gm).modified
    check_graph(gm, pass_name="operand_copies_in_source_order")
    out = next(n for n in gm.graph.nodes if n.op == "output").args[0]
    assert out[1].meta["val"].stride() == (128, 16, 1)  # [B*H, S, D] row-major now
    gm.recompile()
    for got, want in zip(gm(q, x), f(q, x), strict=True):
        torch.testing.assert_close(got, want)
