"""pad_matmul_strides on batched products: window attention (Swin's 7x7 = 49 tokens, scaled down
to 6 windows of 49 tokens, head dim 32) runs on aligned operands; values, shapes, outputs kept."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from coil.fx_passes import check_graph, pad_matmul_strides_for
from coil.fx_passes.passes.pad_mm import PADDED_OUTPUTS
from torch._decomp import get_decompositions
from torch.fx import GraphModule, Node
from torch.fx.experimental.proxy_tensor import make_fx

aten = torch.ops.aten
INF = float("inf")


def _calls(gm: GraphModule, op: object) -> list[Node]:
    return [n for n in gm.graph.nodes if n.target is op]


def _pads(gm: GraphModule) -> list[tuple[list[int], float]]:
    return sorted((list(p.args[1]), float(p.args[2])) for p in _calls(gm, aten.constant_pad_nd.default))


def _ld(t: torch.Tensor) -> int:
    return int(t.stride(1) if t.stride(2) == 1 else t.stride(2))


def _assert_aligned_products(gm: GraphModule) -> None:
    """Every bmm's operands have 16-byte leading dimensions and K (fp32: 4 elements)."""
    for mm in _calls(gm, aten.bmm.default):
        a, b = (arg.meta["val"] for arg in mm.args)
        assert _ld(a) % 4 == 0 and _ld(b) % 4 == 0, (mm, a.stride(), b.stride())
        assert a.shape[2] % 4 == 0, (mm, a.shape)


def _softmax(form: str) -> Callable[[torch.Tensor], torch.Tensor]:
    if form.startswith("safe"):
        return lambda s: torch.ops.aten._safe_softmax(s, -1)
    return lambda s: torch.softmax(s, -1)


def _window_attention(form: str) -> Callable[..., torch.Tensor]:
    """timm's window attention: q k^T plus a bias per head, softmax, @ v (no SDPA)."""

    def f(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        return _softmax(form)(q @ k.transpose(-2, -1) + bias) @ v

    return f


def _trace(f: Callable[..., torch.Tensor], form: str, *inputs: torch.Tensor) -> GraphModule:
    """A fake-traced ATen graph; ``decomposed`` forms through torch's decompositions of the ops
    coil's table decomposes here (the softmax as amax/sub/exp/sum/div, ``all`` as ``any``,
    ``zeros_like`` as ``full_like``: the post-grad graph's form; fx-passes' tests run without
    coil's lowering package and its table)."""
    ops = [aten._softmax, aten._safe_softmax, aten.all, aten.zeros_like]
    table = get_decompositions(ops) if form.endswith("decomposed") else None
    return make_fx(f, table, tracing_mode="fake")(*inputs)


def _inputs(dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, ...]:
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 49, 32, dtype=dtype) for _ in range(3))
    return q, k, v, torch.randn(3, 49, 49, dtype=dtype)


def _check_values(gm: GraphModule, f: Callable[..., torch.Tensor], inputs: tuple[torch.Tensor, ...],
                  tol: float = 1e-4) -> None:
    gm.recompile()
    got = gm(*inputs)
    want = f(*(t.double() for t in inputs))
    assert got.shape == want.shape and got.stride() == want.stride()
    torch.testing.assert_close(got.double(), want, rtol=tol, atol=tol)


@pytest.mark.parametrize("form", ["op", "decomposed", "safe op", "safe decomposed"])
def test_window_attention_runs_on_aligned_operands(form: str) -> None:
    """The score product's rows (49) are padded to 52 through zero columns of k^T (k's rows,
    a copy of an input here); the softmax runs over its input padded with -inf (its padded
    columns are exact zeros, in the softmax's own kernel), so P @ v reads P's padded rows with
    K = 52 and v gets 3 zero rows. No copy of P, none of the scores."""
    f, inputs = _window_attention(form), _inputs()
    gm = _trace(f, form, *inputs)
    assert pad_matmul_strides_for(gm, devices=("cpu",), min_work=0)
    check_graph(gm, pass_name="pad_matmul_strides")
    scores, out = _calls(gm, aten.bmm.default)
    assert scores.meta["val"].shape == (6, 49, 52) and out.meta["val"].shape == (6, 49, 32)
    assert _pads(gm) == [([0, 0, 0, 3], 0.0), ([0, 0, 0, 3], 0.0), ([0, 3], -INF)]
    (minus_inf,) = (p for p in _calls(gm, aten.constant_pad_nd.default) if p.args[2] == -INF)
    assert minus_inf.args[0].meta["val"].shape == (2, 3, 49, 49)  # the softmax's input
    assert out.args[0].meta["val"].shape == (6, 49, 52)  # P read with its zero columns
    _assert_aligned_products(gm)
    _check_values(gm, f, inputs)
    assert not pad_matmul_strides_for(gm, devices=("cpu",), min_work=0)  # a fixpoint


