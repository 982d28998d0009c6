"""inplace_scatters and build(): a Scatter whose base dies at it takes the base's storage.

The scatter itself runs in the Triton tests end to end (tests-integration/test_inplace_scatter.py);
here the wrapper lines are checked: the output reinterprets the base (a Reuse), no init kernel
(the copy of the base) is launched, and the base is never freed or handed to another buffer
while the scatter output holds its storage.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import coil.lowering_ir as L
import pytest
import sympy
import torch
from coil.scheduler import Schedule
from coil.scheduler.ordering import step_reads
from coil.wrapper_codegen import Free, KernelCall, KernelLaunch, Reuse, WrapperProgram, build
from coil.wrapper_codegen.inplace import inplace_scatters


def _program(wr: Any, fn: Callable[..., Any], *inputs: Any) -> tuple[Schedule, WrapperProgram]:
    s = wr.schedule(fn, *inputs)
    launches = wr.launches_for(s)
    for st in s.steps:
        if isinstance(st, L.Scatter):
            ptrs = (*step_reads(st), st.output.name)
            for part in ("init", "scatter"):
                launches[f"{st.name}_{part}"] = KernelLaunch(f"{st.name}_{part}", ptrs, (1,), sympy.Integer(1))
    return s, build(s, launches)


def _inputs() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return torch.randn(10, 3), torch.tensor([0, 4, 4, 9]), torch.randn(4, 3)


def _scatter(s: Schedule) -> L.Scatter:
    (st,) = [st for st in s.steps if isinstance(st, L.Scatter)]
    return st


def _last_reads(s: Schedule) -> dict[str, int]:
    return {r: i for i, st in enumerate(s.steps) for r in step_reads(st)}


def test_dying_base_is_written_in_place(wr: Any) -> None:
    s, prog = _program(wr, lambda x, i, v: (torch.index_put(torch.exp(x), (i,), v, True) * 3,), *_inputs())
    st = _scatter(s)
    assert isinstance(st.base, L.Buffer)
    base, out = st.base.name, st.output.name
    assert inplace_scatters(s.steps, s.graph.buffers(), _last_reads(s), set()) == {out: base}
    kernels = [ln.kernel for ln in prog.lines if isinstance(ln, KernelCall)]
    assert f"{st.name}_scatter" in kernels and f"{st.name}_init" not in kernels
    (reuse,) = [ln for ln in prog.lines if isinstance(ln, Reuse) and ln.name == out]
    assert reuse.donor == base
    at = prog.lines.index(reuse)
    assert not any(isinstance(ln, Free) and ln.name == base for ln in prog.lines[at:])
    assert not any(isinstance(ln, Reuse) and ln.donor == base for ln in prog.lines[at + 1:])


CASES = {
    "input_base": lambda x, i, v: (torch.index_put(x, (i,), v, True) * 3,),
    "base_returned": lambda x, i, v: (torch.index_put(y := torch.exp(x), (i,), v, True), y),
    "read_with_result": lambda x, i, v: (torch.index_put(y := torch.exp(x), (i,), v, True) * y,),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_base_kept_is_copied(wr: Any, name: str) -> None:
    x, i, v = _inputs()
    s, prog = _program(wr, CASES[name], x, i, v)
    st = _scatter(s)
    assert inplace_scatters(s.steps, s.graph.buffers(), _last_reads(s), {
        b.name for b in s.graph.inputs if isinstance(b, L.InputBuffer)} | {
        o.storage.name for o in s.graph.outputs if isinstance(o, L.Buffer | L.ReinterpretView)}) == {}
    kernels = [ln.kernel for ln in prog.lines if isinstance(ln, KernelCall)]
    assert f"{st.name}_init" in kernels
