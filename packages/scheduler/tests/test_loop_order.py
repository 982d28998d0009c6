"""Loop order by memory order: channels-last and permuted layouts get coalesced, fusable nests.

Each op's x loops run in the memory order of what it writes (largest store stride outermost,
stride 1 innermost); r loops keep their logical order. The brute-force helpers of conftest
check that the reordered nests and groups still do exactly what the ops do.
"""

from __future__ import annotations

import itertools

import coil.lowering_ir as L
import pytest
import sympy
import torch
from coil.scheduler import canonicalize
from coil.scheduler.canonical import memory_order

CL = torch.channels_last


def _cl(*shape: int) -> torch.Tensor:
    return torch.randn(*shape).to(memory_format=CL)


def _ops(g: L.LoweredGraph) -> list[L.Pointwise | L.Reduction]:
    return [op for op in g.operations if isinstance(op, L.Pointwise | L.Reduction)]


def _kernels(s):
    """The schedule's kernels but 0-d ones (relu's scalar 0 is a kernel of its own without inlining)."""
    return [k for k in s.kernels() if k.x_dims or k.r_dims]


def _store_strides(nest) -> list[sympy.Expr]:
    e = sympy.expand(nest.store_index)
    return [e.coeff(v, 1) for v in nest.x_syms]


@pytest.fixture(autouse=True)
def _no_inlining(monkeypatch):
    # the groups below are about the scheduler's own loop order, not lowering's inlining
    monkeypatch.setenv("COIL_INLINE", "0")


def test_channels_last_pointwise_runs_in_memory_order(sch):
    x = _cl(2, 3, 4, 5)
    (op,) = _ops(sch.lower(lambda x: (x * 2,), x))
    assert op.store_index != sympy.Symbol("p3", integer=True, nonnegative=True)  # w is not stride 1
    nest = canonicalize(op)
    # sorted by the store's strides (n, h, w, c), the loops index memory as one: a single loop
    assert nest.reordered and [int(s) for s in nest.x_sizes] == [120]
    assert _store_strides(nest) == [1]
    assert sorted(sch.nest_trace(nest)) == sorted(sch.op_trace(op))
    stores = [st for st, _ in sch.nest_trace(nest)]
    assert stores == sorted(stores)  # consecutive iterations write consecutive addresses
    logical = canonicalize(op, "logical")  # the logical nest: c is strided
    assert not logical.reordered and len(logical.x_sizes) > 1
    assert _store_strides(logical)[-1] != 1


def test_broadcast_read_keeps_innermost_stride_one(sch):
    x, b = _cl(2, 3, 4, 5), torch.randn(3)
    op = _ops(sch.lower(lambda x, b: (x + b[None, :, None, None],), x, b))[-1]
    nest = canonicalize(op)
    # b's index uses c only: (n, h, w) merge, c cannot merge with them; c is innermost
    assert [int(s) for s in nest.x_sizes] == [40, 3]
    assert _store_strides(nest) == [3, 1]
    assert sorted(sch.nest_trace(nest)) == sorted(sch.op_trace(op))


@pytest.mark.parametrize(
    ("fn", "x"),
    [
        (lambda x: (x.relu(),), _cl(2, 3, 4, 5)),
        (lambda x: (x.permute(2, 0, 1) * 2,), torch.randn(2, 3, 4)),
        (lambda x: (x.transpose(1, 2) + 1,), torch.randn(2, 3, 4)),
        (lambda x: (x.amax(2, keepdim=True) + 1,), _cl(2, 3, 4, 5)),
        (lambda x: (x.sum((2, 3)),), _cl(2, 3, 4, 5)),
        (lambda x: (x.mean(1),), _cl(2, 3, 4, 5)),
        (lambda x: (torch.softmax(x, 1),), _cl(2, 3, 4, 5)),
        (lambda x: (x[:, :, 1:, ::2] * 3,), _cl(2, 3, 4, 5)),
    ],
    ids=["relu_cl", "permute", "transpose", "amax_cl", "pool_cl", "mean_c_cl", "softmax_c_cl", "slice_cl"],
)
def test_x_loops_follow_store_strides_and_keep_every_access(sch, fn, x):
    for op in _ops(sch.lower(fn, x)):
        nest = canonicalize(op)
        strides = _store_strides(nest)
        assert all(int(a) >= int(b) for a, b in itertools.pairwise(strides)), (op.name, strides)
        if nest.x_sizes:
            assert int(strides[-1]) == min(int(s) for s in strides)
        assert sorted(sch.nest_trace(nest)) == sorted(sch.op_trace(op)), op.name
        if isinstance(op, L.Reduction):  # r loops: same sizes as in logical order
            assert nest.r_sizes == canonicalize(op, "logical").r_sizes


def test_same_elements_same_memory_order_give_the_same_nest(sch):
    """A channels-last [N, C, H, W] op and a contiguous [N, H, W, C] one over the same memory."""
    x = _cl(2, 3, 4, 5)
    a = _ops(sch.lower(lambda x: (x * 2,), x))[0]
    b = _ops(sch.lower(lambda x: (x.permute(0, 2, 3, 1).contiguous() * 2,), x))[-1]
    na, nb = canonicalize(a), canonicalize(b)
    assert na.shape_key == nb.shape_key
    assert [ld.index for ld in na.body_loads] == [ld.index for ld in nb.body_loads]


