"""Data-dependent sizes: unbacked symbols are bound by the extern that defines them, before any use,
and the run-time asserts on them are real checks. Programs run through both emitters."""

from __future__ import annotations

from typing import Any

import coil.lowering_ir as L
import pytest
import sympy
import torch
from coil.scheduler import Schedule, schedule
from coil.wrapper_codegen import (
    BindSymbol,
    DynamicShapeError,
    ExternCall,
    Ref,
    Reuse,
    build,
    emit_fx,
    emit_line,
    emit_python,
)
from torch.fx.experimental.proxy_tensor import make_fx

aten = torch.ops.aten
CPU = torch.device("cpu")
ONE = sympy.Integer(1)


def _run_both(s: Schedule, wr: Any, args: list[Any]) -> tuple[Any, Any]:
    """The program of `s` run by the Python wrapper and by its FX form (same kernels)."""
    call, _, prog, kernels = wr.compile(s)
    got = call(list(args))
    gm = emit_fx(prog.lines, kernels, prog.constants)
    return got, gm(*args)


def _narrow_after_nonzero(x: torch.Tensor, m: torch.Tensor) -> tuple[torch.Tensor, ...]:
    n = torch.nonzero(m).shape[0]
    return (torch.narrow(x, 0, n - 2, 2) * 2,)


def test_unbacked_symbols_are_bound_by_the_externs_defining_them(wr):
    """nonzero's count u0 is bound from its result; the slice at the data-dependent start u0 - 2
    runs through ATen (its end is a Piecewise of u0) and binds its own size and offset."""
    gm = make_fx(_narrow_after_nonzero, tracing_mode="symbolic", decomposition_table=L.decomposition_table())(
        torch.randn(8), torch.tensor([1, 0, 1, 0]))
    s = schedule(L.lower(gm))
    prog = wr.program(s)
    calls = {ln.op: ln for ln in prog.lines if isinstance(ln, ExternCall)}
    nonzero, sliced = calls["torch.ops.aten.nonzero.default"], calls["torch.ops.aten.slice.Tensor"]
    assert nonzero.binds == (BindSymbol("u0", nonzero.results.name, "size", 0),)
    assert {(b.attr, b.source) for b in sliced.binds} == {("size", sliced.results.name),
                                                         ("storage_offset", sliced.results.name)}
    src = emit_python(prog.lines, list(wr.launches_for(s)), [], "g")
    assert " if " in src  # the slice's end: a Piecewise printed as a conditional expression
    for mask in ([1, 0, 1, 0], [1, 1, 1, 0], [1, 1, 1, 1, 1, 0]):
        x, m = torch.randn(8), torch.tensor(mask)
        want = _narrow_after_nonzero(x, m)
        for got in _run_both(s, wr, [x, m]):
            torch.testing.assert_close(got[0], want[0])


