"""The decomposition table, the lowering registry and the public API."""

from __future__ import annotations

import coil.lowering_ir as L
import torch

aten = torch.ops.aten
F = torch.nn.functional


def test_public_api_snapshot():
    assert sorted(L.__all__) == [
        "Buffer",
        "ComputedBuffer",
        "Constant",
        "ConstantBuffer",
        "Expr",
        "ExternKernel",
        "IndexValue",
        "InputBuffer",
        "LOWERINGS",
        "Layout",
        "Load",
        "LoweredGraph",
        "LoweringError",
        "OPS",
        "ObjectInput",
        "Op",
        "Operation",
        "Pointwise",
        "REDUCTION_TYPES",
        "Reduction",
        "ReinterpretView",
        "Scatter",
        "SplitRule",
        "SymbolBinding",
        "SymbolInput",
        "TensorRef",
        "Unsupported",
        "Value",
        "as_expr",
        "contiguous_strides",
        "decomposition_table",
        "load",
        "loads",
        "lower",
        "lowering_for",
        "map_indices",
        "register",
        "register_externs",
        "registered_ops",
        "used_symbols",
    ]
    for name in L.__all__:
        assert hasattr(L, name), name


# -- decompositions --------------------------------------------------------------------------------


def test_table_decomposes_composites_and_keeps_var_mean_and_addmm_whole():
    t = L.decomposition_table()
    for op in (aten.native_layer_norm.default, aten._softmax.default, aten.gelu.default,
               aten._log_softmax.default, aten.silu.default):
        assert op in t, op
    # addmm stays an extern GEMM: its decomposition upcasts half-precision operands
    for op in (aten.var_mean.correction, aten.var.correction, aten.std.correction, aten.addmm.default):
        assert op not in t, op
    assert L.decomposition_table() is not t  # a fresh dict each call
    t.clear()
    assert aten.gelu.default in L.decomposition_table()


def test_traced_composites_leave_only_lowerable_pieces(ir):
    def fn(x, w):
        return (F.layer_norm(x, (4,), w, w), torch.softmax(x, 1), F.gelu(x), F.gelu(x, approximate="tanh"))

    x, w = torch.randn(3, 4), torch.randn(4)
    gm = ir.trace(fn, x, w)
    targets = set(ir.targets(gm))
    for gone in (aten.native_layer_norm.default, aten._softmax.default, aten.gelu.default):
        assert gone not in targets
    assert aten.var_mean.correction in targets
    g = L.lower(gm)
    assert not [op for op in g.operations if isinstance(op, L.ExternKernel)]
    ir.assert_same(ir.evaluate(g, [x, w]), list(fn(x, w)), rtol=1e-4, atol=1e-5)


# -- registry --------------------------------------------------------------------------------------


def test_registry_is_large_sorted_and_consistent():
    ops = L.registered_ops()
    assert len(ops) > 300
    assert ops == sorted(ops)
    by_name = list(L.registry.LOWERINGS_BY_NAME)
    assert by_name == ["prims::fma"]
    assert len(ops) == len(L.LOWERINGS) + len(by_name)
    assert ops == sorted([str(o) for o in L.LOWERINGS] + by_name)
    for op in (aten.add.Tensor, aten.mul.Scalar, aten.sum.dim_IntList, aten.amax.default,
               aten.var_mean.correction, aten.permute.default, aten.mm.default, aten.where.self):
        assert L.lowering_for(op) is not None, op
    assert L.lowering_for(aten.searchsorted.Tensor) is None


def test_registering_a_packet_skips_out_overloads():
    out_overloads = [o for o in L.LOWERINGS if "out" in o._overloadname]
    assert out_overloads == []
    assert L.lowering_for(aten.add.out) is None
    assert L.lowering_for(aten.add.Tensor) is not None
    assert L.lowering_for(aten.add.Scalar) is L.lowering_for(aten.add.Tensor)


def test_register_packet_registers_each_overload():
    def fake(lw, node, *args, **kw):
        raise L.Unsupported("test")

    packet = aten.logcumsumexp
    before = {o for o in L.LOWERINGS if o.overloadpacket is packet}
    assert not before
    try:
        L.register(packet)(fake)
        got = {o for o in L.LOWERINGS if o.overloadpacket is packet}
        want = {getattr(packet, n) for n in packet.overloads() if "out" not in n}
        assert got == want and got
    finally:
        for o in [o for o in L.LOWERINGS if o.overloadpacket is packet]:
            del L.LOWERINGS[o]
