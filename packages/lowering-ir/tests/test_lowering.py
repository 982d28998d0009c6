"""lower(gm): views, pointwise math and type promotion, reductions, externs and fallbacks.

Every result is checked twice: structurally (which IR nodes, which ranges, which layouts) and
semantically, by running the IR with the brute-force evaluator of conftest.py against eager.
"""

from __future__ import annotations

import coil.lowering_ir as L
import pytest
import sympy
import torch

aten = torch.ops.aten


def _ints(xs):
    return tuple(int(x) for x in xs)


# -- views ---------------------------------------------------------------------------------------


VIEW_CASES = {
    "permute": lambda x: (x.permute(2, 0, 1),),
    "transpose": lambda x: (x.transpose(0, 2),),
    "expand": lambda x: (x[:, :1, :].expand(2, 5, 4),),
    "slice": lambda x: (x[:, 1:3, ::2],),
    "select": lambda x: (x[1], x[:, 2]),
    "chain": lambda x: (x.permute(1, 0, 2)[1:, 0].unsqueeze(0).expand(3, 2, 4),),
    "diagonal": lambda x: (x[0, :, :3].diagonal(),),
}


@pytest.mark.parametrize("name", sorted(VIEW_CASES))
def test_views_become_reinterpret_views_with_eager_layout(ir, name):
    fn = VIEW_CASES[name]
    x = torch.randn(2, 3, 4)
    g = ir.lower(fn, x)
    want = fn(x)
    assert g.operations == []  # a pure view graph computes nothing
    for out, w in zip(g.outputs, want, strict=True):
        assert isinstance(out, L.ReinterpretView)
        assert out.storage is g.inputs[0]
        # the layout of the view is exactly the eager one (sizes, strides, storage offset)
        assert _ints(out.layout.size) == tuple(w.shape)
        assert _ints(out.layout.stride) == w.stride()
        assert int(out.layout.offset) == w.storage_offset()
        assert out in g.views
    ir.assert_same(ir.evaluate(g, [x]), list(want))


def test_view_of_computed_buffer_reads_through_strides(ir, monkeypatch):
    def fn(x):
        y = x * 2
        return (y.t()[1:] + 1,)

    monkeypatch.setenv("COIL_INLINE", "0")  # the transposed read would take y's body (test_inline.py)
    x = torch.randn(3, 4)
    g = ir.lower(fn, x)
    pw = [op for op in g.operations if isinstance(op, L.Pointwise)]
    assert len(pw) == 2
    second = pw[1]
    (ld,) = L.loads(second.body)
    assert ld.buffer == pw[0].output.name  # reads the producer's storage, through the view
    p0, p1 = sympy.symbols("p0 p1", integer=True, nonnegative=True)
    # y.t()[1:][i, j] == y[j, i + 1] -> storage index (i + 1) + 4 * j
    assert sympy.expand(ld.index - (p0 + 1 + 4 * p1)) == 0
    ir.assert_same(ir.evaluate(g, [x]), list(fn(x)))


def test_pointwise_output_keeps_eager_strides_of_permuted_input(ir):
    def fn(x):
        return (x.permute(1, 0, 2) * 3,)

    x = torch.randn(2, 3, 4)
    g = ir.lower(fn, x)
    (out,) = g.outputs
    want = fn(x)[0]
    assert _ints(out.layout.stride) == want.stride()
    assert want.stride() != torch.empty(want.shape).stride()  # the case is really non-contiguous
    ir.assert_same(ir.evaluate(g, [x]), [want])


def test_input_with_storage_offset_and_strides(ir):
    base = torch.randn(5, 6)
    x = base[1:, 2:].t()  # offset 8, strides (1, 6)
    g = ir.lower(lambda t: (t + 1, t[1]), x)
    assert _ints(g.inputs[0].layout.stride) == x.stride()
    ir.assert_same(ir.evaluate(g, [x]), [x + 1, x[1]])


# -- pointwise and type promotion ------------------------------------------------------------------