def test_half_precision_softmax_keeps_its_casts() -> None:
    """bf16: the decomposition computes in fp32 between two casts; the padded softmax keeps
    both, and its padded columns are zeros after the cast back."""
    f, inputs = _window_attention("decomposed"), _inputs(torch.bfloat16)
    gm = _trace(f, "decomposed", *inputs)
    assert pad_matmul_strides_for(gm, devices=("cpu",), min_work=0)
    check_graph(gm, pass_name="pad_matmul_strides")
    scores, out = _calls(gm, aten.bmm.default)
    assert scores.meta["val"].shape == (6, 49, 56) and out.args[0].meta["val"].shape == (6, 49, 56)
    assert [p[1] for p in _pads(gm)].count(-INF) == 1
    assert out.args[0].meta["val"].dtype == torch.bfloat16
    gm.recompile()
    got = gm(*inputs)
    # against eager in bf16: the same roundings (fp64 differs by bf16's own error, ~1e-1 here)
    torch.testing.assert_close(got, f(*inputs), rtol=2e-2, atol=2e-2)


def test_a_product_of_a_padded_product_reads_its_zero_columns() -> None:
    """(q k^T) v: the second product's K is the first one's padded N; it reads the padded
    product itself (zero columns by construction), only v gets zero rows."""

    def f(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return torch.tanh((q @ k.transpose(-2, -1)) @ v)

    inputs = _inputs()[:3]
    gm = _trace(f, "op", *inputs)
    assert pad_matmul_strides_for(gm, devices=("cpu",), min_work=0)
    check_graph(gm, pass_name="pad_matmul_strides")
    first, second = _calls(gm, aten.bmm.default)
    assert _pads(gm) == [([0, 0, 0, 3], 0.0), ([0, 0, 0, 3], 0.0)]  # k's rows, v's rows
    a = second.args[0]
    while a.target is not aten.bmm.default:  # views of the padded product, no slice, no copy
        assert a.target in (aten.view.default, aten._unsafe_view.default, aten.expand.default), a.target
        a = a.args[0]
    assert a is first
    _assert_aligned_products(gm)
    _check_values(gm, f, inputs)


def test_row_major_unaligned_operand_gets_zero_columns() -> None:
    """x @ w with w (6, 32, 49) row-major: w's rows are unaligned; w is padded with zero
    columns and the product read through [..., :49]."""

    def f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return torch.relu(torch.bmm(x, w))

    inputs = (torch.randn(6, 49, 32), torch.randn(6, 32, 49))
    gm = _trace(f, "op", *inputs)
    assert pad_matmul_strides_for(gm, devices=("cpu",), min_work=0)
    check_graph(gm, pass_name="pad_matmul_strides")
    (mm,) = _calls(gm, aten.bmm.default)
    assert mm.meta["val"].shape == (6, 49, 52) and _pads(gm) == [([0, 3], 0.0)]
    _assert_aligned_products(gm)
    _check_values(gm, f, inputs)


def test_inference_output_may_be_the_padded_slice() -> None:
    """An inference graph (PADDED_OUTPUTS) returning the scores: the output is the slice of the
    padded product, its rows 52 apart; values equal eager's."""

    def f(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        return q @ k.transpose(-2, -1)

    inputs = _inputs()[:2]
    gm = _trace(f, "op", *inputs)
    gm.meta[PADDED_OUTPUTS] = True
    assert pad_matmul_strides_for(gm, devices=("cpu",), min_work=0)
    check_graph(gm, pass_name="pad_matmul_strides")
    gm.recompile()
    got = gm(*inputs)
    assert got.stride() == (3 * 49 * 52, 49 * 52, 52, 1)
    torch.testing.assert_close(got.double(), f(*(t.double() for t in inputs)), rtol=1e-4, atol=1e-4)


def _scores_output(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    return q @ k.transpose(-2, -1)  # the result is the graph's output: it must stay contiguous


def _aligned(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return torch.softmax(q[:, :, :48] @ k[:, :, :48].transpose(-2, -1), -1) @ v[:, :, :48]


@pytest.mark.parametrize(("case", "min_work"), [
    ("aligned", 0),  # 48 tokens: every row, K and N aligned
    ("below MIN_WORK", 6 * 49 * 49 * 32 + 1),  # B*M*N*K of the score product, plus one
    ("result is an output", 0),  # a contiguous copy of the padded result would cost more
])  # fmt: skip
def test_batched_products_left_alone(case: str, min_work: int) -> None:
    f = {"aligned": _aligned, "below MIN_WORK": _scores_output, "result is an output": _scores_output}[case]
    inputs = _inputs()[: 3 if case == "aligned" else 2]
    gm = _trace(f, "op", *inputs)
    before = str(gm.graph)
    assert not pad_matmul_strides_for(gm, devices=("cpu",), min_work=min_work)
    assert str(gm.graph) == before


def test_min_work_counts_the_batch() -> None:
    """B*M*N*K at exactly MIN_WORK is enough (the same product as above, one less)."""
    inputs = _inputs()[:2]
    gm = _trace(_scores_output, "op", *inputs)
    gm.meta[PADDED_OUTPUTS] = True
    assert pad_matmul_strides_for(gm, devices=("cpu",), min_work=6 * 49 * 49 * 32)


def test_probabilities_an_output_views_stay_as_they_are() -> None:
    """P returned too (an output views it): P keeps its storage and strides; P @ v still runs
    with K = 52, on a padded copy of P."""

    def f(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        p = torch.softmax(q @ k.transpose(-2, -1) + 1.0, -1)
        return p @ v, p.transpose(-2, -1)

    inputs = _inputs()[:3]
    gm = _trace(f, "op", *inputs)
    assert pad_matmul_strides_for(gm, devices=("cpu",), min_work=0)
    check_graph(gm, pass_name="pad_matmul_strides")
    assert [p[1] for p in _pads(gm)].count(-INF) == 0
    out_p = next(n for n in gm.graph.nodes if n.op == "output").args[0][1]
    assert out_p.args[0].target is aten._softmax.default and out_p.args[0].meta["val"].stride()[-1] == 1
    assert out_p.meta["val"].stride() == (3 * 49 * 49, 49 * 49, 1, 49)
    _assert_aligned_products(gm)
    gm.recompile()
    for got, want in zip(gm(*inputs), f(*(t.double() for t in inputs)), strict=True):
        assert got.stride() == want.stride()
        torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-4)


def test_training_graphs_keep_values_and_gradients(aot) -> None:
    """Forward and backward graphs of window attention (AOTAutograd), the pass on both: the
    output and the gradients of q, k, v against eager in fp64."""

    class Attention(torch.nn.Module):
        def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
            return _window_attention("op")(q, k, v, bias)

    def transform(gm: GraphModule, is_backward: bool) -> GraphModule:
        del is_backward
        assert pad_matmul_strides_for(gm, devices=("cpu",), min_work=0)
        check_graph(gm, pass_name="pad_matmul_strides")
        gm.recompile()
        return gm

    q, k, v, bias = _inputs()
    leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
    captured = aot(Attention(), [*leaves, bias], transform)
    out = captured.fn(*leaves, bias)
    grad = torch.randn_like(out)
    got = torch.autograd.grad(out, leaves, grad)
    assert len(captured.after) == 2  # the backward compiles when it first runs
    ref = [t.double().requires_grad_(True) for t in (q, k, v)]
    want_out = Attention()(*ref, bias.double())
    want = torch.autograd.grad(want_out, ref, grad.double())
    torch.testing.assert_close(out.double(), want_out.detach(), rtol=1e-4, atol=1e-4)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g.double(), w, rtol=1e-4, atol=1e-4)
