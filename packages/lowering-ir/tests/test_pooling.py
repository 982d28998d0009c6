"""max_pool2d forward and backward (ops/pooling.py) against eager PyTorch, through the IR
evaluator of conftest.py: values and int64 indices (NaN, −inf, ties: eager's first maximum, last
NaN), the int8 window offsets the decomposition saves for the backward, and the gather-form
backward with overlapping windows, against a float64 eager reference."""

from __future__ import annotations

from typing import Any

import coil.lowering_ir as L
import pytest
import torch
from coil.lowering_ir.ops import pooling
from functorch.compile import aot_function, make_boxed_func, min_cut_rematerialization_partition

aten = torch.ops.aten

# (kernel_size, stride, padding, dilation, ceil_mode), input H x W
CASES: dict[str, tuple[tuple[Any, Any, Any, Any, bool], tuple[int, int]]] = {
    "k2s2": ((2, 2, 0, 1, False), (6, 5)),
    "k3s2p1": ((3, 2, 1, 1, False), (6, 5)),
    "k3s1p1_overlap": ((3, 1, 1, 1, False), (5, 4)),
    "k3s2p1_ceil": ((3, 2, 1, 1, True), (6, 6)),
    "asym_dilated_ceil": (((2, 3), (1, 2), (1, 1), (2, 1), True), (6, 5)),
    "default_stride_dilated": ((2, [], 0, 2, False), (6, 6)),
    "k1": ((1, 1, 0, 1, False), (3, 4)),
    "asym_pad_ceil": (((3, 2), (2, 3), (1, 0), (1, 2), True), (7, 6)),
}


def _fallbacks(g: L.LoweredGraph) -> list[object]:
    return [op.kernel for op in g.operations if isinstance(op, L.ExternKernel) and op.fallback]