def test_channels_last_chain_fuses_into_one_coalesced_kernel(sch):
    x, b = _cl(2, 3, 4, 5), torch.randn(3)
    s = sch.schedule(lambda x, b: ((x * 2).relu() + b[None, :, None, None],), x, b)
    (k,) = _kernels(s)
    assert [int(d) for d in k.x_dims] == [40, 3]  # innermost group dim is c: stride 1
    for m in k.members:
        assert m.order == "store"
        e = sympy.expand(m.kernel_expr(m.nest.store_index))
        assert e.coeff(sympy.Symbol("x1", integer=True, nonnegative=True), 1) == 1
    sch.check_groups(s)
    sch.check_topological(s)


def test_reduction_prologue_over_channels_last_fuses_in_logical_order(sch):
    """relu(x).mean((2, 3)) over channels-last x (ResNet's pooling): the reduction walks (n, c)
    then (h, w); relu in memory order cannot split that way, in logical order it can."""
    s = sch.schedule(lambda x: (x.relu().mean((2, 3)),), _cl(2, 3, 4, 5))
    (k,) = _kernels(s)
    assert k.is_reduction and [int(d) for d in k.r_dims] == [20]
    assert any(m.order == "logical" for m in k.members)
    sch.check_groups(s)
    sch.check_topological(s)


def test_transposed_producer_of_a_row_reduction_still_fuses(sch):
    # x.t() * 2 keeps x's strides (column-major); the sum reads it along rows: logical order fuses
    s = sch.schedule(lambda x: ((x.t() * 2).sum(1),), torch.randn(3, 5))
    assert len(_kernels(s)) == 1
    sch.check_groups(s)


def test_conversion_out_of_channels_last_fuses_with_its_producer(sch):
    s = sch.schedule(lambda x: (x.relu().contiguous(),), _cl(2, 3, 4, 5))
    (k,) = _kernels(s)
    copy = k.members[-1]
    assert not isinstance(copy.order, str)  # the copy runs in the order it reads relu's output
    assert k.stores == [copy.op.output.name] and len(k.internal) == len(k.members) - 1
    sch.check_groups(s)


@pytest.mark.parametrize("dim", [0, 1, 2])
def test_softmax_over_any_dim_fuses_in_the_reductions_visit_order(sch, dim):
    """Over an outer dim, exp(x - max) and the division run in their own memory order unless
    ordered as the reductions visit x (x loops, then the reduced dim): then all of softmax is
    one kernel, its reductions' loops the x then r of the reduced dim (visit_order.py)."""
    x = torch.randn(4, 5, 6)
    s = sch.schedule(lambda x: (x.softmax(dim),), x)
    (k,) = _kernels(s)
    assert k.is_reduction and sympy.Mul(*k.r_dims) == x.shape[dim]
    moved = [m for m in k.members if isinstance(m.op, L.Pointwise) and not isinstance(m.order, str)]
    assert bool(moved) == (dim != 2)  # the last dim's softmax fuses in the default orders
    sch.check_groups(s)
    sch.check_topological(s)


def test_visit_order_needs_a_reduction(sch):
    from coil.scheduler.visit_order import visit_orders

    ops = _ops(sch.lower(lambda x: (x.exp().sum(0),), torch.randn(4, 5)))
    pw = [o for o in ops if isinstance(o, L.Pointwise)]
    assert visit_orders(pw, {id(o): "store" for o in pw}) is None  # no reduction member
    base = {id(o): "store" for o in ops}
    got = visit_orders(ops, base)
    assert got is not None and not isinstance(got[id(pw[0])], str)  # exp follows the sum over dim 0


def test_memory_order_rules():
    a, b, c = sympy.symbols("a b c", integer=True, nonnegative=True)
    n = sympy.Integer
    assert memory_order([n(2), n(3), n(4)], [a, b, c], 12 * a + b + 3 * c) == [0, 2, 1]
    assert memory_order([n(2), n(1), n(4)], [a, b, c], a + 2 * c) == [2, 1, 0]  # size-1 loop stays put
    assert memory_order([n(2), n(3)], [a, b], 3 * a) is None            # b unused (stride 0)
    assert memory_order([n(2), n(3)], [a, b], sympy.Mod(a, 2) + b) is None  # not affine
    s0, s1 = sympy.symbols("s0 s1", integer=True, positive=True)
    assert memory_order([s0, s1], [a, b], a + s0 * b) == [1, 0]          # s0 >= 1: decidable
    assert memory_order([s0, s1], [a, b], s1 * a + s0 * b) is None       # s0 vs s1: undecidable
    n_, c_, h_, w_ = sympy.symbols("n c h w", integer=True, nonnegative=True)
    s2 = sympy.Symbol("s2", integer=True, positive=True)  # channels-last [N, C, H, W], symbolic
    index = s0 * s1 * s2 * n_ + c_ + s0 * s1 * h_ + s1 * w_  # strides (H*W*C, 1, W*C, C)
    assert memory_order([n(2), s1, s2, s0], [n_, c_, h_, w_], index) == [0, 2, 3, 1]
