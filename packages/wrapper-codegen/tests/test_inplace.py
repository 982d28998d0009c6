"""inplace_scatters, inplace_pointwise and build(): an output takes the storage of a buffer that
dies at the step writing it.

The kernels run in the Triton tests end to end (tests-integration/test_inplace_scatter.py,
test_inplace_pointwise.py); here the wrapper lines are checked: the output reinterprets the
buffer it takes (a Reuse), no init kernel (a scatter's copy of its base) is launched, a
pointwise kernel is passed the output's variable for both pointers, and the buffer taken is never
freed or handed to another buffer while the output holds its storage. The programs run (the
tests' reference kernels) against eager.
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
from coil.wrapper_codegen.inplace import inplace_pointwise, inplace_scatters


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


def _kept(s: Schedule) -> set[str]:
    return {b.name for b in s.graph.inputs if isinstance(b, L.InputBuffer)} | {
        o.storage.name for o in s.graph.outputs if isinstance(o, L.Buffer | L.ReinterpretView)}


def test_a_products_epilogue_writes_over_the_product(wr: Any) -> None:
    def fn(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor]:
        return (torch.relu(x @ w) * 2 + 1,)

    x, w = torch.randn(8, 8), torch.randn(8, 8)
    s = wr.schedule(fn, x, w)
    (mm,) = [st for st in s.steps if isinstance(st, L.ExternKernel)]
    (group,) = s.kernels()
    (out,) = group.stores
    product = mm.outputs[0].name
    assert inplace_pointwise(s.steps, s.graph.buffers(), _last_reads(s), _kept(s), {}) == {out: product}
    _, prog = wr.check(fn, x, w)
    assert prog.inplace == {out: product}
    (reuse,) = [ln for ln in prog.lines if isinstance(ln, Reuse) and ln.name == out]
    assert reuse.donor == product
    (call,) = [ln for ln in prog.lines if isinstance(ln, KernelCall)]
    assert product not in call.args and call.args.count(out) == 2


NOT_IN_PLACE = {
    # read at two indices: another program may still read an element this one overwrites
    "transposed": lambda x, w: ((m := x @ w) * 2 + m.t(),),
    "flipped": lambda x, w: (torch.sigmoid(m := x @ w) + m.flip(0),),
    # a graph output or input keeps its storage
    "returned": lambda x, w: (m := x @ w, torch.relu(m)),
    "input": lambda x, w: (torch.relu(x) @ w,),
    # read again after the kernel (the sum reduces it later)
    "read_later": lambda x, w: (torch.relu(m := x @ w) @ w, m.sum(0)),
    # one size, another layout
    "other_layout": lambda x, w: (torch.relu((x @ w).t()).contiguous(),),
}


@pytest.mark.parametrize("name", sorted(NOT_IN_PLACE))
def test_kernels_keep_what_they_cannot_overwrite(wr: Any, name: str) -> None:
    fn = NOT_IN_PLACE[name]
    x, w = torch.randn(8, 8), torch.randn(8, 8)
    s = wr.schedule(fn, x, w)
    assert inplace_pointwise(s.steps, s.graph.buffers(), _last_reads(s), _kept(s), {}) == {}
    _, prog = wr.check(fn, x, w)
    assert prog.inplace == {}


def test_a_program_cut_into_cuda_graph_segments_writes_nothing_in_place(wr: Any) -> None:
    """A step a CUDA graph cannot capture (here repeat_interleave, whose size is data-dependent
    on the device) cuts the program into segments; a segment must not write over a buffer it
    takes as input, so no pointwise kernel writes in place (the same epilogue does without it)."""

    def fn(x: torch.Tensor, w: torch.Tensor, r: torch.Tensor) -> tuple[torch.Tensor, ...]:
        i = torch.repeat_interleave(r, output_size=6)
        return (torch.relu(x @ w) * 2 + i.float().sum(),)

    x, w, r = torch.randn(8, 8), torch.randn(8, 8), torch.tensor([1, 2, 3])
    _, prog = wr.check(fn, x, w, r)
    assert prog.blockers and prog.inplace == {}
    _, plain = wr.check(lambda x, w: (torch.relu(x @ w) * 2 + 1,), x, w)
    assert not plain.blockers and plain.inplace


def test_a_store_before_the_first_load_of_a_buffer_does_not_take_it(wr: Any) -> None:
    """One kernel stores x * 2 (member 0) and then x @ w + x (member 1, the first to load the
    product). The kernel computes and stores its members in order, so member 0's store over the
    product's storage would land before member 1 loads it: only member 1 may take it."""

    def fn(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return x * 2, (x @ w) + x

    x, w = torch.randn(8, 8), torch.randn(8, 8)
    s = wr.schedule(fn, x, w)
    (group,) = s.kernels()
    (mm,) = [st for st in s.steps if isinstance(st, L.ExternKernel)]
    product = mm.outputs[0].name
    outs = [m.op.output.name for m in group.members if m.op.output.name in group.stores]
    readers = [m.op.output.name for m in group.members if any(ld.buffer == product for ld in m.nest.body_loads)]
    assert len(outs) == 2 and readers == [outs[1]]  # the shape this test is about
    _, prog = wr.check(fn, x, w)
    assert prog.inplace == {outs[1]: product}
