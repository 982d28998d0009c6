"""The IR data structures: LoweredGraph.verify, layouts, the value language."""

from __future__ import annotations

import itertools

import coil.lowering_ir as L
import pytest
import sympy
import torch

P = sympy.symbols("p0 p1 p2", integer=True, nonnegative=True)
CPU = torch.device("cpu")


def _layout(size, stride=None, dtype=torch.float32, offset=0):
    size = tuple(sympy.Integer(s) for s in size)
    stride = L.contiguous_strides(size) if stride is None else tuple(sympy.Integer(s) for s in stride)
    return L.Layout(CPU, dtype, size, stride, sympy.Integer(offset))


def _copy_op(name, src, dst, n):
    return L.Pointwise(name, (name,), dst, (sympy.Integer(n),), L.load(src, [P[0]]), P[0])


# -- LoweredGraph.verify ---------------------------------------------------------------------------


def _bufs():
    arg = L.InputBuffer("arg0", _layout((4,)), 0)
    b1 = L.ComputedBuffer("buf1", _layout((4,)))
    b2 = L.ComputedBuffer("buf2", _layout((4,)))
    return arg, b1, b2


def test_verify_accepts_a_well_ordered_graph():
    arg, b1, b2 = _bufs()
    ops = [_copy_op("op1", arg, b1, 4), _copy_op("op2", b1, b2, 4)]
    g = L.LoweredGraph("g", [arg], [], ops, [b2])
    g.verify()
    assert set(g.buffers()) == {"arg0", "buf1", "buf2"}


def test_verify_catches_read_before_write():
    arg, b1, b2 = _bufs()
    ops = [_copy_op("op2", b1, b2, 4), _copy_op("op1", arg, b1, 4)]  # op2 reads buf1 too early
    g = L.LoweredGraph("g", [arg], [], ops, [b2])
    with pytest.raises(ValueError, match=r"op2 .*reads buf1 before it is written"):
        g.verify()


def test_verify_catches_read_of_unknown_buffer_through_a_view_in_an_extern():
    arg, b1, _ = _bufs()
    ghost = L.ComputedBuffer("ghost", _layout((2, 2)))
    view = L.ReinterpretView("view9", ghost, _layout((2, 2), (1, 2)))
    ext = L.ExternKernel("op3", ("mm",), torch.ops.aten.mm.default, (view, view), {}, b1, False)
    assert ext.reads() == ["ghost"]
    g = L.LoweredGraph("g", [arg], [], [ext], [b1])
    with pytest.raises(ValueError, match="reads ghost"):
        g.verify()


def test_verify_catches_two_writers_and_writing_an_input():
    arg, b1, _ = _bufs()
    g = L.LoweredGraph("g", [arg], [], [_copy_op("op1", arg, b1, 4), _copy_op("op2", arg, b1, 4)], [b1])
    with pytest.raises(ValueError, match="op2 writes buf1"):
        g.verify()
    out_is_input = L.Pointwise("op5", (), arg, (sympy.Integer(4),), L.Constant(1.0, torch.float32), P[0])
    g = L.LoweredGraph("g", [arg], [], [out_is_input], [arg])
    with pytest.raises(ValueError, match="arg0"):
        g.verify()


def test_verify_accepts_constants_and_symbol_inputs():
    const = L.ConstantBuffer("const0", _layout((4,)), torch.ones(4))
    b1 = L.ComputedBuffer("buf1", _layout((4,)))
    s = L.SymbolInput(0, sympy.Symbol("s0", integer=True, positive=True))
    g = L.LoweredGraph("g", [s, None], [const], [_copy_op("op1", const, b1, 4)], [b1])
    g.verify()
    assert set(g.buffers()) == {"const0", "buf1"}


def test_lower_result_always_verifies(ir):
    def fn(x, w):
        y = torch.softmax(x @ w, -1)
        return (y.t(), torch.cumsum(y, 0), y.sum())

    g = ir.lower(fn, torch.randn(3, 4), torch.randn(4, 5))
    g.verify()
    names = [b.name for op in g.operations for b in op.outputs]
    assert len(names) == len(set(names))


