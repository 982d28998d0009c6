"""Order the fused schedule for a low peak of live memory, with the memory planner's search.

Each step becomes a planner node reading and writing storage buffers; inputs and constants are
planner inputs, returned buffers planner outputs. A step that mutates an input (`copy_` epilogue)
must run after every earlier reader of it: zero-byte dependency buffers say so. The planner's
order is taken only when its peak is lower than the fused order's; sizes must be static (with
symbolic sizes the fused order is kept).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import sympy
from coil.lowering_ir import ExternKernel, InputBuffer, LoweredGraph, Scatter
from coil.memory_planner import Buffer as PBuffer
from coil.memory_planner import Graph as PGraph
from coil.memory_planner import Node as PNode
from coil.memory_planner import best_order
from coil.scheduler.group import KernelGroup

StepT = KernelGroup | ExternKernel | Scatter


@dataclass(frozen=True)
class OrderReport:
    """Peaks (bytes, planner model) of the fused order and of the order used."""

    baseline_peak: int
    peak: int
    method: str


def step_reads(st: StepT) -> list[str]:
    if isinstance(st, KernelGroup):
        own = set(st.stores) | set(st.internal)
        return list(dict.fromkeys(r for m in st.members for r in m.op.reads() if r not in own))
    return st.reads()


def step_writes(st: StepT) -> list[str]:
    if isinstance(st, KernelGroup):
        return list(st.stores)
    return [b.name for b in st.outputs]


def order_steps(steps: Sequence[StepT], graph: LoweredGraph, outputs: set[str],
                time_limit: float) -> tuple[list[StepT], OrderReport | None]:
    """`steps` reordered for a lower peak (or unchanged), and what the planner found."""
    if time_limit <= 0 or len(steps) < 3:
        return list(steps), None
    bufs = graph.buffers()
    sizes: dict[str, int] = {}
    for name, b in bufs.items():
        ext = sympy.sympify(b.layout.storage_extent())
        if not isinstance(ext, sympy.Integer):
            return list(steps), None  # symbolic sizes: keep the fused order
        sizes[name] = int(ext) * b.layout.dtype.itemsize
    inputs = {b.name for b in graph.inputs if isinstance(b, InputBuffer)} | {c.name for c in graph.constants}
    nodes: list[PNode] = []
    extra: list[PBuffer] = []
    seen_readers: dict[str, list[int]] = {}
    for i, st in enumerate(steps):
        reads = [r for r in step_reads(st) if r in sizes]
        deps: list[str] = []
        if isinstance(st, ExternKernel):
            for m in st.mutates:  # every earlier reader of m first
                for j in seen_readers.get(m, []):
                    dep = f"__order_{j}_{i}"
                    if dep not in deps:
                        extra.append(PBuffer(dep, 0))
                        deps.append(dep)
        for r in reads:
            seen_readers.setdefault(r, []).append(i)
        nodes.append(PNode(f"s{i}", tuple(dict.fromkeys(reads + deps)), tuple(step_writes(st))))
    for dep_buf in extra:  # the dependency buffer is written by its reader step
        j = int(dep_buf.name.split("_")[3])
        n = nodes[j]
        nodes[j] = PNode(n.name, n.reads, (*n.writes, dep_buf.name))
    written = {w for n in nodes for w in n.writes}
    used = {r for n in nodes for r in n.reads} | written
    pbufs = [PBuffer(name, sizes[name], input=name in inputs, output=name in outputs)
             for name in sizes if name in used and (name in inputs or name in written)]
    res = best_order(PGraph(tuple(pbufs + extra), tuple(nodes)), time_limit=time_limit)
    report = OrderReport(res.baseline_peak, min(res.peak, res.baseline_peak), res.method)
    if res.peak >= res.baseline_peak:
        return list(steps), report
    return [steps[int(n[1:])] for n in res.order], report
