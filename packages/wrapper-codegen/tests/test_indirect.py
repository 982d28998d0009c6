"""plan_indirect and emit_python's pointer table: which graph inputs kernels read through the
table, how their calls are rewritten, and the emitted wrapper run against the original lines."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from coil.wrapper_codegen import (
    Allocate,
    CheckInput,
    ExternCall,
    Free,
    InputLayout,
    KernelCall,
    Line,
    Ref,
    Return,
    Unpack,
    View,
    emit_python,
    plan_indirect,
)

CPU = torch.device("cpu")
LAY = InputLayout((4, 4), (4, 1), torch.float32)


def _lines(*body: Line, ret: tuple[str, ...] = ("out",)) -> list[Line]:
    return [Unpack(("a", "b", "c")), *body, Return(tuple(Ref(n) for n in ret))]


def _alloc(name: str) -> Allocate:
    return Allocate(name, (4, 4), (4, 1), torch.float32, CPU)


def test_inputs_only_kernels_read_go_through_the_table() -> None:
    lines = _lines(CheckInput("a", 0, (4, 4), (4, 1), torch.float32, CPU), _alloc("out"),
                   KernelCall("k0", (1,), ("a", "b", "out"), (16,)), Free("a"),
                   KernelCall("k1", (1,), ("c", "out"), (16,)), Free("c"), Free("b"))
    plan = plan_indirect(lines, {"a": LAY, "b": LAY, "c": LAY}, {"k0": ("out",), "k1": ("out",)}, "tbl")
    assert plan is not None
    assert plan.slots == {0: (0, LAY), 1: (1, LAY), 2: (2, LAY)}
    assert plan.kernels == {"k0_via0_1": ("k0", {"a": 0, "b": 1}), "k1_via2": ("k1", {"c": 2})}
    calls = [ln for ln in plan.lines if isinstance(ln, KernelCall)]
    assert [(c.kernel, c.args) for c in calls] == [("k0_via0_1", ("tbl", "tbl", "out")), ("k1_via2", ("tbl", "out"))]
    # everything else is unchanged
    assert [ln for ln in plan.lines if not isinstance(ln, KernelCall)] == [
        ln for ln in lines if not isinstance(ln, KernelCall)]


@pytest.mark.parametrize("use", ["extern", "view", "returned", "stored"])
def test_inputs_read_otherwise_are_copied_as_before(use: str) -> None:
    body: list[Line] = [_alloc("out"), KernelCall("k0", (1,), ("a", "b", "out"), (16,))]
    ret: tuple[str, ...] = ("out",)
    stores = {"k0": ("out",)}
    if use == "extern":
        body.append(ExternCall("aten.mm.default", (Ref("b"), Ref("b")), (), Ref("m"), ()))
        ret = ("out", "m")
    elif use == "view":
        body.append(View("bv", "b", (16,), (1,), 0))
        ret = ("out", "bv")
    elif use == "returned":
        ret = ("out", "b")
    else:
        stores = {"k0": ("out", "b")}
    plan = plan_indirect(_lines(*body, ret=ret), {"a": LAY, "b": LAY}, stores, "tbl")
    assert plan is not None and set(plan.slots) == {0}, plan.slots
    assert plan_indirect(_lines(*body, ret=ret), {"b": LAY}, stores, "tbl") is None


def test_bad_candidates_and_names_are_errors() -> None:
    lines = _lines(_alloc("out"), KernelCall("k0", (1,), ("a", "out"), (16,)))
    with pytest.raises(ValueError, match="not graph inputs"):
        plan_indirect(lines, {"zz": LAY}, {}, "tbl")
    with pytest.raises(ValueError, match="already uses the name"):
        plan_indirect(lines, {"a": LAY}, {}, "out")


def test_emitted_wrapper_writes_the_table_and_copies_misaligned_inputs() -> None:
    """The emitted `call` hands the kernels the table, holding the inputs' addresses; an input
    at an odd address is replaced by an aligned copy first; a wrong shape names the input."""
    lines = _lines(_alloc("out"), KernelCall("k0", (1,), ("a", "b", "out"), (16,)), Free("a"), Free("b"))
    plan = plan_indirect(lines, {"a": LAY, "b": LAY}, {"k0": ("out",)}, "tbl")
    assert plan is not None
    src = emit_python(plan.lines, ["k0_via0_1"], [], "g", indirect=plan)
    seen: list[Any] = []

    def kernel(grid: Any, t0: torch.Tensor, t1: torch.Tensor, out: torch.Tensor, n: int) -> None:
        assert t0 is t1
        pa, pb = (int(v) for v in t0)
        seen.append((pa, pb))
        out.fill_(1.0)

    ns: dict[str, Any] = {}
    exec(compile(src, "<wrapper>", "exec"), ns)
    call = ns["make"](CPU, {}, {"k0_via0_1": kernel})
    assert call.indirect.indices == (0, 1)
    a, b = torch.randn(4, 4), torch.randn(4, 4)
    (out,) = call([a, b, None])
    assert seen[-1] == (a.data_ptr(), b.data_ptr()) and bool((out == 1).all())
    odd = torch.randn(17)[1:].view(4, 4)
    assert odd.data_ptr() % 16
    args = [a, odd, None]
    call.indirect.prepare(args)
    assert args[1] is not odd and args[1].data_ptr() % 16 == 0 and torch.equal(args[1], odd)
    assert int(call.indirect.table[1]) == args[1].data_ptr()
    with pytest.raises(ValueError, match="graph input 0"):
        call([torch.randn(4, 5), b, None])
