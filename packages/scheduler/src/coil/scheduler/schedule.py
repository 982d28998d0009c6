"""`schedule(graph)`: a LoweredGraph -> Schedule (kernel groups, scatters and externs in execution order)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from coil.lowering_ir import Buffer, ExternKernel, LoweredGraph, ReinterpretView, Scatter
from coil.scheduler.fusion import FusionLog, fuse
from coil.scheduler.group import KernelGroup
from coil.scheduler.ordering import OrderReport, order_steps, planner_graph, profile
from coil.scheduler.overlap import overlap_order
from coil.scheduler.scatter import scatter_groups

Step = KernelGroup | ExternKernel | Scatter


@dataclass
class Schedule:
    """What the wrapper runs, in order. `graph` is the lowered graph it came from."""

    graph: LoweredGraph
    steps: list[Step]
    log: FusionLog = field(default_factory=FusionLog)
    order: OrderReport | None = None  # peaks before/after memory-aware ordering, when it ran

    def kernels(self) -> list[KernelGroup]:
        """The steps that are kernel groups (a Scatter's two groups not included)."""
        return [s for s in self.steps if isinstance(s, KernelGroup)]

    def kernel_groups(self) -> list[KernelGroup]:
        """Every kernel the schedule runs, in step order: each KernelGroup step, and each
        Scatter's init and scatter groups (`scatter_groups`); extern steps run no kernel."""
        out: list[KernelGroup] = []
        for s in self.steps:
            if isinstance(s, KernelGroup):
                out.append(s)
            elif isinstance(s, Scatter):
                out.extend(scatter_groups(s))
        return out

    def scatters(self) -> list[Scatter]:
        return [s for s in self.steps if isinstance(s, Scatter)]

    def externs(self) -> list[ExternKernel]:
        return [s for s in self.steps if isinstance(s, ExternKernel)]


def output_buffers(outputs: list[Any]) -> set[str]:
    """Storage buffers the graph returns (directly or through views)."""
    out: set[str] = set()
    for o in outputs:
        if isinstance(o, Buffer | ReinterpretView):
            out.add(o.storage.name)
    return out


def schedule(graph: LoweredGraph, *, fusion: bool = True, visit_order: bool = True,
             order_time_limit: float = 0.0) -> Schedule:
    """Fuse and order the graph's operations. With fusion=False each op is its own kernel;
    `visit_order` as in `fuse`.

    With `order_time_limit` > 0 the fused steps are reordered by the memory planner's search
    (that many seconds at most) when that lowers the peak of live bytes. Then collectives'
    launches are raised and their waits sunk (`overlap.overlap_order`, within its memory bound);
    the report then describes the order that runs.
    """
    log = FusionLog()
    outs = output_buffers(graph.outputs)
    steps = fuse(graph.operations, outs, enabled=fusion, log=log, visit_order=visit_order)
    steps, report = order_steps(steps, graph, outs, order_time_limit)
    moved = overlap_order(steps, graph, outs)
    if moved is not None:
        steps = [steps[i] for i in moved]
        pg = planner_graph(steps, graph, outs) if report is not None else None  # only a report needs it
        if report is not None and pg is not None:
            step_bytes, input_last = profile(pg, range(len(steps)))
            report = dataclasses.replace(report, peak=report.inputs + max(step_bytes, default=0),
                                         step_bytes=step_bytes, input_last=input_last)
    return Schedule(graph, steps, log, report)
