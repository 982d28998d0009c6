"""Matrix products as kernel groups (coil.scheduler.matmul): which extern and epilogue become one
group, which epilogues are refused and why, and that the rebuilt schedule stays valid.

Inputs are lowered from real FX graphs (the `sch` fixture's tracing and lowering)."""

from __future__ import annotations

from typing import Any

import coil.lowering_ir as L
import pytest
import sympy
import torch
from coil.scheduler import (
    MatmulCandidate,
    MatmulProduct,
    Schedule,
    apply_matmul_candidates,
    is_matmul_group,
    matmul_candidates,
    matmul_operands,
    matmul_product,
    output_buffers,
    planner_graph,
    schedule,
    with_matmul_templates,
)
from coil.scheduler.matmul import row_major_in_group
from coil.scheduler.ordering import step_reads, step_writes
from torch.fx.experimental.proxy_tensor import make_fx

F = torch.nn.functional


def _candidates(s: Schedule) -> list[MatmulCandidate]:
    return matmul_candidates(s.steps, output_buffers(s.graph.outputs))


def _check_valid(s: Schedule) -> None:
    """Every buffer a step reads is an input, a constant or written by an earlier step; the
    graph's outputs are all written."""
    g = s.graph
    known = {b.name for b in g.inputs if isinstance(b, L.InputBuffer)} | {c.name for c in g.constants}
    for st in s.steps:
        for r in step_reads(st):
            assert r in known, f"{st.name} reads {r} before it is written"
        known |= set(step_writes(st))
    assert output_buffers(g.outputs) <= known


def _templated(s: Schedule) -> Schedule:
    t = with_matmul_templates(s, _candidates(s))
    _check_valid(t)
    assert not [e for e in t.externs() if matmul_operands(e) is not None]
    return t


def test_gelu_of_addmm_is_one_group_with_the_product_in_registers(sch: Any) -> None:
    x, w, b = torch.randn(8, 6), torch.randn(5, 6), torch.randn(5)
    s = sch.schedule(lambda x, w, b: (F.gelu(F.linear(x, w, b)),), x, w, b)
    (c,) = _candidates(s)
    assert c.extern_step == 0 and c.epilogue_step == 1
    g = c.group
    pm = matmul_product(g)
    assert isinstance(pm, MatmulProduct) and is_matmul_group(g) and g.name == f"{pm.extern.name}_mm"
    assert pm.extern.kernel == torch.ops.aten.addmm.default
    # reads: the extern's operands (x, the transposed weight's storage, the bias)
    assert set(pm.reads()) == {"arg0", "arg1", "arg2"}
    assert pm.output.name in g.internal and g.stores == [s.graph.outputs[0].name]
    assert not g.is_reduction and row_major_in_group(g)
    t = _templated(s)
    assert [st.name for st in t.steps] == [g.name]


def test_residual_add_after_mm_and_the_transposed_weight(sch: Any) -> None:
    x, w, r = torch.randn(8, 6), torch.randn(5, 6), torch.randn(8, 5)
    s = sch.schedule(lambda x, w, r: (x @ w.t() + r,), x, w, r)
    (c,) = _candidates(s)
    assert c.epilogue_step is not None
    pm = matmul_product(c.group)
    assert pm is not None and pm.extern.kernel == torch.ops.aten.mm.default
    ops = matmul_operands(pm.extern)
    assert ops is not None and tuple(ops.b.layout.stride) == (1, 6)  # w.t(): a stride-(1, K) view
    assert [m.op.name for m in c.group.members][1:] == [m.op.name for m in s.steps[c.epilogue_step].members]
    _templated(s)


def test_bmm_times_a_scale(sch: Any) -> None:
    s = sch.schedule(lambda a, b: (torch.bmm(a, b) * 0.5,), torch.randn(2, 3, 4), torch.randn(2, 4, 5))
    (c,) = _candidates(s)
    assert c.epilogue_step == 1 and c.group.stores == [s.graph.outputs[0].name]
    ops = matmul_operands(matmul_product(c.group).extern)  # type: ignore[union-attr]
    assert ops is not None and (ops.batch, ops.m, ops.n, ops.k) == (2, 3, 5, 4)
    _templated(s)


def test_mm_alone_is_the_product_alone(sch: Any) -> None:
    s = sch.schedule(lambda a, b: (a @ b,), torch.randn(3, 4), torch.randn(4, 6))
    (c,) = _candidates(s)
    assert c.epilogue_step is None and c.extern_step == 0
    assert [type(m.op) for m in c.group.members] == [MatmulProduct]
    assert c.group.stores == [s.graph.outputs[0].name] and not c.group.internal
    assert row_major_in_group(c.group)
    _templated(s)


