"""emit_fx: the Wrapper IR as a torch.fx graph, node for line, running like the Python wrapper."""

from __future__ import annotations

import typing
from typing import Any

import pytest
import sympy
import torch
from coil.wrapper_codegen import (
    TRACKER,
    Allocate,
    Arena,
    CheckInput,
    ExternCall,
    Free,
    KernelCall,
    Line,
    Place,
    Ref,
    Return,
    Reuse,
    SizeOf,
    Track,
    Unpack,
    View,
    emit_fx,
    emit_fx_graph,
    emit_python,
)
from coil.wrapper_codegen.emit_fx import free, launch

CPU = torch.device("cpu")
S0 = sympy.Symbol("n_a", integer=True, positive=True)


def program() -> list[Line]:
    """One line of every type; the allocation's size is a size expression (dynamic shapes)."""
    return [
        Unpack(("a", None, "b")),
        SizeOf("n_a", "a", 0),
        CheckInput("a", 0, (S0,), (1,), torch.float32, CPU),
        Allocate("buf0", (2, S0 // 2), (S0 // 2, 1), torch.float32, CPU),
        KernelCall("k0", (sympy.ceiling(S0 / 4), 1, 1), ("a", "buf0"), (S0,)),
        View("v0", "buf0", (3, 2), (1, 3), 0),
        ExternCall("torch.ops.aten.mm.default", (Ref("v0"), Ref("b")), (), Ref("buf1"), (("buf1", (3, 3), (3, 1)),)),
        Free("a"),
        Free("v0"),
        Reuse("buf2", "buf0", (6,), (1,)),
        ExternCall("torch.ops.aten.sort.default", (Ref("buf1"),), (("dim", 0), ("descending", True)),
                   (Ref("buf3"), None), ()),
        Track("reuse", ("buf2", "buf0")),
        Arena("ar", 512, CPU, (torch.float32,)),
        Place("buf4", "ar", 256, (2,), (1,), torch.float32),
        ExternCall("torch.ops.aten.fill_.Scalar", (Ref("buf4"), 2.0), (), None, ()),
        Return((Ref("buf1"), Ref("buf2"), Ref("buf3"), Ref("n_a"), Ref("c0"), None, Ref("buf4"))),
    ]


class Recorder:
    """A tracker that records the events it is told."""

    def __init__(self) -> None:
        self.events: list[tuple[str, ...]] = []

    def __getattr__(self, event: str) -> Any:
        return lambda *names: self.events.append((event, *names))


def k0(grid: tuple[int, ...], a: torch.Tensor, buf: torch.Tensor, n: int) -> None:
    buf.view(-1).copy_(a[:n])


def _python(lines: list[Line], inputs: list[Any], constants: dict[str, torch.Tensor], tracker: Any = None) -> Any:
    ns: dict[str, Any] = {TRACKER: tracker}
    exec(compile(emit_python(lines, ["k0"], sorted(constants), "t"), "<wrapper>", "exec"), ns)
    return ns["make"](CPU, constants, {"k0": k0})(list(inputs))


def _same(got: Any, want: Any) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        if isinstance(w, torch.Tensor):
            assert g.shape == w.shape and g.stride() == w.stride() and g.dtype == w.dtype
            torch.testing.assert_close(g, w)
        else:
            assert g == w


def test_every_line_type_becomes_nodes() -> None:
    lines = program()
    assert {type(ln) for ln in lines} == set(typing.get_args(Line))
    graph = emit_fx_graph(lines)
    ops = [(n.op, n.target) for n in graph.nodes]
    assert [n.name for n in graph.nodes if n.op == "placeholder"] == ["a", "unused1", "b"]
    assert ops.count(("call_function", launch)) == 1
    assert ops.count(("call_function", free)) == 2
    assert ("call_function", torch.empty_strided) in ops
    assert ("call_function", torch.ops.aten.mm.default) in ops and ("call_function", torch.ops.aten.sort.default) in ops
    assert ("get_attr", "k_k0") in ops and ("get_attr", "c0") in ops  # kernels and constants
    assert ("call_method", "size") in ops
    assert ops[-1][0] == "output"


@pytest.mark.parametrize("n", [6, 8])
def test_fx_module_runs_like_the_python_wrapper(n: int) -> None:
    lines = program()
    c0 = torch.ones(2)
    a, b = torch.arange(float(n)), torch.randn(2, 3)  # n sizes buf0 (2 x n/2) and the grid
    fx_events, py_events = Recorder(), Recorder()
    gm = emit_fx(lines, {"k0": k0}, {"c0": c0}, tracker=fx_events)
    _same(gm(a, torch.zeros(1), b), _python(lines, [a, torch.zeros(1), b], {"c0": c0}, py_events))
    assert fx_events.events == py_events.events == [("reuse", "buf2", "buf0")]


def test_free_and_reuse_end_a_name() -> None:
    bad = [Unpack(("a",)), Free("a"), Return((Ref("a"),))]
    with pytest.raises(ValueError, match="after it was freed"):
        emit_fx_graph(bad)
    reused = [Unpack(()), Allocate("x", (2,), (1,), torch.float32, CPU), Reuse("y", "x", (2,), (1,)),
              Return((Ref("x"),))]
    with pytest.raises(ValueError, match="'x'"):
        emit_fx_graph(reused)


def test_missing_kernel_constant_or_tracker_is_reported() -> None:
    with pytest.raises(KeyError, match="k_k0"):
        emit_fx(program(), {}, {"c0": torch.ones(1)})
    with pytest.raises(KeyError, match=TRACKER):
        emit_fx(program(), {"k0": k0}, {"c0": torch.ones(1)})


def test_non_lines_are_rejected() -> None:
    with pytest.raises(TypeError):
        emit_fx_graph(["x = 1"])  # type: ignore[list-item]


def test_dead_code_elimination_keeps_launches_and_frees() -> None:
    graph = emit_fx_graph(program())
    before = [n.name for n in graph.nodes]
    graph.eliminate_dead_code()
    after = [n.name for n in graph.nodes]
    kept = ("launch_", "free_", "track_")
    assert [n for n in before if n.startswith(kept)] == [n for n in after if n.startswith(kept)]


def test_built_program_runs_through_fx(wr: Any) -> None:
    def fn(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, ...]:
        h = torch.mm(torch.exp(x) + 1.0, w)
        return (torch.tanh(h).sum(-1), h * 2.0)

    x, w = torch.randn(3, 4), torch.randn(4, 5)
    s = wr.schedule(fn, x, w)
    call, _, prog, kernels = wr.compile(s)
    gm = emit_fx(prog.lines, kernels, prog.constants)
    graph_launches = [n for n in gm.graph.nodes if n.target is launch]
    assert len(graph_launches) == sum(isinstance(ln, KernelCall) for ln in prog.lines) >= 2
    _same(gm(x, w), call([x, w]))
    _same(gm(x, w), fn(x, w))


def test_an_extern_of_another_namespace_runs_in_both_emitters() -> None:
    """An op registered at run time outside aten (coil's `coil::attention` is one): both emitters
    call `torch.ops.<namespace>.<op>.<overload>` with its optional tensor, float and int arguments
    and unpack its two results."""
    lib = torch.library.Library("coiltest_wrapper", "FRAGMENT")
    lib.define("pair(Tensor x, Tensor? y, float s, SymInt n) -> (Tensor, Tensor)")
    lib.impl("pair", lambda x, y, s, n: (x * s + (0 if y is None else y), x.sum(-1) + n), "CompositeExplicitAutograd")
    lines: list[Line] = [
        Unpack(("a", "b")),
        ExternCall("torch.ops.coiltest_wrapper.pair.default", (Ref("a"), Ref("b"), 0.5, 3), (), (Ref("o0"), Ref("o1")),
                   (("o0", (2, 3), (3, 1)), ("o1", (2,), (1,)))),
        ExternCall("torch.ops.coiltest_wrapper.pair.default", (Ref("a"), None, 2.0, 0), (), (Ref("o2"), None), ()),
        Return((Ref("o0"), Ref("o1"), Ref("o2"))),
    ]
    src = emit_python(lines, [], [], "t")
    assert "torch.ops.coiltest_wrapper.pair.default(" in src
    graph = emit_fx_graph(lines)
    assert [n.target for n in graph.nodes].count(torch.ops.coiltest_wrapper.pair.default) == 2
    a, b = torch.randn(2, 3), torch.randn(2, 3)
    want = (a * 0.5 + b, a.sum(-1) + 3, a * 2.0)
    _same(_python(lines, [a, b], {}), want)
    _same(emit_fx(lines, {}, {})(a, b), want)
