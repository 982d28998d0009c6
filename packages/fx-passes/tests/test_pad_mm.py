"""pad_matmul_strides: unaligned matmul rows padded to 16 bytes; values, shapes, outputs kept."""

from __future__ import annotations

import functools

import pytest
import torch
from coil.fx_passes import check_graph, pad_matmul_strides, pad_matmul_strides_for
from coil.fx_passes.passes.channels_last import FREE_OUTPUTS
from coil.fx_passes.passes.pad_mm import PADDED_OUTPUTS
from torch.fx import GraphModule

aten = torch.ops.aten


def _calls(gm: GraphModule, op: object) -> list[torch.fx.Node]:
    return [n for n in gm.graph.nodes if n.target is op]


def _ld(t: torch.Tensor) -> int:
    return t.stride(0) if t.stride(1) == 1 else t.stride(1)


def test_result_with_unaligned_rows_is_a_slice_of_an_aligned_product(trace) -> None:
    """y = x @ b with b row-major [16, 37] (37 * 4 bytes is not a multiple of 16): b's columns
    are padded, the product is [8, 40] and its users read the slice [:, :37]."""

    def f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return torch.relu(x @ w) * 2

    x, w = torch.randn(8, 16), torch.randn(16, 37)
    gm = trace(f, x, w)
    assert pad_matmul_strides_for(gm, devices=("cpu",), min_work=0)
    check_graph(gm, pass_name="pad_matmul_strides")
    mm = _calls(gm, aten.mm.default)[0]
    assert mm.meta["val"].shape == (8, 40)  # padded to 40 columns (160 bytes)
    sl = _calls(gm, aten.slice.Tensor)[0]
    assert sl.meta["val"].stride() == (40, 1)
    gm.recompile()
    torch.testing.assert_close(gm(x, w), f(x, w))
    assert not pad_matmul_strides_for(gm, devices=("cpu",), min_work=0)  # a fixpoint


@pytest.mark.parametrize("weight", ["row_major", "transposed"])  # padded, split
def test_output_keeps_contiguous_strides(trace, weight: str) -> None:
    def f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return (x @ (w if weight == "row_major" else w.t())).view(2, 4, 37)

    x, w = torch.randn(8, 16), torch.randn(16, 37) if weight == "row_major" else torch.randn(37, 16)
    gm = trace(f, x, w)
    assert pad_matmul_strides_for(gm, devices=("cpu",), min_work=0)
    check_graph(gm, pass_name="pad_matmul_strides")
    out = next(n for n in gm.graph.nodes if n.op == "output").args[0]
    assert out.meta["val"].stride() == (4 * 37, 37, 1)
    gm.recompile()
    res = gm(x, w)
    assert res.is_contiguous()
    torch.testing.assert_close(res, f(x, w))


