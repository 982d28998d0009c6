"""Lowerings added for OpInfo coverage: index remaps, scatters into slices and
diagonals, index/scatter reductions, allocations, float arange, special functions and random
distributions.

Each is checked structurally (native IR, no ExternKernel fallback) and, except the random ops,
semantically: the brute-force evaluator of conftest.py runs the IR against eager PyTorch,
with non-contiguous inputs where the op reads tensors.
"""

from __future__ import annotations

import math

import coil.lowering_ir as L
import pytest
import torch

aten = torch.ops.aten


def _fallbacks(g: L.LoweredGraph) -> list[object]:
    return [op.kernel for op in g.operations if isinstance(op, L.ExternKernel) and op.fallback]


def _native(ir, fn, *args, decompose=True, rtol=1e-5, atol=1e-6):
    """Lower fn, assert no fallback, and compare the IR's result with eager."""
    g = ir.lower(fn, *args, decompose=decompose)
    assert _fallbacks(g) == []
    ir.assert_same(ir.evaluate(g, list(args)), list(fn(*args)), rtol=rtol, atol=atol)
    return g


def _nc(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """A non-contiguous tensor of `shape` (a transposed view of a bigger buffer)."""
    base = torch.randn(*reversed(shape), 2).to(dtype)[..., 0]
    return base.permute(*reversed(range(len(shape))))


# -- index remaps ----------------------------------------------------------------------------------


REMAPS = {
    "flip_both": lambda x, s: (torch.flip(x, (0, 1)),),
    "flip_last": lambda x, s: (torch.flip(x, (-1,)) * 2,),
    "rot90": lambda x, s: (torch.rot90(x, 1, (0, 1)),),
    "slice_scatter_step": lambda x, s: (torch.slice_scatter(x, s[:, :2], 1, 1, 5, 2),),
    "slice_scatter_negative_start": lambda x, s: (torch.slice_scatter(x, s[:2, :5], 0, -2),),
    "slice_scatter_past_end": lambda x, s: (torch.slice_scatter(x, s[:, :2], 1, 3, 100),),
    "diagonal_scatter_offset": lambda x, s: (torch.diagonal_scatter(x, s[0, :4], 1),),
    "diagonal_scatter_negative": lambda x, s: (torch.diagonal_scatter(x, s[1, :4], -1, 1, 0),),
}


@pytest.mark.parametrize("name", sorted(REMAPS))
def test_remaps_are_one_pointwise_and_match_eager(ir, name):
    torch.manual_seed(0)
    x, s = _nc(4, 5), _nc(4, 6)
    g = _native(ir, REMAPS[name], x, s)
    assert all(isinstance(op, L.Pointwise) for op in g.operations)
    assert len(g.operations) == (2 if name == "flip_last" else 1)  # flip_last: flip, then * 2


def test_flip_reads_reversed_indices(ir):
    x = torch.randn(3, 4)
    g = ir.lower(lambda x: (torch.flip(x, (1,)),), x)
    (op,) = g.operations
    (ld,) = L.loads(op.body)
    p0, p1 = (s for s in sorted(op.body.index.free_symbols, key=str))  # type: ignore[union-attr]
    assert ld.index == 4 * p0 + 3 - p1


def test_slice_scatter_reads_src_only_inside_the_slice(ir):
    x, s = torch.randn(4, 6), torch.randn(4, 2)
    g = ir.lower(lambda x, s: (torch.slice_scatter(x, s, 1, 1, 5, 2),), x, s)
    (op,) = g.operations
    src = [ld for ld in L.loads(op.body) if ld.buffer == "arg1"]
    assert len(src) == 1 and src[0].mask is not None


# -- index_reduce / scatter_reduce -------------------------------------------------------------------


@pytest.mark.parametrize("reduce", ["prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_index_reduce(ir, reduce, include_self):
    torch.manual_seed(0)
    x, s0, s1 = _nc(4, 3), _nc(3, 3), _nc(4, 3)
    i = torch.tensor([0, 2, 0])

    def fn(x, s0, s1, i):
        return (x.index_reduce(0, i, s0, reduce, include_self=include_self),
                x.index_reduce(1, i, s1, reduce, include_self=include_self))

    g = _native(ir, fn, x, s0, s1, i)
    assert {op.reduction_type for op in g.operations if isinstance(op, L.Reduction)} <= {"sum", "prod", "max", "min"}


def test_index_reduce_integer_mean_floors(ir):
    x = torch.tensor([[5, -7], [3, 2]])
    s = torch.tensor([[2, 2], [1, 1], [-4, 4]])
    i = torch.tensor([0, 0, 1])
    _native(ir, lambda x, s, i: (x.index_reduce(0, i, s, "mean"),), x, s, i)


@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
def test_scatter_reduce_with_a_smaller_index(ir, reduce):
    torch.manual_seed(0)
    x, s = _nc(4, 5), _nc(3, 5)
    idx = torch.tensor([[0, 1, 0], [3, 3, 1]])  # smaller than src in both dims

    def fn(x, s, i):
        return (x.scatter_reduce(0, i, s, reduce), x.scatter_reduce(1, i, s, reduce, include_self=False))

    _native(ir, fn, x, s, idx)


@pytest.mark.parametrize("include_self", [True, False])
def test_index_and_scatter_reduce_of_0d_tensors(ir, include_self):
    x, s = torch.tensor(2.0), torch.tensor(5.0)

    def fn(x, s, i, j):
        return (x.index_reduce(0, i, s, "prod", include_self=include_self),
                x.scatter_reduce(0, j, s, "amax", include_self=include_self))

    _native(ir, fn, x, s, torch.tensor([0]), torch.tensor(0))


@pytest.mark.parametrize("reduce", ["sum", "prod", "amax", "amin"])
def test_scatter_reduce_of_bools_is_logical(ir, reduce):
    torch.manual_seed(0)
    x, s = torch.rand(6, 5) > 0.5, torch.rand(4, 5) > 0.5
    i = torch.randint(0, 6, (4, 5))
    g = _native(ir, lambda x, s, i: (x.scatter_reduce(0, i, s, reduce), x.scatter_reduce(0, i, s, reduce, include_self=False),
                                      x.amax(1), x.amin(0)), x, s, i)
    assert {op.reduction_type for op in g.operations if isinstance(op, L.Reduction)} <= {"any", "all", "sum"}


def test_index_reduce_with_many_slices_falls_back(ir):
    from coil.lowering_ir.ops.reduce_by_index import DENSE_MAX_K

    x, s = torch.randn(4), torch.randn(DENSE_MAX_K + 1)
    i = torch.zeros(DENSE_MAX_K + 1, dtype=torch.int64)
    g = ir.lower(lambda x, s, i: (x.index_reduce(0, i, s, "amax"),), x, s, i)
    assert _fallbacks(g) == [aten.index_reduce.default]


# -- allocations and float arange ------------------------------------------------------------------


def test_empty_ops_are_native_allocations_with_eager_layout(ir):
    x = torch.randn(3, 4).t()

    def fn(x):
        return (torch.empty_like(x), torch.empty_strided((3, 4), (1, 3)), x.new_empty((2, 2)),
                torch.empty_permuted((2, 3), (1, 0)))

    g = ir.lower(fn, x)
    assert _fallbacks(g) == []
    for out, want in zip(g.outputs, fn(x), strict=True):
        assert tuple(int(s) for s in out.layout.size) == tuple(want.shape)
        assert tuple(int(s) for s in out.layout.stride) == want.stride()


def test_unread_allocation_is_dropped(ir):
    # dropout2d-style: an empty tensor only feeds the shape of a random op -> no kernel for it
    def fn(x):
        return (torch.bernoulli(torch.empty_like(x), 0.5) * x,)

    g = ir.lower(fn, torch.randn(3, 4))
    written = [b.name for op in g.operations for b in op.outputs]
    assert len([op for op in g.operations if isinstance(op, L.Pointwise)]) == 2  # bernoulli, mul
    assert len(written) == len(set(written))


def test_float_arange(ir):
    x = torch.randn(6)
    _native(ir, lambda x: (x * torch.arange(-1.5, 1.5, 0.5), torch.arange(0.0, 1.0, 0.25, dtype=torch.float64)), x)


# -- special functions -----------------------------------------------------------------------------

EDGES = [0.0, -0.0, 1.0, 2.0, -1.0, -2.5, 1e-8, 0.5, 10.0, 1.4616321, 30.5, -7.25, math.inf, -math.inf, math.nan]


def _special_input(dtype: torch.dtype) -> torch.Tensor:
    torch.manual_seed(0)
    return torch.cat([torch.tensor(EDGES, dtype=dtype), torch.rand(12, dtype=dtype) * 18 - 9])


SPECIAL = {
    "lgamma": torch.lgamma,
    "digamma": torch.digamma,
    "trigamma": lambda x: torch.polygamma(1, x),
    "polygamma2": lambda x: torch.polygamma(2, x),
    "polygamma4": lambda x: torch.polygamma(4, x),
    "i0": torch.i0,
    "i0e": torch.special.i0e,
    "i1": torch.special.i1,
    "i1e": torch.special.i1e,
    "zeta": lambda x: torch.special.zeta(x.abs() + 1.0, x),
    "mvlgamma": lambda x: torch.mvlgamma(x.abs() + 3.0, 3),
    "modified_bessel_i1": torch.special.modified_bessel_i1,
    "modified_bessel_k0": torch.special.modified_bessel_k0,
    "modified_bessel_k1": torch.special.modified_bessel_k1,
    "scaled_modified_bessel_k0": torch.special.scaled_modified_bessel_k0,
    "bessel_j0": torch.special.bessel_j0,
    "bessel_j1": torch.special.bessel_j1,
    "bessel_y0": torch.special.bessel_y0,
    "bessel_y1": torch.special.bessel_y1,
    "spherical_bessel_j0": torch.special.spherical_bessel_j0,
    "airy_ai": lambda x: torch.special.airy_ai(x * 2),  # both asymptotic branches and the series
    "erfinv": lambda x: torch.erfinv(x / 9.5),  # [-1, 1] and beyond (NaN)
    "ndtri": lambda x: torch.special.ndtri(x / 19 + 0.5),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("name", sorted(SPECIAL))
def test_special_functions_match_eager(ir, name, dtype):
    f = SPECIAL[name]
    x = _special_input(dtype)
    tol = {torch.float32: (1.3e-6, 1e-5), torch.float64: (1e-7, 1e-7)}[dtype]
    g = _native(ir, lambda x: (f(x),), x, rtol=tol[0], atol=tol[1])
    assert not any(isinstance(op, L.ExternKernel) for op in g.operations)


def test_special_functions_of_integers_compute_in_float32(ir):
    x = torch.arange(-6, 7)
    g = _native(ir, lambda x: (torch.digamma(x), torch.polygamma(1, x), torch.lgamma(x)), x,
                rtol=1.3e-6, atol=1e-5)
    assert [o.layout.dtype for o in g.outputs] == [torch.float32] * 3


def test_zeta_below_its_supported_range_is_nan_not_wrong(ir):
    from coil.lowering_ir.ops.special import ZETA_MIN_Q

    q = torch.tensor([ZETA_MIN_Q - 0.5, -3.5], dtype=torch.float64)
    g = ir.lower(lambda q: (torch.special.zeta(torch.full_like(q, 3.0), q),), q)
    got = ir.evaluate(g, [q])[0]
    assert math.isnan(got[0]) and torch.isclose(got[1], torch.special.zeta(torch.tensor(3.0, dtype=torch.float64), q[1]))


# -- random distributions ------------------------------------------------------------------------


RANDOM = {
    "uniform": lambda x: (torch.ops.aten.uniform(x, -1.0, 2.0),),
    "normal_functional": lambda x: (torch.ops.aten.normal_functional(x, 1.0, 2.0),),
    "normal_tensors": lambda x: (torch.normal(x, x.abs() + 1),),
    "log_normal": lambda x: (torch.ops.aten.log_normal(x),),
    "exponential": lambda x: (torch.ops.aten.exponential(x, 2.0),),
    "cauchy": lambda x: (torch.ops.aten.cauchy(x),),
    "geometric": lambda x: (torch.ops.aten.geometric(x, 0.3),),
    "randint": lambda x: (torch.randint(3, 9, (4, 5)),),
    "randint_like": lambda x: (torch.randint_like(x, 7),),
    "random_to": lambda x: (torch.ops.aten.random.to(x, 5),),
    "rrelu_train": lambda x: torch.ops.aten.rrelu_with_noise_functional(x, torch.zeros_like(x), 0.1, 0.3, True),
}


@pytest.mark.parametrize("name", sorted(RANDOM))
def test_random_distributions_are_native_philox(ir, name):
    """Values come from coil's generator (not eager's): check the IR, not the numbers."""
    g = ir.lower(RANDOM[name], torch.randn(4, 5), decompose=False)
    assert _fallbacks(g) == []
    ops = [v for op in g.operations if isinstance(op, L.Pointwise) for v in _walk(op.body)]
    assert any(isinstance(v, L.Op) and v.name in ("rand", "randn") for v in ops)
    seeds = [op for op in g.operations if isinstance(op, L.ExternKernel)]
    assert len(seeds) == 1 and seeds[0].kernel is aten.randint.low  # the graph's one seed


def test_wide_randint_falls_back(ir):
    g = ir.lower(lambda x: (torch.randint(0, 2**40, (3,)),), torch.randn(2), decompose=False)
    assert _fallbacks(g) == [aten.randint.low]


def _walk(v):
    out = [v]
    if isinstance(v, L.Op):
        for a in v.args:
            out.extend(_walk(a))
    return out
