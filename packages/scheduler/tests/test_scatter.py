"""A Scatter step's two kernel groups (`scatter_groups`, `Schedule.kernel_groups`)."""

from __future__ import annotations

import dataclasses

import coil.lowering_ir as L
import torch
from coil.scheduler import KernelGroup, scatter_groups


def test_a_scatter_runs_as_an_init_group_and_a_scatter_group(sch):
    s = sch.schedule(lambda x, i, v: (x.index_add(0, i, v),), torch.randn(5, 3), torch.tensor([0, 4, 4]),
                     torch.randn(3, 3))
    (op,) = [st for st in s.steps if isinstance(st, L.Scatter)]
    init, scatter = scatter_groups(op)
    out = op.output.name
    assert (init.name, scatter.name) == (f"{op.name}_init", f"{op.name}_scatter")
    assert init.stores == [out] and not init.is_reduction
    (m,) = init.members
    assert m.kind == "x" and m.op.output.name == out and int(init.xnumel) == 15
    (m,) = scatter.members
    assert m.op is op and m.kind == "x" and scatter.stores == [out]
    assert [int(d) for d in scatter.x_dims] == [int(r) for r in op.ranges] and scatter.r_dims == []
    assert [g.name for g in s.kernel_groups()] == [
        g.name for st in s.steps for g in ([st] if isinstance(st, KernelGroup) else
                                           scatter_groups(st) if isinstance(st, L.Scatter) else [])]


def test_an_init_group_without_base_fills_zeros_of_the_output_dtype(sch):
    s = sch.schedule(lambda x, i, v: (x.index_add(0, i, v),), torch.randn(6, dtype=torch.float64),
                     torch.tensor([1, 1, 5]), torch.randn(3, dtype=torch.float64))
    (op,) = [st for st in s.steps if isinstance(st, L.Scatter)]
    init, _ = scatter_groups(dataclasses.replace(op, base=None))
    (m,) = init.members
    assert m.nest.body == L.Constant(0, torch.float64) and init.stores == [op.output.name]