def _prefix(x: torch.Tensor, n: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return (torch.narrow(x, 0, 0, n.item()),)


def test_a_scalar_read_binds_its_symbol(wr):
    """`.item()` (`_local_scalar_dense`) binds the size symbol it returns, by the call itself: an
    intended extern (no fallback)."""
    gm = make_fx(_prefix, tracing_mode="symbolic")(torch.randn(6), torch.tensor(3))
    s = schedule(L.lower(gm))
    (read,) = [st for st in s.steps if isinstance(st, L.ExternKernel)]
    assert isinstance(read.results, sympy.Symbol) and not read.fallback
    prog = wr.program(s)
    (call,) = [ln for ln in prog.lines if isinstance(ln, ExternCall)]
    assert call.results == Ref(read.results.name)
    for n in (2, 5):
        x = torch.randn(6)
        for got in _run_both(s, wr, [x, torch.tensor(n)]):
            assert torch.equal(got[0], x[:n])


def _graph(ops: list[L.Operation], inputs: list[Any], outputs: list[Any]) -> L.LoweredGraph:
    return L.LoweredGraph("g", inputs, [], ops, outputs)


def _nonzero_of(name: str, arg: L.InputBuffer, sym: sympy.Symbol) -> L.ExternKernel:
    out = L.ComputedBuffer(f"buf_{name}", L.Layout(CPU, torch.int64, (sym, ONE), (ONE, sym)))
    return L.ExternKernel(f"op_{name}", (), aten.nonzero.default, (arg,), {}, out, True,
                          bindings=(L.SymbolBinding(sym, out.name, "size", 0),))


def _vector(name: str, index: int, n: int = 4) -> L.InputBuffer:
    return L.InputBuffer(name, L.Layout(CPU, torch.float32, (sympy.Integer(n),), (ONE,)), index)


def test_a_symbol_defined_twice_is_checked(wr):
    """Two ATen calls defining one symbol: the second value goes to a fresh name that a run-time
    assert compares with the first (torch assumed them equal)."""
    u0 = sympy.Symbol("u0", integer=True)
    a, b = _vector("arg0", 0), _vector("arg1", 1)
    first, second = _nonzero_of("a", a, u0), _nonzero_of("b", b, u0)
    g = _graph([first, second], [a, b], [first.results, second.results])
    prog = build(Schedule(g, [first, second]), {})
    names = [bd.name for ln in prog.lines if isinstance(ln, ExternCall) for bd in ln.binds]
    assert names == ["u0", "u0_again0"]
    src = emit_python(prog.lines, [], [], "g")
    ns: dict[str, Any] = {}
    exec(compile(src, "<wrapper>", "exec"), ns)
    call = ns["make"](CPU, {}, {})
    x, y = torch.tensor([1.0, 0.0, 2.0, 0.0]), torch.tensor([0.0, 3.0, 4.0, 0.0])
    got = call([x, y])
    assert torch.equal(got[0], torch.nonzero(x)) and torch.equal(got[1], torch.nonzero(y))
    with pytest.raises(RuntimeError, match="differs"):
        call([x, torch.ones(4)])


def test_a_symbol_used_before_any_line_binds_it_is_a_compile_error():
    u9 = sympy.Symbol("u9", integer=True)
    a = _vector("arg0", 0, 8)
    view = L.ReinterpretView("view1", a, L.Layout(CPU, torch.float32, (u9,), (ONE,)))
    with pytest.raises(DynamicShapeError, match="u9"):
        build(Schedule(_graph([], [a], [view]), []), {})


def test_runtime_asserts_print_as_checks():
    u0 = sympy.Symbol("u0", integer=True)
    cond = sympy.And(sympy.Ge(u0, 0), sympy.Le(u0, 10))
    (line,) = emit_line(ExternCall("torch.ops.aten._assert_scalar.default", (cond, "u0 in range"), (), None, ()))
    assert line == "_ = torch.ops.aten._assert_scalar.default(((u0 >= 0) & (u0 <= 10)), 'u0 in range', )"
    for value, ok in ((3, True), (11, False), (-1, False)):
        ns = {"torch": torch, "u0": value}
        if ok:
            exec(line, ns)
        else:
            with pytest.raises(RuntimeError, match="u0 in range"):
                exec(line, ns)


def test_results_aliasing_an_argument_never_donate_storage(wr):
    """A view op run through ATen (a slice at a data-dependent start) returns the input's memory:
    it must not be handed to a later kernel's buffer, which would overwrite the input."""
    x = _vector("arg0", 0, 8)
    four = (sympy.Integer(4),)
    sliced = L.ComputedBuffer("buf1", L.Layout(CPU, torch.float32, four, (ONE,)))
    op1 = L.ExternKernel("op1", (), aten.slice.Tensor, (x, 0, 2, 6), {}, sliced, True)
    p = sympy.Symbol("p0", integer=True, nonnegative=True)

    def pointwise(name: str, src: L.Buffer, c: float) -> L.Pointwise:
        out = L.ComputedBuffer(f"buf_{name}", L.Layout(CPU, torch.float32, four, (ONE,)))
        body = L.Op("add", (L.Load(src.name, p, torch.float32), L.Constant(c, torch.float32)), torch.float32)
        return L.Pointwise(f"op_{name}", (), out, four, body, p)

    op2 = pointwise("a", sliced, 1.0)
    op3 = pointwise("b", op2.output, 2.0)
    s = schedule(_graph([op1, op2, op3], [x], [op3.output]), fusion=False)
    call, _, prog, _ = wr.compile(s)
    assert not any(isinstance(ln, Reuse) and ln.donor == "buf1" for ln in prog.lines)
    inp = torch.randn(8)
    before = inp.clone()
    (got,) = call([inp])
    torch.testing.assert_close(got, before[2:6] + 3.0)
    assert torch.equal(inp, before)
