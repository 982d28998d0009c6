"""planner_graph: the memory planner's view of a schedule, and order_steps built on it."""

from __future__ import annotations

import coil.lowering_ir as L
import torch
from coil.memory_planner import peak_of_order
from coil.scheduler import order_steps, output_buffers, planner_graph, schedule
from coil.scheduler.ordering import step_reads, step_writes
from torch.fx.experimental.proxy_tensor import make_fx


def _mutating(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor]:
    y = torch.relu(x @ w)
    x.copy_(x * 2)  # a copy_ epilogue into a graph input, after two readers of x
    return (y.sum(0),)


def test_planner_graph_mirrors_the_steps(sch) -> None:
    x, w = torch.randn(4, 3), torch.randn(3, 5)
    g = sch.lower(_mutating, x, w)
    s = schedule(g)
    outs = output_buffers(g.outputs)
    pg = planner_graph(s.steps, g, outs)
    assert pg is not None
    assert [n.name for n in pg.nodes] == [f"s{i}" for i in range(len(s.steps))]
    bufs = {b.name: b for b in pg.buffers}
    sizes = g.buffers()
    for node, st in zip(pg.nodes, s.steps, strict=True):
        assert [r for r in node.reads if not r.startswith("__order_")] == step_reads(st)
        assert [w for w in node.writes if not w.startswith("__order_")] == step_writes(st)
        for name in (*step_reads(st), *step_writes(st)):
            layout = sizes[name].layout
            assert bufs[name].size == int(layout.storage_extent()) * layout.dtype.itemsize
    assert {b.name for b in pg.buffers if b.input} == {"arg0", "arg1"}
    assert {b.name for b in pg.buffers if b.output} == outs
    # the step mutating x runs after every earlier reader of x, in every order of the graph
    (mut,) = [i for i, st in enumerate(s.steps) if isinstance(st, L.ExternKernel) and st.mutates]
    readers = [i for i, st in enumerate(s.steps[:mut]) if "arg0" in step_reads(st)]
    assert len(readers) == 2
    for j in readers:
        dep = f"__order_{j}_{mut}"
        assert bufs[dep].size == 0 and dep in pg.nodes[j].writes and dep in pg.nodes[mut].reads
        assert j in pg.preds[mut]
    assert pg.is_topological(range(len(pg.nodes)))
    assert peak_of_order(pg, range(len(pg.nodes))) > 0


def test_planner_graph_is_none_with_symbolic_sizes() -> None:
    gm = make_fx(lambda x: (torch.relu(x) * 2,), decomposition_table=L.decomposition_table(),
                 tracing_mode="symbolic")(torch.randn(4, 3))
    g = L.lower(gm)
    s = schedule(g)
    assert planner_graph(s.steps, g, output_buffers(g.outputs)) is None
    steps, report = order_steps(s.steps, g, output_buffers(g.outputs), time_limit=1.0)
    assert steps == s.steps and report is None


def test_order_steps_reports_the_planner_graph_peaks(sch) -> None:
    g = sch.lower(_mutating, torch.randn(4, 3), torch.randn(3, 5))
    s = schedule(g)
    outs = output_buffers(g.outputs)
    pg = planner_graph(s.steps, g, outs)
    assert pg is not None
    steps, report = order_steps(s.steps, g, outs, time_limit=1.0)
    assert report is not None
    assert report.baseline_peak == peak_of_order(pg, range(len(pg.nodes)))
    assert report.peak <= report.baseline_peak
    assert sorted(map(id, steps)) == sorted(map(id, s.steps))


def test_order_report_profiles_the_order_used(sch) -> None:
    """step_bytes and input_last against the steps returned, counted by hand: a written buffer
    is live from its writer to its last reader (outputs to the end); an input's last step is the
    last returned step that reads it."""
    x, w = torch.randn(4, 3), torch.randn(3, 5)
    g = sch.lower(_mutating, x, w)
    s = schedule(g)
    outs = output_buffers(g.outputs)
    steps, report = order_steps(s.steps, g, outs, time_limit=1.0)
    assert report is not None and len(report.step_bytes) == len(steps)
    sizes = {n: int(b.layout.storage_extent()) * b.layout.dtype.itemsize for n, b in g.buffers().items()}
    inputs = {"arg0", "arg1"}
    first = {b: i for i in reversed(range(len(steps))) for b in step_writes(steps[i])}
    last = {b: i for i, st in enumerate(steps) for b in step_reads(st)}
    for t in range(len(steps)):
        want = sum(sizes[b] for b, f in first.items()
                   if f <= t <= (len(steps) - 1 if b in outs else max(f, last.get(b, f))))
        assert report.step_bytes[t] == want, t
    assert {(n, size, lst) for n, size, lst in report.input_last} == {(n, sizes[n], last[n]) for n in inputs}
    assert max(report.step_bytes) + report.inputs == report.peak