def test_graph_with_constant_attribute(ir):
    from torch._subclasses.fake_tensor import FakeTensorMode

    scale = torch.arange(4.0)
    root = torch.nn.Module()
    root.register_buffer("scale", scale)
    graph = torch.fx.Graph()
    x_node = graph.placeholder("x")
    c_node = graph.get_attr("scale")
    mul = graph.call_function(torch.ops.aten.mul.Tensor, (x_node, c_node))
    graph.output((mul,))
    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        fx_ = mode.from_tensor(torch.empty(2, 4))
        fc = mode.from_tensor(scale)
        x_node.meta["val"], c_node.meta["val"] = fx_, fc
        mul.meta["val"] = fx_ * fc
    gm = torch.fx.GraphModule(root, graph)
    g = L.lower(gm)
    assert [c.name for c in g.constants] == ["const0"] and g.constants[0].value is scale
    assert g.operations[0].reads() == ["arg0", "const0"]
    x = torch.randn(2, 4)
    ir.assert_same(ir.evaluate(g, [x]), [x * scale])


def test_opaque_object_input_is_passed_through_not_baked_in():
    """A placeholder holding an opaque object (a FakeScriptObject while tracing: a DTensor's
    DeviceMesh) becomes an ObjectInput, and an output returning it is that input, not the
    tracing-time object."""
    from torch._library.fake_class_registry import FakeScriptObject
    from torch._subclasses.fake_tensor import FakeTensorMode

    graph = torch.fx.Graph()
    x_node, obj_node = graph.placeholder("x"), graph.placeholder("mesh")
    mul = graph.call_function(torch.ops.aten.mul.Tensor, (x_node, 2.0))
    graph.output((mul, obj_node))
    with FakeTensorMode() as mode:
        x_node.meta["val"] = mode.from_tensor(torch.empty(4))
        mul.meta["val"] = x_node.meta["val"] * 2.0
    obj_node.meta["val"] = FakeScriptObject(object(), "DeviceMesh", None)
    g = L.lower(torch.fx.GraphModule(torch.nn.Module(), graph))
    assert g.inputs[1] == L.ObjectInput(1, "obj1")
    assert g.outputs[1] is g.inputs[1]
    g.verify()


# -- layouts ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("shape", "perm", "slc"),
    [((2, 3, 4), (0, 1, 2), None), ((2, 3, 4), (2, 0, 1), None), ((5, 6), (1, 0), (1, 4)), ((3, 1, 4), (1, 2, 0), (0, 1))],
)
def test_layout_index_and_extent_match_torch_brute_force(shape, perm, slc):
    base = torch.arange(torch.Size(shape).numel(), dtype=torch.float32).reshape(shape)
    t = base.permute(perm)
    if slc is not None:
        t = t[slc[0]:slc[1]]
    lay = L.Layout.from_tensor(t)
    flat = base.reshape(-1)
    for pos in itertools.product(*[range(s) for s in t.shape]):
        idx = lay.index([sympy.Integer(i) for i in pos])
        assert flat[int(idx)] == t[pos]
    # extent: one past the largest element reached
    reach = max(
        (t.storage_offset() + sum(i * s for i, s in zip(pos, t.stride(), strict=True))
         for pos in itertools.product(*[range(s) for s in t.shape])),
        default=-1,
    )
    assert int(lay.storage_extent()) == reach + 1


def test_layout_extent_of_empty_and_expanded():
    assert _layout((0, 3)).storage_extent() == 0
    assert _layout((4, 3), (0, 1)).storage_extent() == 3
    assert _layout((), ()).numel == 1
    assert _layout((2, 5)).numel == 10


def test_layout_rejects_rank_mismatch():
    with pytest.raises(ValueError):
        L.Layout(CPU, torch.float32, (sympy.Integer(2),), (), sympy.Integer(0))
    with pytest.raises(ValueError):
        _layout((2, 3)).index([P[0]])


