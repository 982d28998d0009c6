"""Wrapper IR: every line type has a Python emission; literals round-trip; a built program runs."""

from __future__ import annotations

import coil.wrapper_codegen as wc
import sympy
import torch
from coil.lowering_ir import decomposition_table, lower
from coil.scheduler import schedule
from coil.wrapper_codegen import (
    Allocate,
    Arena,
    CheckInput,
    ExternCall,
    Free,
    KernelCall,
    Place,
    Ref,
    Return,
    Reuse,
    SizeOf,
    Track,
    Unpack,
    View,
    build,
    emit_line,
    emit_python,
    pyrepr,
)
from torch.fx.experimental.proxy_tensor import make_fx

ONE_OF_EACH = [
    Unpack(("a", None)),
    SizeOf("s0", "a", 0),
    CheckInput("a", 0, (sympy.Symbol("s0"), 3), (3, 1), torch.float32, torch.device("cpu")),
    Allocate("b", (2, 3), (3, 1), torch.float32, torch.device("cpu")),
    Reuse("c", "b", (3, 2), (2, 1)),
    View("d", "a", (3,), (1,), 1),
    KernelCall("k0", (4, 1, 1), ("a", "c"), (6,)),
    ExternCall("torch.ops.aten.mm.default", (Ref("a"), Ref("c")), (), Ref("e"), (("e", (2, 2), (2, 1)),)),
    Free("a"),
    Track("reuse", ("c", "b")),
    Arena("f", 256, torch.device("cpu"), (torch.float16,)),
    Place("g", "f", 0, (4,), (1,), torch.float16),
    Return((Ref("e"), 3, None, Ref("g"))),
]


def test_every_line_type_has_an_emission() -> None:
    kinds = {type(line) for line in ONE_OF_EACH}
    assert kinds == set(wc.Line.__args__)  # type: ignore[attr-defined]
    for line in ONE_OF_EACH:
        code = "\n".join(emit_line(line))
        compile("def f(args):\n" + "\n".join("    " + c for c in code.splitlines()), "<line>", "exec")


def test_literals_round_trip() -> None:
    values = [1, -2.5, float("inf"), None, True, torch.float16, torch.device("cpu"), [1, (2, 3)], {"k": 1}]
    for v in values:
        assert eval(pyrepr(v), {"torch": torch}) == v


def _program(fn, *inputs):  # type: ignore[no-untyped-def]
    gm = make_fx(fn, decomposition_table=decomposition_table(), tracing_mode="fake")(*inputs)
    sched = schedule(lower(gm, "t"))
    return sched, build(sched, {})


def test_extern_only_program_matches_eager() -> None:
    def fn(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, ...]:
        x = torch.mm(a, b)
        y = torch.mm(x, b.t())
        return (torch.mm(y, b),)

    a, b = torch.randn(4, 5), torch.randn(5, 5)
    sched, prog = _program(fn, a, b)
    assert sched.kernels() == []
    src = emit_python(prog.lines, [], sorted(prog.constants), "t")
    ns: dict[str, object] = {}
    exec(compile(src, "<wrapper>", "exec"), ns)
    call = ns["make"](torch.device("cpu"), prog.constants, {})  # type: ignore[operator]
    args = [a, b]
    (out,) = call(args)
    assert args == []  # inputs are released once unpacked
    torch.testing.assert_close(out, fn(a, b)[0])


def test_buffers_are_allocated_before_use_and_outputs_never_freed() -> None:
    def fn(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, ...]:
        x = torch.mm(a, b)
        return (torch.mm(x, b), x)

    _, prog = _program(fn, torch.randn(3, 3), torch.randn(3, 3))
    defined: set[str] = set()
    freed: set[str] = set()
    for line in prog.lines:
        if isinstance(line, Unpack):
            defined |= {n for n in line.names if n}
        elif isinstance(line, ExternCall):
            for arg in line.args:
                if isinstance(arg, Ref):
                    assert arg.name in defined and arg.name not in freed
            defined.add(line.results.name)
        elif isinstance(line, Free):
            freed.add(line.name)
        elif isinstance(line, Return):
            for v in line.values:
                if isinstance(v, Ref):
                    assert v.name in defined and v.name not in freed