def test_unaligned_operand_storage_is_padded_once_for_both_products(trace) -> None:
    """Backward of an LM head: g (rows of 37) feeds g @ w and g.t() @ x."""

    def f(a: torch.Tensor, w: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        g = torch.exp(a).view(8, 37)
        return g @ w, g.t() @ x

    a, w, x = torch.randn(2, 4, 37), torch.randn(37, 16), torch.randn(8, 16)
    gm = trace(f, a, w, x)
    assert pad_matmul_strides_for(gm, devices=("cpu",), min_work=0)
    check_graph(gm, pass_name="pad_matmul_strides")
    pads = _calls(gm, aten.constant_pad_nd.default)
    # g padded once (the pad fuses into exp); w, an input, copied with zero rows to K = 40
    assert sorted(str(p.args[0].target) for p in pads) == ["aten.exp.default", "w_1"]
    _assert_aligned_products(gm)
    gm.recompile()
    for got, want in zip(gm(a, w, x), f(a, w, x), strict=True):
        torch.testing.assert_close(got, want)


def _assert_aligned_products(gm: GraphModule) -> None:
    """Every product's operands have aligned leading dimensions, K and M (fp32: 4 elements)."""
    for mm in _calls(gm, aten.mm.default):
        a, b = (arg.meta["val"] for arg in mm.args[-2:])
        for v in (a, b):
            assert _ld(v) % 4 == 0, (mm, v.stride())
        assert a.shape[0] % 4 == 0 and a.shape[1] % 4 == 0, (mm, a.shape)


def test_unaligned_inner_and_row_lengths_are_zero_extended(trace) -> None:
    """An LM head's backward over a vocabulary of 37: g @ w reduces over 37 (K), g.t() @ x has
    37 rows (M). K runs over zero-extended operands, M over the padded g's rows (no copy; the
    result's first 37 rows are what users read); both equal eager's products."""

    def f(a: torch.Tensor, w: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        g = torch.exp(a).view(2, 4, 37).view(8, 37)
        return torch.tanh(g @ (w * 2)), g.t() @ x

    a, w, x = torch.randn(8, 37), torch.randn(37, 16), torch.randn(8, 16)
    gm = trace(f, a, w, x)
    assert pad_matmul_strides_for(gm, devices=("cpu",), min_work=0)
    check_graph(gm, pass_name="pad_matmul_strides")
    mms = _calls(gm, aten.mm.default)
    assert sorted(tuple(mm.meta["val"].shape) for mm in mms) == [(8, 16), (40, 16)]
    # the only copies: g's pad (fused into exp) and w * 2's (fused into the mul)
    pads = _calls(gm, aten.constant_pad_nd.default)
    assert sorted(str(p.args[0].target) for p in pads) == ["aten.exp.default", "aten.mul.Tensor"]
    _assert_aligned_products(gm)
    gm.recompile()
    for got, want in zip(gm(a, w, x), f(a, w, x), strict=True):
        assert got.stride() == want.stride()
        torch.testing.assert_close(got, want)
    assert not pad_matmul_strides_for(gm, devices=("cpu",), min_work=0)  # a fixpoint


def test_a_view_that_cannot_take_the_padding_undoes_the_rewrite(trace) -> None:
    def f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return (x @ w).view(-1).cumsum(0)  # flattening padded rows is not a view

    x, w = torch.randn(8, 16), torch.randn(16, 37)
    gm = trace(f, x, w)
    before = str(gm.graph)
    assert not pad_matmul_strides_for(gm, devices=("cpu",), min_work=0)
    assert str(gm.graph) == before
    check_graph(gm, pass_name="pad_matmul_strides")


def test_a_split_product_is_contiguous_so_any_view_takes_it(trace) -> None:
    def f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return (x @ w.t()).view(-1).cumsum(0)

    x, w = torch.randn(8, 16), torch.randn(37, 16)
    gm = trace(f, x, w)
    assert pad_matmul_strides_for(gm, devices=("cpu",), min_work=0)
    check_graph(gm, pass_name="pad_matmul_strides")
    assert _calls(gm, aten.cat.default) and not _calls(gm, aten.constant_pad_nd.default)
    gm.recompile()
    torch.testing.assert_close(gm(x, w), f(x, w))


def _bias(kind: str, n: int) -> torch.Tensor | None:
    return {"none": None, "row": torch.randn(n), "scalar": torch.randn(1), "full": torch.randn(8, n)}[kind]


@pytest.mark.parametrize("n", [37, 38, 39])
@pytest.mark.parametrize("bias", ["none", "row", "scalar", "full"])
def test_transposed_weight_input_is_split_by_columns(trace, n: int, bias: str) -> None:
    """An inference LM head whose logits are the graph's output, which must stay contiguous:
    B = t(W) with W a graph input, N unaligned. No padded copy of W: the product is
    cat([x @ t(W)[:, :36], x @ t(W)[:, 36:]], 1), bias columns sliced alike, addmm's beta and
    alpha kept; the result is contiguous; a fixpoint."""
    x, w, b = torch.randn(8, 16), torch.randn(n, 16), _bias(bias, n)

    def f(x: torch.Tensor, w: torch.Tensor, *bb: torch.Tensor) -> torch.Tensor:
        return torch.addmm(bb[0], x, w.t(), beta=0.5, alpha=2.0) if bb else x @ w.t()

    inputs = (x, w) if b is None else (x, w, b)
    gm = trace(f, *inputs)
    assert pad_matmul_strides_for(gm, devices=("cpu",), min_work=0)
    check_graph(gm, pass_name="pad_matmul_strides")
    assert not _calls(gm, aten.constant_pad_nd.default)
    products = _calls(gm, aten.mm.default if b is None else aten.addmm.default)
    assert [p.meta["val"].shape[1] for p in products] == [36, n - 36]
    assert all(p.kwargs == ({} if b is None else {"beta": 0.5, "alpha": 2.0}) for p in products)
    (cat,) = _calls(gm, aten.cat.default)
    assert cat.args[0] == products and cat.meta["val"].stride() == (n, 1)
    gm.recompile()
    torch.testing.assert_close(gm(*inputs), f(*inputs))
    assert not pad_matmul_strides_for(gm, devices=("cpu",), min_work=0)  # a fixpoint


@pytest.mark.parametrize("n", [37, 39])
@pytest.mark.parametrize("bias", ["none", "row", "full"])
@pytest.mark.parametrize("where", ["read in the graph", "output of an inference graph", "saved for the backward"])
def test_transposed_weight_input_is_padded_where_the_result_may_be_a_slice(
        trace, n: int, bias: str, where: str) -> None:
    """The same head when its result is read inside the graph, or is an output of a graph
    marked PADDED_OUTPUTS, or an output saved for the backward (FREE_OUTPUTS): W's rows padded (one copy of W), the product [8, 40] read through
    [:, :n] with no cat and no contiguous copy; the output may keep the padded rows."""
    x, w, b = torch.randn(8, 16), torch.randn(n, 16), _bias(bias, n)

    def f(x: torch.Tensor, w: torch.Tensor, *bb: torch.Tensor) -> torch.Tensor:
        y = torch.addmm(bb[0], x, w.t(), beta=0.5, alpha=2.0) if bb else x @ w.t()
        return y * 3 if where == "read in the graph" else y

    inputs = (x, w) if b is None else (x, w, b)
    gm = trace(f, *inputs)
    if where == "output of an inference graph":
        gm.meta[PADDED_OUTPUTS] = True
    if where == "saved for the backward":
        gm.meta[FREE_OUTPUTS] = (0,)
    assert pad_matmul_strides_for(gm, devices=("cpu",), min_work=0)
    check_graph(gm, pass_name="pad_matmul_strides")
    assert not _calls(gm, aten.cat.default) and not _calls(gm, aten.clone.default)
    products = _calls(gm, aten.mm.default if b is None else aten.addmm.default)
    assert [tuple(p.meta["val"].shape) for p in products] == [(8, 40)]
    gm.recompile()
    got, want = gm(*inputs), f(*inputs)
    torch.testing.assert_close(got, want)
    if where != "read in the graph":
        assert got.stride() == (40, 1)  # the slice of the padded product itself
    assert not pad_matmul_strides_for(gm, devices=("cpu",), min_work=0)  # a fixpoint


def test_the_post_grad_pipeline_pads_once_and_stops(trace, monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole post-grad pipeline (to its fixpoint, with the addmm rewrites around the pass)
    on a biased LM head whose result a pointwise op reads, the pass let onto CPU products."""
    from coil.fx_passes import run_post_grad_passes
    from coil.fx_passes.passes import pad_mm

    monkeypatch.setattr(pad_mm, "pad_matmul_strides_for",
                        functools.partial(pad_matmul_strides_for, devices=("cpu",), min_work=0))
    x, w, b = torch.randn(8, 16), torch.randn(38, 16), torch.randn(38)

    def f(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.relu(torch.nn.functional.linear(x, w, b))

    gm = run_post_grad_passes(trace(f, x, w, b), is_backward=False)
    check_graph(gm, pass_name="post-grad pipeline")
    products = [n for n in gm.graph.nodes if n.target in (aten.mm.default, aten.addmm.default)]
    assert [p.meta["val"].shape[1] for p in products] == [40]
    assert not _calls(gm, aten.cat.default)
    gm.recompile()
    torch.testing.assert_close(gm(x, w, b), f(x, w, b))


def test_default_pass_leaves_cpu_and_small_products_alone(trace) -> None:
    x, w = torch.randn(8, 16), torch.randn(37, 16)
    gm = trace(lambda x, w: x @ w.t(), x, w)
    assert not pad_matmul_strides(gm).modified


def test_unaligned_graph_input_is_copied_once_unless_an_output_views_it(trace) -> None:
    """A backward graph's logits gradient arrives as an input: one padded copy serves both."""

    def f(g: torch.Tensor, w: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return g @ w, g.t() @ x

    g, w, x = torch.randn(8, 37), torch.randn(37, 16), torch.randn(8, 16)
    gm = trace(f, g, w, x)
    assert pad_matmul_strides_for(gm, devices=("cpu",), min_work=0)
    check_graph(gm, pass_name="pad_matmul_strides")
    pads = _calls(gm, aten.constant_pad_nd.default)  # g once for both products, w along K
    assert all(p.args[0].op == "placeholder" for p in pads)
    assert sorted(p.args[0].name for p in pads) == ["g_1", "w_1"]
    _assert_aligned_products(gm)
    placeholders = [n.op == "placeholder" for n in gm.graph.nodes]
    assert placeholders == sorted(placeholders, reverse=True)  # inputs still come first
    gm.recompile()
    for got, want in zip(gm(g, w, x), f(g, w, x), strict=True):
        torch.testing.assert_close(got, want)

    gm2 = trace(lambda g, w: (g @ w, g.t()), g, w)  # an output views g: g must stay as it is
    assert pad_matmul_strides_for(gm2, devices=("cpu",), min_work=0)  # K still padded, by copies
    out = next(n for n in gm2.graph.nodes if n.op == "output")
    assert out.args[0][1].args[0].op == "placeholder"  # g.t() still views the input itself
    gm2.recompile()
    got = gm2(g, w)
    assert got[1].data_ptr() == g.data_ptr()
    torch.testing.assert_close(got[0], g @ w)


def test_transposed_weight_narrower_than_one_aligned_width_is_padded_along_its_rows(trace) -> None:
    """B = t(W) with fewer than 4 (fp32) columns: nothing to split, so the copy pads W's rows,
    which it reads and writes contiguously."""
    x, w = torch.randn(8, 16), torch.randn(3, 16)
    gm = trace(lambda x, w: torch.relu(x @ w.t()), x, w)
    assert pad_matmul_strides_for(gm, devices=("cpu",), min_work=0)
    pad = _calls(gm, aten.constant_pad_nd.default)[0]
    assert pad.args[1] == [0, 0, 0, 1] and pad.meta["val"].shape == (4, 16)
    gm.recompile()
    torch.testing.assert_close(gm(x, w), torch.relu(x @ w.t()))


def test_weight_computed_in_the_graph_is_padded_in_place(trace) -> None:
    """Autocast's LM head: W = w.to(bf16) feeds x @ W.t() and is saved (a graph output). W
    becomes the first rows of its padded self: one pad, no second copy, the output W keeps its
    shape and strides and reads the padded buffer."""

    def f(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        wb = w * 2
        return torch.relu(x @ wb.t()), wb

    x, w = torch.randn(8, 16), torch.randn(37, 16)
    gm = trace(f, x, w)
    assert pad_matmul_strides_for(gm, devices=("cpu",), min_work=0)
    check_graph(gm, pass_name="pad_matmul_strides")
    (pad,) = _calls(gm, aten.constant_pad_nd.default)
    assert pad.args[0].target is aten.mul.Tensor and pad.args[1] == [0, 0, 0, 3]
    out_w = next(n for n in gm.graph.nodes if n.op == "output").args[0][1]
    assert out_w.target is aten.slice.Tensor and out_w.args[0] is pad
    assert out_w.meta["val"].shape == (37, 16) and out_w.meta["val"].stride() == (16, 1)
    gm.recompile()
    got, want = gm(x, w), f(x, w)
    assert got[1].stride() == want[1].stride()
    for g, e in zip(got, want, strict=True):
        torch.testing.assert_close(g, e)
    assert not pad_matmul_strides_for(gm, devices=("cpu",), min_work=0)  # a fixpoint