def _input(h: int, w: int, *, lead: tuple[int, ...] = (2, 2), dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Small integers (many ties), a NaN, a −inf and a −inf corner block (a window of −infs)."""
    torch.manual_seed(0)
    x = torch.randint(-3, 3, (*lead, h, w)).to(dtype)
    flat = x.view(-1, h, w)
    flat[0, 1, 1] = float("nan")
    flat[0, min(h, w) - 1, min(h, w) - 1] = float("nan")
    flat[-1, 0, 2] = float("-inf")
    flat[min(1, len(flat) - 1), :3, :3] = float("-inf")
    return x


def _pool(args: tuple[Any, Any, Any, Any, bool]) -> Any:
    k, s, p, d, c = args
    return lambda x: tuple(aten.max_pool2d_with_indices(x, k, s, p, d, c))


def _check_forward(ir: Any, args: tuple[Any, Any, Any, Any, bool], x: torch.Tensor, decompose: bool) -> L.LoweredGraph:
    fn = _pool(args)
    g = ir.lower(fn, x, decompose=decompose)
    assert _fallbacks(g) == []
    got, want = ir.evaluate(g, [x]), fn(x)
    torch.testing.assert_close(got[0], want[0], rtol=0, atol=0, equal_nan=True)
    assert got[1].dtype == torch.int64 and torch.equal(got[1], want[1]), (got[1], want[1])
    return g


@pytest.mark.parametrize("name", sorted(CASES))
def test_forward_through_int8_offsets_matches_eager(ir: Any, name: str) -> None:
    args, (h, w) = CASES[name]
    g = _check_forward(ir, args, _input(h, w), decompose=True)
    dtypes = sorted(str(op.outputs[0].layout.dtype) for op in g.operations)
    assert dtypes == ["torch.float32", "torch.int64", "torch.int8"]  # values, indices, offsets


@pytest.mark.parametrize("name", ["k3s2p1", "asym_dilated_ceil", "k3s1p1_overlap"])
def test_aten_lowering_matches_eager(ir: Any, name: str) -> None:
    """max_pool2d_with_indices lowered whole (no decomposition): values and indices directly."""
    args, (h, w) = CASES[name]
    _check_forward(ir, args, _input(h, w), decompose=False)


@pytest.mark.parametrize("decompose", [True, False])
def test_3d_bf16_and_channels_last_inputs(ir: Any, decompose: bool) -> None:
    _check_forward(ir, (3, 2, 1, 1, True), _input(5, 6, lead=(3,), dtype=torch.bfloat16), decompose)
    x = _input(5, 4, lead=(1, 3)).contiguous(memory_format=torch.channels_last)
    _check_forward(ir, (2, 1, 1, 1, False), x, decompose)


def test_window_without_an_in_bounds_element_keeps_eager_start(ir: Any) -> None:
    """Padding 1 and dilation 3 on a 2-row input: the window's rows are -1 and 2, both outside;
    eager returns -inf and the index of its adjusted start (row 2)."""
    _check_forward(ir, (2, 1, (1, 0), (3, 1), False), _input(2, 3, lead=(1, 1)), decompose=True)


def test_offsets_lowering_matches_the_op_eager_kernel(ir: Any) -> None:
    args, (h, w) = CASES["asym_pad_ceil"]
    x = _input(h, w)
    k, s, p, d = pooling.Pool2d.of(*args[:4]).args()
    c = args[4]
    fn = lambda x: tuple(pooling.MAX_POOL2D_OFFSETS(x, k, s, p, d, c))  # noqa: E731
    g = ir.lower(fn, x)
    assert _fallbacks(g) == []
    got, want = ir.evaluate(g, [x]), fn(x)
    assert want[1].dtype == torch.int8 and torch.equal(got[1], want[1])
    torch.testing.assert_close(got[0], want[0], rtol=0, atol=0, equal_nan=True)


def test_large_windows_stay_whole_and_fall_back(ir: Any) -> None:
    x = torch.randn(1, 1, 9, 9)
    big = lambda x: tuple(aten.max_pool2d_with_indices(x, [9, 9]))  # noqa: E731  81 > MAX_WINDOW
    gm = ir.trace(big, x)
    assert aten.max_pool2d_with_indices.default in ir.targets(gm)
    assert _fallbacks(L.lower(gm)) == [aten.max_pool2d_with_indices.default]
    y = torch.randn(1, 1, 10, 10)  # a 9 x 9 window that does not span the input (2 x 2 outputs)
    avg = lambda x: (aten.avg_pool2d(x, [9, 9], [1, 1]),)  # noqa: E731
    assert _fallbacks(ir.lower(avg, y)) == [aten.avg_pool2d.default]


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8])
def test_integer_inputs(ir: Any, dtype: torch.dtype) -> None:
    """Max pooling starts from the dtype's minimum (a window of minima keeps its first index);
    average pooling (int64) sums in int64 and divides truncating, as eager."""
    torch.manual_seed(0)
    x = torch.randint(-5, 5, (2, 5, 4)).to(dtype)
    x[0, :2, :2] = torch.iinfo(dtype).min
    _check_forward(ir, (2, 1, 1, 1, True), x, decompose=True)
    if dtype != torch.int64:
        return  # eager's avg_pool2d takes no other integer dtype
    avg = _avg((2, 1, 1, True, False, None))
    g = ir.lower(avg, x)
    assert _fallbacks(g) == []
    assert torch.equal(ir.evaluate(g, [x])[0], avg(x)[0])


# -- backward --------------------------------------------------------------------------------------

BACKWARD = ["k3s1p1_overlap", "k3s2p1_ceil", "asym_dilated_ceil", "k2s2", "asym_pad_ceil"]


def _backward_case(name: str, dtype: torch.dtype = torch.float32) -> tuple[Any, torch.Tensor, torch.Tensor, torch.Tensor]:
    (k, s, p, d, c), (h, w) = CASES[name]
    x = _input(h, w).nan_to_num(nan=5.0).to(dtype)  # every window holds a finite value
    vals, idx = aten.max_pool2d_with_indices(x.double(), k, s, p, d, c)
    grad = torch.randn(vals.shape, dtype=torch.float64)
    want = aten.max_pool2d_with_indices_backward(grad, x.double(), k, s, p, d, c, idx)

    def through_indices(x: torch.Tensor, grad: torch.Tensor) -> tuple[torch.Tensor]:
        _, i = aten.max_pool2d_with_indices(x, k, s, p, d, c)
        return (aten.max_pool2d_with_indices_backward(grad, x, k, s, p, d, c, i),)

    return through_indices, x, grad.to(dtype), want


@pytest.mark.parametrize("name", BACKWARD)
def test_backward_from_int8_offsets_matches_eager(ir: Any, name: str) -> None:
    fn, x, grad, want = _backward_case(name)
    g = ir.lower(fn, x, grad)
    assert _fallbacks(g) == []
    # the backward reads the int8 offsets: no int64 indices are materialised
    assert [op.outputs[0].layout.dtype for op in g.operations] == [torch.int8, torch.float32]
    torch.testing.assert_close(ir.evaluate(g, [x, grad])[0].double(), want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("name", ["k3s1p1_overlap", "asym_dilated_ceil"])
def test_backward_from_int64_indices_matches_eager(ir: Any, name: str) -> None:
    """The indices form: indices computed by the aten lowering, or a graph input."""
    fn, x, grad, want = _backward_case(name)
    g = ir.lower(fn, x, grad, decompose=False)
    assert _fallbacks(g) == []
    torch.testing.assert_close(ir.evaluate(g, [x, grad])[0].double(), want, rtol=1e-6, atol=1e-6)
    (k, s, p, d, c), _ = CASES[name]
    idx = aten.max_pool2d_with_indices(x, k, s, p, d, c)[1]
    bw = lambda grad, x, idx: (aten.max_pool2d_with_indices_backward(grad, x, k, s, p, d, c, idx),)  # noqa: E731
    g = ir.lower(bw, grad, x, idx)
    assert _fallbacks(g) == [] and len(g.operations) == 1
    torch.testing.assert_close(ir.evaluate(g, [grad, x, idx])[0].double(), want, rtol=1e-6, atol=1e-6)


def test_backward_bf16(ir: Any) -> None:
    fn, x, grad, want = _backward_case("k3s1p1_overlap", torch.bfloat16)
    g = ir.lower(fn, x, grad)
    assert _fallbacks(g) == []
    got = ir.evaluate(g, [x, grad])[0]
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.double(), want, rtol=2e-2, atol=2e-2)


# -- what the partitioner saves ----------------------------------------------------------------------


def test_partition_saves_int8_offsets_not_int64_indices() -> None:
    """AOTAutograd with coil's table and the min-cut partitioner: the forward's saved tensors
    for max_pool2d hold the int8 offsets; the int64 indices are rebuilt in the backward."""
    graphs: dict[str, torch.fx.GraphModule] = {}

    def keep(name: str) -> Any:
        def compiler(gm: torch.fx.GraphModule, _: Any) -> Any:
            graphs[name] = gm
            return make_boxed_func(gm)
        return compiler

    def fn(x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.max_pool2d(torch.relu(x), 3, 2, 1).sum()

    x = torch.randn(2, 3, 8, 8, requires_grad=True)
    compiled = aot_function(fn, keep("fw"), keep("bw"), partition_fn=min_cut_rematerialization_partition,
                            decompositions=L.decomposition_table())
    compiled(x).backward()
    (out,) = [n for n in graphs["fw"].graph.nodes if n.op == "output"]
    saved = [(a.meta["val"].dtype, tuple(a.meta["val"].shape)) for a in out.args[0][1:]]
    assert (torch.int8, (2, 3, 4, 4)) in saved
    assert all(dt != torch.int64 for dt, _ in saved), saved
    assert pooling.OFFSETS_TO_INDICES in [n.target for n in graphs["bw"].graph.nodes]
    torch.testing.assert_close(x.grad, torch.func.grad(fn)(x.detach()))


# -- average pooling -------------------------------------------------------------------------------

# (kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override), input H x W
AVG: dict[str, tuple[tuple[Any, Any, Any, bool, bool, int | None], tuple[int, int]]] = {
    "k2s2": ((2, [], 0, False, True, None), (6, 4)),
    "k3s2p1_ceil_include_pad": ((3, 2, 1, True, True, None), (6, 5)),
    "k3s2p1_ceil_exclude_pad": ((3, 2, 1, True, False, None), (6, 5)),
    "asym_overlap_exclude_pad": (((3, 2), (1, 2), (1, 1), False, False, None), (5, 5)),
    "divisor_override": (((2, 3), 1, (1, 0), True, True, 5), (4, 5)),
}


def _avg(args: tuple[Any, Any, Any, bool, bool, int | None]) -> Any:
    k, s, p, c, inc, div = args
    return lambda x: (aten.avg_pool2d(x, k, s, p, c, inc, div),)


@pytest.mark.parametrize("name", sorted(AVG))
def test_avg_pool2d_forward_and_backward_match_eager(ir: Any, name: str) -> None:
    args, (h, w) = AVG[name]
    torch.manual_seed(0)
    x = torch.randn(2, 2, h, w)
    fn = _avg(args)
    g = ir.lower(fn, x)
    assert _fallbacks(g) == [] and len(g.operations) == 1
    torch.testing.assert_close(ir.evaluate(g, [x])[0], fn(x)[0], rtol=1e-6, atol=1e-6)

    k, s, p, c, inc, div = args
    grad = torch.randn(fn(x)[0].shape)
    bw = lambda grad, x: (aten.avg_pool2d_backward(grad, x, k, s, p, c, inc, div),)  # noqa: E731
    g = ir.lower(bw, grad, x)
    assert _fallbacks(g) == []
    want = bw(grad.double(), x.double())[0]
    torch.testing.assert_close(ir.evaluate(g, [grad, x])[0].double(), want, rtol=1e-6, atol=1e-6)


def test_avg_pool2d_3d_bf16(ir: Any) -> None:
    x = torch.randn(3, 5, 4).bfloat16()
    fn = _avg((3, 2, 1, True, False, None))
    g = ir.lower(fn, x)
    assert _fallbacks(g) == []
    torch.testing.assert_close(ir.evaluate(g, [x])[0], fn(x)[0])


@pytest.mark.parametrize("sizes", [((6, 4), (3, 2)), ((7, 5), (3, 4)), ((3, 4), (5, 6))],
                         ids=["divisible", "uneven", "upsampling"])
def test_adaptive_avg_pool2d_forward_and_backward_match_eager(ir: Any, sizes: Any) -> None:
    (h, w), out = sizes
    torch.manual_seed(0)
    x = torch.randn(2, 2, h, w)
    fn = lambda x: (aten._adaptive_avg_pool2d(x, list(out)),)  # noqa: E731
    g = ir.lower(fn, x)
    assert _fallbacks(g) == [] and len(g.operations) == 1
    torch.testing.assert_close(ir.evaluate(g, [x])[0], fn(x)[0], rtol=1e-6, atol=1e-6)
    grad = torch.randn(2, 2, *out)
    bw = lambda grad, x: (aten._adaptive_avg_pool2d_backward(grad, x),)  # noqa: E731
    g = ir.lower(bw, grad, x)
    assert _fallbacks(g) == []
    want = bw(grad.double(), x.double())[0]
    torch.testing.assert_close(ir.evaluate(g, [grad, x])[0].double(), want, rtol=1e-6, atol=1e-6)
