"""Data-dependent sizes (unbacked symbols) in lowering: the nodes defining them run through ATen
and carry the bindings that read them off their results; asserts on them are intended externs."""

from __future__ import annotations

import coil.lowering_ir as L
import sympy
import torch
from coil.lowering_ir.unbacked import UNBACKED_HINT
from torch.fx.experimental.proxy_tensor import make_fx

aten = torch.ops.aten


def _lower(fn, *args):  # type: ignore[no-untyped-def]
    gm = make_fx(fn, tracing_mode="symbolic", decomposition_table=L.decomposition_table())(*args)
    return L.lower(gm)


def _externs(g: L.LoweredGraph, op: object) -> list[L.ExternKernel]:
    return [o for o in g.operations if isinstance(o, L.ExternKernel) and o.kernel is op]


def _count_and_check(m: torch.Tensor):  # type: ignore[no-untyped-def]
    idx = torch.nonzero(m)
    aten._assert_scalar.default(idx.shape[0] >= 0, "a count is never negative")
    aten._assert_scalar.default(m.shape[0] >= 0, "known true when traced")
    return (idx * 2,)


def test_nonzero_binds_its_count_and_asserts_become_intended_externs():
    g = _lower(_count_and_check, torch.tensor([1, 0, 2, 0]))
    (nz,) = _externs(g, aten.nonzero.default)
    (u0,) = nz.defined_symbols()
    assert nz.fallback and nz.bindings == (L.SymbolBinding(u0, nz.results.name, "size", 0),)
    assert nz.results.layout.size == (u0, 1)
    (check,) = _externs(g, aten._assert_scalar.default)  # the one true by construction is dropped
    assert not check.fallback and check.results is None
    assert check.args == (sympy.Ge(u0, 0), "a count is never negative")
    # a kernel using u0 comes after the extern defining it, and u0 has an example value in its range
    assert g.operations.index(nz) < min(i for i, o in enumerate(g.operations) if u0 in L.used_symbols(o) and o is not nz)
    assert 0 <= g.symbol_hints[u0] <= UNBACKED_HINT


def _narrow_at_count(x: torch.Tensor, m: torch.Tensor):  # type: ignore[no-untyped-def]
    n = torch.nonzero(m).shape[0]
    return (torch.narrow(x, 0, n - 2, 2) * 2,)


def test_a_view_at_a_data_dependent_offset_runs_through_aten():
    """The slice at start u0 - 2 (sign unknown) gets a new symbol for its offset, which only its
    real result holds: the view runs through ATen and binds size and offset from the result."""
    g = _lower(_narrow_at_count, torch.randn(8), torch.tensor([1, 0, 1, 0]))
    (sl,) = _externs(g, aten.slice.Tensor)
    assert sl.fallback
    assert {(b.attr, b.source) for b in sl.bindings} == {("size", sl.results.name), ("storage_offset", sl.results.name)}
    assert sl.results.layout.offset == 0  # the offset is in the result's data pointer
    assert any(isinstance(a, sympy.Basic) and a.has(sympy.Piecewise) for a in sl.args)  # the end: a Piecewise


def _prefix(x: torch.Tensor, n: torch.Tensor):  # type: ignore[no-untyped-def]
    return (torch.narrow(x, 0, 0, n.item()) + 1,)


def test_a_scalar_read_is_an_extern_whose_result_is_its_symbol():
    g = _lower(_prefix, torch.randn(6), torch.tensor(3))
    (read,) = _externs(g, aten._local_scalar_dense.default)
    assert isinstance(read.results, sympy.Symbol) and not read.fallback and read.bindings == ()
    assert read.defined_symbols() == {read.results}
    (kernel,) = [o for o in g.operations if isinstance(o, L.Pointwise)]
    assert read.results in L.used_symbols(kernel)


def test_lowering_adds_no_guards():
    """Lowering reads sizes and offsets as expressions: it never specialises a symbol (a guard
    would make Dynamo recompile for every size)."""
    gm = make_fx(lambda x: (x[1:] * 2, x.sum()), tracing_mode="symbolic")(torch.randn(10)[3:])  # offset: a symbol
    env = next(n.meta["val"] for n in gm.graph.nodes if n.op == "placeholder").fake_mode.shape_env
    before = len(env.guards)
    L.lower(gm)
    assert len(env.guards) == before