def test_int_plus_float_promotes_to_float(ir):
    def fn(i, f):
        return (i + f, i * 2.5, i + 3, f + True)

    i = torch.randint(-5, 5, (3, 4))
    f = torch.randn(3, 4)
    g = ir.lower(fn, i, f)
    want = fn(i, f)
    got_dtypes = [o.layout.dtype for o in g.outputs]
    assert got_dtypes == [w.dtype for w in want] == [torch.float32, torch.float32, torch.int64, torch.float32]
    first = g.operations[0]
    assert isinstance(first, L.Pointwise)
    # the int operand is converted to float32 inside the body
    casts = [v for v in _walk(first.body) if isinstance(v, L.Op) and v.name == "cast"]
    assert any(c.dtype == torch.float32 and c.args[0].dtype == torch.int64 for c in casts)
    ir.assert_same(ir.evaluate(g, [i, f]), list(want))


def _walk(v):
    out = [v]
    if isinstance(v, L.Op):
        for a in v.args:
            out.extend(_walk(a))
    return out


def test_comparisons_give_bool_and_compare_in_promoted_type(ir):
    def fn(i, f):
        return (i > f, i == 2, f <= 0.25, i != i, i < 1.5)

    i = torch.tensor([[0, 1, 2, 3]])
    f = torch.tensor([0.5, 1.0, 2.5, -1.0])
    g = ir.lower(fn, i, f)
    want = fn(i, f)
    assert all(o.layout.dtype == torch.bool for o in g.outputs)
    # int 1 < 1.5 must be decided in float (int comparison would truncate 1.5 to 1)
    last = next(op for op in g.operations if op.output is g.outputs[-1])
    assert last.body.name == "lt" and last.body.args[1].dtype == torch.float32
    ir.assert_same(ir.evaluate(g, [i, f]), list(want))


def test_where_promotes_branches_and_broadcasts(ir):
    def fn(c, i, f):
        return (torch.where(c > 0, i, f), torch.where(c > 0, f, 0.0), torch.where(c > 0, i, 7))

    c = torch.randn(3, 4)
    i = torch.randint(-9, 9, (4,))
    f = torch.randn(3, 1)
    g = ir.lower(fn, c, i, f)
    want = fn(c, i, f)
    assert [o.layout.dtype for o in g.outputs] == [w.dtype for w in want]
    ir.assert_same(ir.evaluate(g, [c, i, f]), list(want))


def test_broadcast_reads_size_one_dims_at_zero(ir):
    a = torch.randn(3, 1)
    b = torch.randn(4)
    g = ir.lower(lambda a, b: (a - b,), a, b)
    (op,) = g.operations
    idx = {ld.buffer: ld.index for ld in L.loads(op.body)}
    p0, p1 = sympy.symbols("p0 p1", integer=True, nonnegative=True)
    assert idx["arg0"] == p0
    assert idx["arg1"] == p1
    ir.assert_same(ir.evaluate(g, [a, b]), [a - b])


UNARY_BINARY = {
    "math": lambda x, y: (x.exp(), x.abs().sqrt(), x.sigmoid(), x.tanh(), torch.maximum(x, y), x.neg(), x.sin()),
    "division": lambda x, y: (x / y, torch.floor_divide(x, y), torch.remainder(x, y), torch.fmod(x, y)),
    "rounding": lambda x, y: (x.floor(), x.ceil(), x.round(), x.trunc(), x.frac(), x.sign()),
    "pow": lambda x, y: (x ** 2, x ** 3, x.abs() ** 0.5, x.abs() ** -0.5, x ** -1, x.abs() ** 2.5, x ** 0),
    "clamp": lambda x, y: (x.clamp(-0.5, 0.5), torch.relu(x), x.clamp(min=y)),
    "logic": lambda x, y: (torch.logical_and(x > 0, y > 0), torch.logical_not(x > 0), x.isnan()),
}


