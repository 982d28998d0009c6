"""An operation using a symbol an extern defines (a size read at run time) runs after that extern,
however fusion groups it."""

from __future__ import annotations

import coil.lowering_ir as L
import sympy
import torch
from coil.scheduler import KernelGroup, schedule
from coil.scheduler.ordering import planner_graph
from coil.scheduler.schedule import output_buffers
from torch.fx.experimental.proxy_tensor import make_fx


def _double_plus_read(x: torch.Tensor, n: torch.Tensor) -> tuple[torch.Tensor]:
    y = x * 2  # before the read in program order; fused with the add, which uses the value read
    return (y + n.item(),)


def _graph() -> L.LoweredGraph:
    gm = make_fx(_double_plus_read, tracing_mode="symbolic", decomposition_table=L.decomposition_table())(
        torch.randn(6), torch.tensor(3))
    return L.lower(gm)


def test_a_fused_group_using_a_read_size_runs_after_the_read() -> None:
    g = _graph()
    s = schedule(g)
    (read,) = [st for st in s.steps if isinstance(st, L.ExternKernel)]
    (group,) = s.kernels()
    assert {m.op.name for m in group.members} == {op.name for op in g.operations if isinstance(op, L.Pointwise)}
    assert s.steps.index(read) < s.steps.index(group)


def test_the_planner_graph_orders_users_after_the_definer() -> None:
    """With static buffer sizes the planner may reorder steps: a zero-byte dependency keeps the
    step using the read value after the read."""
    cpu, one = torch.device("cpu"), sympy.Integer(1)
    six = (sympy.Integer(6),)
    x = L.InputBuffer("arg0", L.Layout(cpu, torch.float32, six, (one,)), 0)
    n = L.InputBuffer("arg1", L.Layout(cpu, torch.int64, (), ()), 1)
    u0 = sympy.Symbol("u0", integer=True)
    p0 = sympy.Symbol("p0", integer=True, nonnegative=True)

    def pointwise(name: str, body: L.Value) -> L.Pointwise:
        out = L.ComputedBuffer(f"buf_{name}", L.Layout(cpu, torch.float32, six, (one,)))
        return L.Pointwise(f"op_{name}", (), out, six, body, p0)

    first = pointwise("a", L.Op("mul", (L.Load("arg0", p0, torch.float32), L.Constant(2.0, torch.float32)),
                                torch.float32))
    read = L.ExternKernel("op_read", (), torch.ops.aten._local_scalar_dense.default, (n,), {}, u0, False)
    second = pointwise("b", L.Op("add", (L.Load(first.output.name, p0, torch.float32),
                                         L.IndexValue(u0, torch.float32)), torch.float32))
    g = L.LoweredGraph("g", [x, n], [], [first, read, second], [second.output])
    steps = schedule(g, fusion=False).steps
    assert [type(st) for st in steps] == [KernelGroup, L.ExternKernel, KernelGroup]
    pg = planner_graph(steps, g, output_buffers(g.outputs))
    assert pg is not None
    assert "__order_1_2" in pg.nodes[2].reads and "__order_1_2" in pg.nodes[1].writes
