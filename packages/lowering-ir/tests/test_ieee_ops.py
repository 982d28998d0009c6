"""IEEE-754-aware pointwise lowerings (ops/pointwise_ieee.py), as_strided_scatter
(ops/strided_scatter.py) and the composites coil now decomposes (repeat, group norm, elu, the
*_copy ops, dist): native (no ATen fallback) and equal to eager through the brute-force IR
evaluator of conftest.py, on the edge values each op's contract names (signed zeros, NaN, inf,
ties, integer and bool operands, type promotion)."""

from __future__ import annotations

import math

import coil.lowering_ir as L
import pytest
import torch

aten = torch.ops.aten
NAN, INF = math.nan, math.inf

# signed zeros, infinities, NaN, ties and ordinary values
EDGES = [0.0, -0.0, 1.5, -1.5, 2.5, -2.5, INF, -INF, NAN, 3.0, -7.25, 1e-30]


def _fallbacks(g: L.LoweredGraph) -> list[object]:
    return [op.kernel for op in g.operations if isinstance(op, L.ExternKernel) and op.fallback]


def _exact(ir, fn, *args, zero_sign=True):
    """Lower fn natively and require the evaluator's results to equal eager's exactly: same
    dtypes, same values, NaN where eager has NaN, and (with `zero_sign`) the same sign of every
    zero."""
    g = ir.lower(fn, *args)
    assert _fallbacks(g) == []
    got, want = ir.evaluate(g, list(args)), list(fn(*args))
    assert len(got) == len(want)
    for a, b in zip(got, want, strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape
        torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True)
        if zero_sign and b.is_floating_point():
            assert torch.equal(torch.signbit(a[a == 0]), torch.signbit(b[b == 0])), "sign of a zero differs"
    return g


def _grid(dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    """Every pair of EDGES: a as rows, b as columns (b read through a transposed view)."""
    a = torch.tensor(EDGES, dtype=dtype)[:, None].expand(len(EDGES), len(EDGES)).contiguous()
    b = torch.tensor(EDGES, dtype=dtype)[None, :].expand(len(EDGES), len(EDGES)).t().contiguous().t()
    return a, b


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_signbit_reads_negative_zero(ir, dtype):
    x = torch.tensor(EDGES, dtype=dtype)
    _exact(ir, lambda x: (torch.signbit(x),), x)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.bool])
def test_signbit_integer_and_bool(ir, dtype):
    x = torch.tensor([-3, 0, 5, -1, 1], dtype=torch.int64).to(dtype)
    _exact(ir, lambda x: (torch.signbit(x),), x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_copysign_takes_the_sign_of_negative_zero(ir, dtype):
    a, b = _grid(dtype)
    _exact(ir, lambda a, b: (torch.copysign(a, b),), a, b)


def test_copysign_scalar_and_integer_promotion(ir):
    a = torch.tensor([-3, 0, 4, 7], dtype=torch.int32)
    b = torch.tensor([0.0, -0.0, -2.0, 5.0])
    _exact(ir, lambda a, b: (torch.copysign(a, b), torch.copysign(b, -0.0), torch.copysign(a, 2)), a, b)
    i = torch.tensor([[-2, 3], [0, -5]])
    _exact(ir, lambda i, j: (torch.copysign(i, j),), i, i.t())


@pytest.mark.parametrize("op", [torch.fmax, torch.fmin])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_fmax_fmin_ignore_nan(ir, op, dtype):
    # which zero fmax(0.0, -0.0) returns is unspecified (C's fmax; eager's vectorised bf16 path
    # and its scalar path differ), so the sign of zeros is not compared here
    a, b = _grid(dtype)
    _exact(ir, lambda a, b: (op(a, b),), a, b, zero_sign=False)


@pytest.mark.parametrize("op", [torch.fmax, torch.fmin])
def test_fmax_fmin_integer_bool_and_promotion(ir, op):
    i = torch.tensor([[-3, 7], [0, 2]], dtype=torch.int32)
    t = torch.tensor([[True, False], [False, True]])
    h = torch.tensor([[NAN, 1.5], [-0.5, NAN]], dtype=torch.float16)
    _exact(ir, lambda i, t, h: (op(i, i.t()), op(t, t.t()), op(i, h), op(h, t)), i, t, h)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_hypot_edges_and_no_overflow(ir, dtype):
    a, b = _grid(dtype)
    g = ir.lower(lambda a, b: (torch.hypot(a, b),), a, b)
    assert _fallbacks(g) == []
    ir.assert_same(ir.evaluate(g, [a, b]), [torch.hypot(a, b)], rtol=2e-7 if dtype == torch.float32 else 1e-15)
    big = torch.tensor([3e38, 1e-30, 0.0], dtype=dtype) if dtype == torch.float32 else \
        torch.tensor([1e300, 1e-300, 0.0], dtype=dtype)
    got = ir.evaluate(ir.lower(lambda x, y: (torch.hypot(x, y),), big, big.flip(0)), [big, big.flip(0)])[0]
    want = torch.hypot(big, big.flip(0))
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got, want, rtol=1e-6, atol=0)


@pytest.mark.parametrize("xdtype", [torch.float32, torch.float64, torch.bfloat16, torch.int64, torch.bool])
def test_ldexp_multiplies_by_a_power_of_two(ir, xdtype):
    x = torch.tensor([1.0, -3.0, 0.75, -0.0, 5.0, 1.0]).to(xdtype)
    e = torch.tensor([0, 3, -2, 7, 20, -149], dtype=torch.int32)
    _exact(ir, lambda x, e: (torch.ldexp(x, e),), x, e)