@pytest.mark.parametrize("fn", [
    lambda a, b: ((a @ b).t().contiguous() * 2,),   # reads the product transposed
    lambda a, b: ((a @ b).softmax(-1),),            # a reduction over the product's rows
    lambda a, b: ((a @ b).sum(0),),                 # a reduction over its columns
], ids=["transposed", "softmax", "sum"])
def test_refused_epilogues_leave_the_product_alone(sch: Any, fn: Any) -> None:
    s = sch.schedule(fn, torch.randn(3, 4), torch.randn(4, 3))
    (c,) = _candidates(s)
    assert c.epilogue_step is None
    assert c.group.stores == [matmul_product(c.group).output.name]  # type: ignore[union-attr]
    t = _templated(s)
    assert len(t.steps) == len(s.steps)  # the extern became the product's group, in its place
    assert is_matmul_group(t.steps[c.extern_step])  # type: ignore[arg-type]


def test_a_reader_between_the_extern_and_the_epilogue_refuses_it(sch: Any) -> None:
    def fn(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> tuple[torch.Tensor, ...]:
        y = a @ b
        return (y @ c, y * 2)  # y @ c (an extern) reads y before the kernel of y * 2

    s = sch.schedule(fn, torch.randn(4, 5), torch.randn(5, 6), torch.randn(6, 3))
    names = [type(st).__name__ for st in s.steps]
    assert names == ["ExternKernel", "ExternKernel", "KernelGroup"]
    first, second = _candidates(s)
    assert first.extern_step == 0 and first.epilogue_step is None  # y is read by the second mm first
    assert second.extern_step == 1 and second.epilogue_step is None  # y @ c: a graph output, no reader
    _templated(s)


def test_a_product_read_after_its_epilogue_is_stored_too(sch: Any) -> None:
    def fn(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, ...]:
        y = a @ b
        return (torch.relu(y), y.sum())

    s = sch.schedule(fn, torch.randn(4, 5), torch.randn(5, 6), fusion=False)
    (c,) = _candidates(s)
    assert c.epilogue_step == 1  # relu's kernel; the sum's comes after it
    prod = matmul_product(c.group).output.name  # type: ignore[union-attr]
    assert prod in c.group.stores
    _templated(s)


def test_symbolic_sizes(sch: Any) -> None:
    gm = make_fx(lambda a, b, r: (torch.relu(a @ b) + r,), decomposition_table=L.decomposition_table(),
                 tracing_mode="symbolic")(torch.randn(4, 5), torch.randn(5, 6), torch.randn(4, 6))
    g = L.lower(gm)
    s = schedule(g)
    (c,) = _candidates(s)
    assert c.epilogue_step is not None and row_major_in_group(c.group)
    assert any(not isinstance(sympy.sympify(d), sympy.Integer) for d in c.group.x_dims)
    _templated(s)


def test_two_products_sharing_one_epilogue(sch: Any) -> None:
    """The epilogue goes to the first product; the second runs alone before it."""
    s = sch.schedule(lambda a, b, c: (a @ b + a @ c,), torch.randn(4, 5), torch.randn(5, 6), torch.randn(5, 6))
    first, second = _candidates(s)
    assert first.epilogue_step is not None and second.epilogue_step is None
    t = _templated(s)
    assert len(t.kernels()) == 2 and not t.externs()


def test_apply_refuses_candidates_claiming_one_step(sch: Any) -> None:
    s = sch.schedule(lambda x, w, b: (F.gelu(F.linear(x, w, b)),), torch.randn(8, 6), torch.randn(5, 6),
                     torch.randn(5))
    (c,) = _candidates(s)
    with pytest.raises(ValueError, match="claimed"):
        apply_matmul_candidates(list(s.steps), [c, c])
    assert apply_matmul_candidates(list(s.steps), []) == s.steps


def test_rebuilt_schedule_keeps_its_order_report_consistent(sch: Any) -> None:
    x, w1, w2 = torch.randn(16, 8), torch.randn(32, 8), torch.randn(8, 32)
    g = sch.lower(lambda x, w1, w2: (F.linear(F.gelu(F.linear(x, w1)), w2) + x,), x, w1, w2)
    s = schedule(g, order_time_limit=0.5)
    t = _templated(s)
    assert t.log is s.log
    if s.order is not None:
        assert t.order is not None and t.order.baseline_peak == s.order.baseline_peak
        pg = planner_graph(t.steps, g, output_buffers(g.outputs))
        assert pg is not None and len(pg.nodes) == len(t.steps)