def test_contiguous_strides_and_as_expr():
    s = sympy.Symbol("s", integer=True, positive=True)
    assert L.contiguous_strides((2, s, 4)) == (4 * s, 4, 1)
    assert L.as_expr(3) == sympy.Integer(3)
    assert L.as_expr(s) is s
    with pytest.raises(TypeError):
        L.as_expr(1.5)


def test_buffer_nbytes_and_view_storage():
    b = L.ComputedBuffer("b", _layout((3, 4), dtype=torch.float16))
    assert b.nbytes_expr == 24
    v = L.ReinterpretView("v", b, _layout((4, 3), (1, 4), dtype=torch.float16))
    assert v.storage is b and b.storage is b
    ld = L.load(v, [P[0], P[1]])
    assert ld.buffer == "b" and ld.index == P[0] + 4 * P[1] and ld.dtype == torch.float16


# -- values ----------------------------------------------------------------------------------------


def test_op_checks_name_and_arity():
    c = L.Constant(1.0, torch.float32)
    assert L.Op("add", (c, c), torch.float32).name == "add"
    L.Op("where", (L.Constant(True, torch.bool), c, c), torch.float32)
    with pytest.raises(ValueError, match="unknown value op"):
        L.Op("frobnicate", (c,), torch.float32)
    with pytest.raises(ValueError, match="takes 2 args"):
        L.Op("add", (c,), torch.float32)
    for name, arity in L.OPS.items():
        assert arity is None or isinstance(arity, int)
        L.Op(name, tuple([c] * (arity or 1)), torch.float32)


def test_reduction_rejects_unknown_type():
    b = L.ComputedBuffer("b", _layout((2,)))
    with pytest.raises(ValueError, match="unknown reduction"):
        L.Reduction("op", (), b, (sympy.Integer(2),), (sympy.Integer(3),), "mean",
                    L.Constant(1.0, torch.float32), P[0], torch.float32)
    assert set(L.REDUCTION_TYPES) >= {"sum", "prod", "max", "min", "any", "all"}
    for rtype in L.REDUCTION_TYPES:  # every listed type is accepted
        L.Reduction("op", (), b, (sympy.Integer(2),), (sympy.Integer(3),), rtype,
                    L.Constant(1.0, torch.float32), P[0], torch.float32)


def test_loads_visits_each_load_once_in_order_and_map_indices_rebuilds():
    a = L.Load("a", P[0], torch.float32)
    b = L.Load("b", 2 * P[0], torch.float32)
    shared = L.Op("mul", (a, b), torch.float32)
    body = L.Op("add", (shared, L.Op("exp", (shared,), torch.float32)), torch.float32)
    assert L.loads(body) == [a, b]
    iv = L.IndexValue(P[0] + 1, torch.int64)
    body2 = L.Op("add", (body, L.Op("cast", (iv,), torch.float32)), torch.float32)
    moved = L.map_indices(body2, lambda e: e.xreplace({P[0]: P[1] + 3}))
    assert [ld.index for ld in L.loads(moved)] == [P[1] + 3, 2 * (P[1] + 3)]
    assert moved.args[1].args[0].index == P[1] + 4
    # sharing is preserved (a DAG stays a DAG)
    left = moved.args[0]
    assert left.args[0] is left.args[1].args[0]
    # the original is untouched
    assert L.loads(body) == [a, b]


def test_operation_reads_lists_storage_names_once():
    arg, b1, b2 = _bufs()
    body = L.Op("add", (L.load(arg, [P[0]]), L.load(arg, [3 - P[0]])), torch.float32)
    op = L.Pointwise("op", (), b2, (sympy.Integer(4),), body, P[0])
    assert op.reads() == ["arg0"]
    assert op.outputs == [b2]
    ext = L.ExternKernel("e", (), torch.ops.aten.add.Tensor, ([arg, (b1,)],), {"other": b1}, (b2, None), True)
    assert ext.reads() == ["arg0", "buf1"]
    assert ext.outputs == [b2]