@pytest.mark.parametrize("name", sorted(UNARY_BINARY))
def test_pointwise_ops_match_eager(ir, name):
    fn = UNARY_BINARY[name]
    torch.manual_seed(0)
    x = torch.randn(2, 5) * 3
    y = torch.randn(2, 5) + torch.sign(torch.randn(2, 5)) * 0.5
    g = ir.lower(fn, x, y)
    assert all(isinstance(op, L.Pointwise) for op in g.operations)
    ir.assert_same(ir.evaluate(g, [x, y]), list(fn(x, y)), rtol=1e-5, atol=1e-5)


def test_integer_division_ops_match_eager(ir):
    def fn(a, b):
        return (a // b, a % b, torch.fmod(a, b), torch.div(a, b, rounding_mode="trunc"), a / b, a & b, ~a)

    a = torch.tensor([7, -7, 7, -7, 6, 0])
    b = torch.tensor([2, 2, -2, -2, 3, -5])
    g = ir.lower(fn, a, b)
    ir.assert_same(ir.evaluate(g, [a, b]), list(fn(a, b)))


def test_iota_and_full(ir):
    def fn(x):
        return (x + torch.arange(4), torch.full((2, 3), 1.5) * x[0, 0])

    x = torch.randn(3, 4)
    g = ir.lower(fn, x)
    assert any(isinstance(v, L.IndexValue) for op in g.operations if isinstance(op, L.Pointwise)
               for v in _walk(op.body))
    ir.assert_same(ir.evaluate(g, [x]), list(fn(x)))


@pytest.mark.parametrize("shape", [(0, 3, 0), (0,)])
def test_log_softmax_of_an_empty_integer_tensor(ir, shape):
    # torch's decomposition pads the amax over the empty dim with full(-inf) in int64 (found by
    # the graph fuzzer; [1, 3, 0] for the first shape, [1] for the second); eager returns an
    # empty int64 tensor
    x = torch.empty(*shape, dtype=torch.int64)
    g = ir.lower(lambda t: (torch.log_softmax(t, dim=0),), x)
    ir.assert_same(ir.evaluate(g, [x]), [torch.log_softmax(x, dim=0)])


def test_integer_fills_of_inf_saturate_and_of_nan_fall_back(ir):
    # +-inf: the dtype's extremes (a max/min identity, as decompositions mean them); NaN: ATen's
    # full, which raises as eager's does
    x = torch.zeros(2, dtype=torch.int32)
    g = ir.lower(lambda t: (torch.full((2,), float("-inf"), dtype=torch.int32), torch.full((2,), float("inf"), dtype=torch.int32)), x)
    ir.assert_same(ir.evaluate(g, [x]), [torch.full((2,), -2**31, dtype=torch.int32), torch.full((2,), 2**31 - 1, dtype=torch.int32)])
    g = ir.lower(lambda t: (t + torch.full((2,), float("nan"), dtype=torch.int32),), x)
    assert [op.kernel for op in g.operations if isinstance(op, L.ExternKernel) and op.fallback] == \
        [torch.ops.aten.full.default]
    with pytest.raises(RuntimeError):
        ir.evaluate(g, [x])


def test_half_inputs_compute_and_store_half(ir):
    x = torch.randn(3, 4).half()
    g = ir.lower(lambda x: (x * 2 + 1, x.float()), x)
    assert [o.layout.dtype for o in g.outputs] == [torch.float16, torch.float32]
    ir.assert_same(ir.evaluate(g, [x]), [x * 2 + 1, x.float()], rtol=1e-3, atol=1e-3)


# -- reductions ------------------------------------------------------------------------------------


def _reductions(g):
    return [op for op in g.operations if isinstance(op, L.Reduction)]


@pytest.mark.parametrize(
    ("dims", "keepdim"), [((1,), False), ((0,), False), ((0, 2), False), ((2,), True), ((-1, 0), True)]
)
def test_sum_is_one_reduction_with_right_ranges(ir, dims, keepdim):
    x = torch.randn(2, 3, 4)

    def fn(x):
        return (x.sum(dims, keepdim=keepdim),)

    g = ir.lower(fn, x)
    (red,) = _reductions(g)
    want = fn(x)[0]
    norm = sorted(d % 3 for d in dims)
    assert red.reduction_type == "sum"
    assert _ints(red.ranges) == tuple(want.shape)
    assert _ints(red.reduction_ranges) == tuple(x.shape[d] for d in norm)
    assert red.output is g.outputs[0]
    ir.assert_same(ir.evaluate(g, [x]), [want])


def test_amax_amin_keepdim(ir):
    def fn(x):
        return (x.amax(1), x.amin(0, keepdim=True), x.amax((0, 1)))

    x = torch.randn(3, 5)
    g = ir.lower(fn, x)
    reds = _reductions(g)
    assert [r.reduction_type for r in reds] == ["max", "min", "max"]
    assert [_ints(r.reduction_ranges) for r in reds] == [(5,), (3,), (3, 5)]
    assert [_ints(r.ranges) for r in reds] == [(3,), (1, 5), ()]
    ir.assert_same(ir.evaluate(g, [x]), list(fn(x)))


def test_var_mean_is_two_sum_reductions_in_one_graph(ir):
    def fn(x):
        return torch.var_mean(x, 1)

    x = torch.randn(3, 6) + 100.0  # large mean: the centred formula keeps precision
    gm = ir.trace(fn, x)
    assert aten.var_mean.correction in ir.targets(gm)  # kept whole by coil's table
    g = L.lower(gm)
    reds = _reductions(g)
    assert [r.reduction_type for r in reds] == ["sum", "sum"]
    assert all(_ints(r.ranges) == (3,) and _ints(r.reduction_ranges) == (6,) for r in reds)
    # the second pass reads the mean (centred squares)
    mean_buf = g.outputs[1].name
    assert mean_buf in reds[1].reads()
    ir.assert_same(ir.evaluate(g, [x]), list(fn(x)), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("correction", [0, 1, 2])
def test_var_std_corrections(ir, correction):
    def fn(x):
        return (torch.var(x, 0, correction=correction), torch.std(x, (0, 1), correction=correction, keepdim=True))

    x = torch.randn(4, 3)
    g = ir.lower(fn, x)
    ir.assert_same(ir.evaluate(g, [x]), list(fn(x)), rtol=1e-4, atol=1e-5)


def test_integer_and_bool_reductions(ir):
    def fn(i, x):
        return (i.sum(1), (x > 0).sum(0), (x > 0).any(1), (x > -1).all(), i.prod(0))

    i = torch.randint(-3, 4, (3, 4), dtype=torch.int32)
    x = torch.randn(3, 4)
    g = ir.lower(fn, i, x)
    want = fn(i, x)
    assert [o.layout.dtype for o in g.outputs] == [w.dtype for w in want]
    ir.assert_same(ir.evaluate(g, [i, x]), list(want))


def test_half_sum_accumulates_in_float32(ir):
    x = torch.full((2, 300), 1.0 / 3).half()
    g = ir.lower(lambda x: (x.sum(1),), x)
    (red,) = _reductions(g)
    assert red.acc_dtype == torch.float32
    assert red.output.layout.dtype == torch.float16
    ir.assert_same(ir.evaluate(g, [x]), [x.sum(1)], rtol=1e-3, atol=1e-2)


def test_mean_of_half_without_decomposition_does_not_overflow(ir):
    x = torch.full((2, 1000), 100.0, dtype=torch.float16)
    gm = ir.trace(lambda x: (x.mean(1),), x, decompose=False)
    assert aten.mean.dim in ir.targets(gm)  # reaches coil's own mean lowering
    g = L.lower(gm)
    ir.assert_same(ir.evaluate(g, [x]), [x.mean(1)], rtol=1e-3, atol=1e-2)


def test_mean_float32_without_decomposition(ir):
    x = torch.randn(3, 5)
    gm = ir.trace(lambda x: (x.mean(1), x.mean()), x, decompose=False)
    assert aten.mean.dim in ir.targets(gm)
    g = L.lower(gm)
    ir.assert_same(ir.evaluate(g, [x]), [x.mean(1), x.mean()])


def test_softmax_and_layer_norm_lower_to_native_reductions(ir):
    def fn(x, w):
        return (torch.softmax(x, -1), torch.nn.functional.layer_norm(x, (5,), w, w))

    x = torch.randn(3, 5)
    w = torch.randn(5)
    g = ir.lower(fn, x, w)
    assert not any(isinstance(op, L.ExternKernel) for op in g.operations)
    assert {r.reduction_type for r in _reductions(g)} == {"max", "sum"}
    ir.assert_same(ir.evaluate(g, [x, w]), list(fn(x, w)), rtol=1e-4, atol=1e-5)


# -- externs and fallbacks -------------------------------------------------------------------------


def test_op_without_lowering_is_an_aten_fallback(ir):
    def fn(seq, v):
        return (torch.searchsorted(seq, v) * 2,)

    assert L.lowering_for(aten.searchsorted.Tensor) is None
    seq = torch.tensor([-1.0, 0.0, 0.5, 2.0])
    v = torch.randn(3, 5)
    g = ir.lower(fn, seq, v)
    ext = [op for op in g.operations if isinstance(op, L.ExternKernel)]
    assert len(ext) == 1
    assert ext[0].kernel is aten.searchsorted.Tensor
    assert ext[0].fallback is True
    assert ext[0].reads() == ["arg0", "arg1"]
    assert isinstance(ext[0].results, L.ComputedBuffer)
    assert _ints(ext[0].results.layout.size) == (3, 5)
    assert ext[0].results.layout.dtype == torch.int64
    ir.assert_same(ir.evaluate(g, [seq, v]), list(fn(seq, v)))


def test_multi_output_fallback_results_mirror_the_op(ir):
    def fn(x):
        v, i = torch.sort(x, 1)
        return (v + 1, i)

    x = torch.randn(3, 4)
    g = ir.lower(fn, x)
    (ext,) = [op for op in g.operations if isinstance(op, L.ExternKernel)]
    assert ext.fallback
    assert isinstance(ext.results, tuple) and len(ext.results) == 2
    assert [b.layout.dtype for b in ext.outputs] == [torch.float32, torch.int64]
    ir.assert_same(ir.evaluate(g, [x]), list(fn(x)))


def test_mm_is_an_intended_extern_not_a_fallback(ir):
    def fn(a, b):
        return (a @ b, torch.bmm(a.unsqueeze(0), b.unsqueeze(0)))

    a = torch.randn(3, 4)
    b = torch.randn(4, 2)
    g = ir.lower(fn, a, b)
    ext = [op for op in g.operations if isinstance(op, L.ExternKernel)]
    assert {e.kernel for e in ext} == {aten.mm.default, aten.bmm.default}
    assert all(e.fallback is False for e in ext)
    # bmm reads views of the inputs
    bmm = next(e for e in ext if e.kernel is aten.bmm.default)
    assert all(isinstance(t, L.ReinterpretView) for t in bmm.tensor_args())
    assert bmm.reads() == ["arg0", "arg1"]
    ir.assert_same(ir.evaluate(g, [a, b]), list(fn(a, b)), rtol=1e-5, atol=1e-5)


def test_copy_into_input_is_a_mutating_extern(ir):
    x = torch.randn(4)
    gm = ir.trace(lambda x: (x.mul(2),), x)  # a graph to edit: out = x * 2; copy_(x, out)
    graph = gm.graph
    out_node = next(n for n in graph.nodes if n.op == "output")
    mul = out_node.args[0][0]
    with graph.inserting_before(out_node):
        cp = graph.call_function(aten.copy_.default, (next(iter(graph.nodes)), mul))
        cp.meta["val"] = mul.meta["val"]
    out_node.args = ((mul,),)
    gm.recompile()
    g = L.lower(gm)
    (ext,) = [op for op in g.operations if isinstance(op, L.ExternKernel)]
    assert ext.kernel is aten.copy_.default
    assert ext.mutates == ("arg0",)
    assert ext.outputs == []
    before = x.clone()
    got = ir.evaluate(g, [x])
    torch.testing.assert_close(got[0], before * 2)
    torch.testing.assert_close(x, before * 2)  # the input was written in place


def test_custom_op_falls_back_then_lowering_paths(ir):
    """No lowering -> fallback; a lowering raising Unsupported -> fallback; raising -> LoweringError."""
    lib = torch.library.Library("coiltest", "FRAGMENT")
    lib.define("twice(Tensor x) -> Tensor")
    lib.impl("twice", lambda x: x * 2, "CompositeExplicitAutograd")
    lib.impl("twice", lambda x: torch.empty_like(x), "Meta")
    op = torch.ops.coiltest.twice.default
    x = torch.randn(3)
    gm = ir.trace(lambda x: (op(x) + 1,), x)
    g = L.lower(gm)
    (ext,) = [o for o in g.operations if isinstance(o, L.ExternKernel)]
    assert ext.kernel is op and ext.fallback
    ir.assert_same(ir.evaluate(g, [x]), [x * 2 + 1])

    def unsupported(lw, node, *args, **kw):
        raise L.Unsupported("not this variant")

    def broken(lw, node, *args, **kw):
        raise RuntimeError("boom")

    try:
        L.register(op)(unsupported)
        g = L.lower(gm)
        assert any(isinstance(o, L.ExternKernel) and o.fallback for o in g.operations)
        L.register(op)(broken)
        with pytest.raises(L.LoweringError) as info:
            L.lower(gm)
        assert "boom" in str(info.value) and info.value.node == "twice"
    finally:
        L.LOWERINGS.pop(op, None)
    assert L.lowering_for(op) is None


def test_an_op_registered_at_run_time_becomes_an_intended_extern(ir):
    """register_externs: a custom op of another namespace, with optional tensors, numbers and two
    results (the shape of coil::attention), lowers to one call of itself, not a fallback."""
    lib = torch.library.Library("coiltest_extern", "FRAGMENT")
    lib.define("scaled_pair(Tensor x, Tensor? y, float s, SymInt n) -> (Tensor, Tensor)")
    lib.impl("scaled_pair", lambda x, y, s, n: (x * s + (0 if y is None else y), x.sum(-1) + n),
             "CompositeExplicitAutograd")
    lib.impl("scaled_pair", lambda x, y, s, n: (torch.empty_like(x), x.new_empty(x.shape[:-1])), "Meta")
    op = torch.ops.coiltest_extern.scaled_pair.default
    x, y = torch.randn(3, 4), torch.randn(3, 4)

    def fn(x, y):
        a, b = op(x, y, 0.5, 2)
        c, _ = op(x, None, 2.0, 0)
        return (a + 1, b, c)

    try:
        L.register_externs(op)
        g = ir.lower(fn, x, y)
        ext = [o for o in g.operations if isinstance(o, L.ExternKernel)]
        assert [e.kernel for e in ext] == [op, op] and not any(e.fallback for e in ext)
        assert isinstance(ext[0].results, tuple) and len(ext[0].results) == 2
        ir.assert_same(ir.evaluate(g, [x, y]), list(fn(x, y)))
    finally:
        L.LOWERINGS.pop(op, None)


def test_graph_returning_a_single_tensor_is_a_clear_error(ir):
    # AOTAutograd graphs return tuples; a bare output is rejected with an error naming the node
    x = torch.randn(3)
    gm = ir.trace(lambda x: x + 1, x)
    with pytest.raises(L.LoweringError, match="tuple or list"):
        L.lower(gm)


def test_scans_and_arg_reductions_match_eager(ir):
    def fn(x):
        return (torch.cumsum(x, 1), torch.cumprod(x, 0), x.argmax(1), x.argmin(0), torch.cumsum(x.t(), 1))

    x = torch.tensor([[0.5, -1.0, 2.0, 2.0], [1.5, 3.0, -2.0, 0.25], [-0.5, 3.0, 1.0, -7.0]])
    g = ir.lower(fn, x)
    ir.assert_same(ir.evaluate(g, [x]), list(fn(x)))
