"""Lifetime tracking as Wrapper IR lines: where track_lifetimes puts Track lines, and that both
emitters report the same events for a built program."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from coil.wrapper_codegen import (
    TRACKER,
    Allocate,
    ExternCall,
    Free,
    KernelCall,
    Ref,
    Return,
    Reuse,
    Track,
    Unpack,
    emit_fx,
    emit_line,
    emit_python,
    track_lifetimes,
)

CPU = torch.device("cpu")


class Recorder:
    """A tracker that records the events it is told."""

    def __init__(self) -> None:
        self.events: list[tuple[str, ...]] = []

    def __getattr__(self, event: str) -> Any:
        return lambda *names: self.events.append((event, *names))


def test_track_lines_go_around_the_lines_that_make_hand_on_free_or_step() -> None:
    lines = [
        Unpack(("a",)),
        Allocate("b", (2,), (1,), torch.float32, CPU),
        KernelCall("k0", (1, 1, 1), ("a", "b"), (2,)),
        Free("a"),
        ExternCall("torch.ops.aten.sort.default", (Ref("b"),), (), (Ref("d"), Ref("c")), ()),
        Reuse("e", "b", (2,), (1,)),
        Free("c"),
        Return((Ref("e"), Ref("d"))),
    ]
    assert track_lifetimes(lines) == [
        lines[0], Track("begin"),
        lines[1], Track("alloc", ("b",)),
        lines[2], Track("stepped"),
        Track("free", ("a",)), lines[3],
        lines[4], Track("alloc", ("c",)), Track("alloc", ("d",)), Track("stepped"),
        lines[5], Track("reuse", ("e", "b")),
        Track("free", ("c",)), lines[6],
        Track("returning"), lines[7],
    ]


def test_python_emission_of_track_lines() -> None:
    assert emit_line(Track("begin")) == [f"{TRACKER}.begin()"]
    assert emit_line(Track("alloc", ("buf0",))) == [f"{TRACKER}.alloc('buf0')"]
    assert emit_line(Track("reuse", ("buf2", "buf0"))) == [f"{TRACKER}.reuse('buf2', 'buf0')"]


def test_bad_events_are_rejected() -> None:
    with pytest.raises(ValueError, match="events and their names"):
        Track("alloc")
    with pytest.raises(ValueError, match="events and their names"):
        Track("born", ("x",))


def test_both_emitters_report_the_same_events(wr: Any) -> None:
    def fn(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, ...]:
        h = torch.mm(torch.exp(x) + 1.0, w)
        return (torch.tanh(h).sum(-1), h * 2.0)

    x, w = torch.randn(3, 4), torch.randn(4, 5)
    s = wr.schedule(fn, x, w, fusion=False)
    launches = wr.launches_for(s)
    prog = wr.program(s)
    lines = track_lifetimes(prog.lines)
    bufs = s.graph.buffers()
    kernels = {k.name: wr.FakeKernel(k, launches[k.name], bufs) for k in s.kernels()}
    py, fx = Recorder(), Recorder()
    ns: dict[str, Any] = {TRACKER: py}
    exec(compile(emit_python(lines, list(launches), sorted(prog.constants), "t"), "<wrapper>", "exec"), ns)
    got = ns["make"](CPU, prog.constants, kernels)([x, w])
    gm = emit_fx(lines, kernels, prog.constants, tracker=fx)
    again = gm(x, w)
    for a, b, want in zip(got, again, fn(x, w), strict=True):
        torch.testing.assert_close(a, want)
        torch.testing.assert_close(b, want)
    assert py.events == fx.events
    steps = sum(isinstance(ln, KernelCall | ExternCall) for ln in prog.lines)
    assert py.events[0] == ("begin",) and py.events[-1] == ("returning",)
    assert py.events.count(("stepped",)) == steps >= 3