@pytest.mark.parametrize("base", [2, 8, 1, 0, -1])
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int8, torch.uint8])
def test_integer_pow_of_a_scalar_base(ir, base, dtype):
    # torch 2.11 differentiates ldexp as grad * pow(2, e) in int64: a negative exponent gives 0,
    # an exponent of the dtype's width or more wraps to 0 (2^k: width / k)
    vals = [0, 1, 2, 3, 5, 7, 8, 9, 15, 31, 32, 62, 63, 64, 100] + ([-1, -2, -7] if dtype.is_signed else [])
    e = torch.tensor([v for v in vals if v <= torch.iinfo(dtype).max], dtype=dtype)
    g = _exact(ir, lambda e: (torch.pow(base, e),), e)
    assert g.operations


def test_integer_pow_of_other_bases_falls_back(ir):
    g = ir.lower(lambda e: (torch.pow(3, e),), torch.tensor([1, 2], dtype=torch.int64))
    assert _fallbacks(g) == [torch.ops.aten.pow.Scalar]


@pytest.mark.parametrize("decimals", [0, 1, 2, 3, -1, -2, -3])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
def test_round_decimals_matches_eager_bit_for_bit(ir, decimals, dtype):
    torch.manual_seed(decimals + 10)
    ties = [0.5, 1.5, 2.5, -0.5, -2.5, 0.125, 0.375, 1250.0, 1350.0, 15.0, 25.0, -0.0, INF, NAN]
    x = torch.cat([torch.tensor(ties), torch.randn(40) * 300, torch.rand(20)]).to(dtype)
    _exact(ir, lambda x: (torch.round(x, decimals=decimals),), x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.int32, torch.int64, torch.bool])
def test_angle_of_real_numbers(ir, dtype):
    x = torch.tensor(EDGES).to(dtype) if dtype.is_floating_point else torch.tensor([-4, 0, 3, -1]).to(dtype)
    _exact(ir, lambda x: (torch.angle(x),), x)


# -- as_strided_scatter ------------------------------------------------------------------------


AS_STRIDED = {
    "rows": ((2, 3), (4, 1), 0),
    "every_other": ((3, 2), (4, 2), 1),
    "transposed": ((3, 4), (1, 4), 0),
    "tail": ((5,), (2,), 7),
}


@pytest.mark.parametrize("name", sorted(AS_STRIDED))
def test_as_strided_scatter_writes_storage_positions(ir, name):
    size, stride, offset = AS_STRIDED[name]
    torch.manual_seed(1)
    x = torch.randn(4, 4)
    src = torch.randn(*size)
    g = _exact(ir, lambda x, s: (torch.as_strided_scatter(x, s, size, stride, offset),), x, src)
    assert any(isinstance(op, L.Scatter) for op in g.operations)


def test_as_strided_scatter_into_a_transposed_input_uses_its_storage_order(ir):
    x = torch.randn(4, 3).t()  # clone keeps this layout: the view addresses the clone's storage
    src = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    _exact(ir, lambda x, s: (torch.as_strided_scatter(x, s, (2, 3), (1, 4), 1),), x, src)


def test_as_strided_scatter_integer_and_bool(ir):
    x = torch.arange(12, dtype=torch.int32).reshape(3, 4)
    _exact(ir, lambda x: (torch.as_strided_scatter(x, -x[:2, :2], (2, 2), (1, 4), 2),), x)
    t = torch.zeros(3, 4, dtype=torch.bool)
    _exact(ir, lambda t: (torch.as_strided_scatter(t, ~t[0], (4,), (3,), 0),), t)


# -- composites decomposed by coil's table -----------------------------------------------------------


COMPOSITES = {
    "repeat": lambda x: (x.repeat(2, 1, 3),),
    "repeat_new_dims": lambda x: (x.repeat(2, 1, 1, 2),),
    "tile": lambda x: (torch.tile(x, (2,)),),
    "group_norm": lambda x: torch.ops.aten.native_group_norm(x, x[0, :, 0], x[1, :, 1], 2, 4, 3, 2, 1e-5),
    "elu_alpha_scale_input_scale": lambda x: (aten.elu(x, 0.7, 1.3, 2.0),),
    "selu": lambda x: (torch.selu(x),),
    "celu": lambda x: (torch.celu(x, 0.5),),
    "narrow_copy": lambda x: (torch.narrow_copy(x, 1, 1, 2),),
    "view_copy": lambda x: (aten.view_copy(x.contiguous(), [2, 12]),),
    "permute_copy": lambda x: (torch.permute_copy(x, (2, 0, 1)),),
    "unbind_copy": lambda x: tuple(torch.unbind_copy(x, 1)),
    "as_strided_copy": lambda x: (torch.as_strided_copy(x, (3, 2), (2, 5), 1),),
    "dist": lambda x: (torch.dist(x[0], x[1]), torch.dist(x[0], x[1], 1.5)),
}


@pytest.mark.parametrize("name", sorted(COMPOSITES))
def test_decomposed_composites_are_native(ir, name):
    torch.manual_seed(2)
    x = torch.randn(3, 4, 2).permute(0, 1, 2) if name != "group_norm" else torch.randn(2, 4, 3)
    x = x.transpose(0, 1).contiguous().transpose(0, 1) if name not in ("view_copy", "group_norm") else x
    fn = COMPOSITES[name]
    g = ir.lower(fn, x)
    assert _fallbacks(g) == []
    ir.assert_same(ir.evaluate(g, [x]), list(fn(x)), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.int64, torch.bool])
def test_repeat_of_integer_and_bool(ir, dtype):
    x = torch.tensor([[1, 0, 3]]).to(dtype)
    _exact(ir, lambda x: (x.repeat(3, 2),), x)
