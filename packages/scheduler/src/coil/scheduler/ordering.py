"""Order the fused schedule for a low peak of live memory, with the memory planner's search.

`planner_graph` is the bridge: each step becomes a planner node reading and writing storage
buffers; inputs and constants are planner inputs, returned buffers planner outputs. A step that
mutates an input (`copy_` epilogue) must run after every earlier reader of it: zero-byte
dependency buffers say so. `order_steps` runs the planner's search on that graph and takes its
order only when its peak is lower than the fused order's; sizes must be static (with symbolic
sizes the fused order is kept).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass

import sympy
from coil.lowering_ir import ExternKernel, InputBuffer, LoweredGraph, Scatter
from coil.lowering_ir.nodes import used_symbols
from coil.memory_planner import Buffer as PBuffer
from coil.memory_planner import Graph as PGraph
from coil.memory_planner import Node as PNode
from coil.memory_planner import best_order, live_bytes_per_step
from coil.scheduler.collectives import in_flight_reads, launch_steps
from coil.scheduler.group import KernelGroup

StepT = KernelGroup | ExternKernel | Scatter


@dataclass(frozen=True)
class OrderReport:
    """Peaks (bytes, planner model) of the fused order and of the order used; `inputs`: the bytes
    of the graph inputs and constants some step reads, live for the whole call and so part of
    both peaks. The order used in detail (`profile`): `step_bytes[t]`, the bytes of the buffers
    the steps write that are live while step t runs; `input_last`, per input or constant some
    step reads, (name, bytes, the last step reading it), so a caller that knows which inputs the
    call releases after their last read can tell the peak of that call."""

    baseline_peak: int
    peak: int
    method: str
    inputs: int
    step_bytes: tuple[int, ...] = ()
    input_last: tuple[tuple[str, int, int], ...] = ()


def profile(pg: PGraph, order: Sequence[int]) -> tuple[tuple[int, ...], tuple[tuple[str, int, int], ...]]:
    """`OrderReport.step_bytes` and `input_last` of the planner graph `pg` run in `order` (node
    indices)."""
    base = input_bytes(pg)
    step_bytes = tuple(b - base for b in live_bytes_per_step(pg, order))
    pos = {v: k for k, v in enumerate(order)}
    last: dict[str, int] = {}
    for v, node in enumerate(pg.nodes):
        for r in node.reads:
            last[r] = max(last.get(r, -1), pos[v])
    inputs = tuple((b.name, b.size, last[b.name]) for b in pg.buffers if b.input and b.name in last)
    return step_bytes, inputs


def step_reads(st: StepT) -> list[str]:
    """Storage buffers a step reads from memory (a group's own stores and internals excluded)."""
    if isinstance(st, KernelGroup):
        own = set(st.stores) | set(st.internal)
        return list(dict.fromkeys(r for m in st.members for r in m.op.reads() if r not in own))
    return st.reads()


def step_writes(st: StepT) -> list[str]:
    """Storage buffers a step writes to memory (a group's stores; an operation's outputs)."""
    if isinstance(st, KernelGroup):
        return list(st.stores)
    return [b.name for b in st.outputs]


def planner_graph(steps: Sequence[StepT], graph: LoweredGraph, outputs: Set[str],
                  hints: Mapping[sympy.Symbol, int] | None = None) -> PGraph | None:
    """The memory planner's graph of `steps`, or None when a buffer size is symbolic (and
    `hints` do not fix it).

    Args:
        steps: the schedule's steps in their current order (the planner graph's baseline order).
        graph: the lowered graph the steps come from (buffer layouts give the sizes).
        outputs: storage buffers the graph returns (`output_buffers(graph.outputs)`).
        hints: values for size symbols (`graph.symbol_hints`): a symbolic size is taken at them.

    Returns:
        A `coil.memory_planner.Graph` with one node `s{i}` per step `i` (in step order); one
        buffer per storage buffer used, sized `storage_extent * itemsize` bytes; graph inputs and
        constants are planner inputs, `outputs` planner outputs. For every step that mutates a
        buffer (an ExternKernel's `mutates`), each earlier reader `j` of that buffer writes a
        zero-byte buffer `__order_{j}_{i}` that the mutating step `i` reads, so every order of
        the planner graph is a legal order of the steps. Likewise the extern step `j` defining
        an unbacked symbol (a data-dependent size) that step `i` uses writes `__order_{j}_{i}`,
        and each collective launch `j` writes `__order_{j}_{i}` for the next launch `i`, so that
        every order launches the collectives in program order, on every rank alike (a search
        bounded by time may find other orders on other ranks). A collective's wait reads what
        its launch reads (`collectives.in_flight_reads`): those buffers are live until it.
    """
    sizes: dict[str, int] = {}
    for name, b in graph.buffers().items():
        ext = sympy.sympify(b.layout.storage_extent())
        if hints and not isinstance(ext, sympy.Integer):
            ext = sympy.sympify(ext.xreplace(dict(hints)))
        if not isinstance(ext, sympy.Integer):
            return None
        sizes[name] = int(ext) * b.layout.dtype.itemsize
    inputs = {b.name for b in graph.inputs if isinstance(b, InputBuffer)}
    inputs |= {c.name for c in graph.constants}
    reads: list[list[str]] = []
    writes: list[list[str]] = [list(step_writes(st)) for st in steps]
    deps: list[str] = []
    seen_readers: dict[str, list[int]] = {}
    definer = {sym: j for j, st in enumerate(steps) if isinstance(st, ExternKernel) for sym in st.defined_symbols()}
    flight = in_flight_reads(steps)
    launches = launch_steps(steps)
    previous_launch = dict(zip(launches[1:], launches, strict=False))
    for i, st in enumerate(steps):
        own = list(dict.fromkeys([r for r in step_reads(st) + flight.get(i, []) if r in sizes]))
        extra: list[str] = []
        if i in previous_launch:
            dep = f"__order_{previous_launch[i]}_{i}"
            extra.append(dep)
            writes[previous_launch[i]].append(dep)
        for sym in sorted(used_symbols(st) & definer.keys(), key=str) if definer else ():
            j = definer[sym]
            dep = f"__order_{j}_{i}"
            if j != i and dep not in extra:
                extra.append(dep)
                writes[j].append(dep)
        if isinstance(st, ExternKernel):
            for m in st.mutates:  # every earlier reader of m first
                for j in seen_readers.get(m, []):
                    dep = f"__order_{j}_{i}"
                    if dep not in extra:
                        extra.append(dep)
                        writes[j].append(dep)
        for r in own:
            seen_readers.setdefault(r, []).append(i)
        deps += extra
        reads.append(list(dict.fromkeys(own + extra)))
    nodes = [PNode(f"s{i}", tuple(r), tuple(w)) for i, (r, w) in enumerate(zip(reads, writes, strict=True))]
    written = {w for ws in writes for w in ws}
    used = {r for rs in reads for r in rs} | written
    pbufs = [
        PBuffer(name, sizes[name], input=name in inputs, output=name in outputs)
        for name in sizes
        if name in used and (name in inputs or name in written)
    ]
    return PGraph(tuple(pbufs + [PBuffer(d, 0) for d in deps]), tuple(nodes))


def input_bytes(pg: PGraph) -> int:
    """The bytes of a planner graph's input buffers (graph inputs and constants)."""
    return sum(b.size for b in pg.buffers if b.input)


def order_steps(steps: Sequence[StepT], graph: LoweredGraph, outputs: set[str],
                time_limit: float) -> tuple[list[StepT], OrderReport | None]:
    """`steps` reordered for a lower peak (or unchanged), and what the planner found.

    Runs `coil.memory_planner.best_order` on `planner_graph(steps, graph, outputs)` for at most
    `time_limit` seconds. Returns the steps unchanged (and no report) when `time_limit <= 0`,
    with fewer than three steps, or with symbolic sizes; unchanged with a report when the
    planner finds no lower peak.
    """
    if time_limit <= 0 or len(steps) < 3:
        return list(steps), None
    pg = planner_graph(steps, graph, outputs)
    if pg is None:
        return list(steps), None  # symbolic sizes: keep the fused order
    res = best_order(pg, time_limit=time_limit)
    taken = res.peak < res.baseline_peak
    used = [int(n[1:]) for n in res.order] if taken else list(range(len(steps)))
    report = OrderReport(res.baseline_peak, min(res.peak, res.baseline_peak), res.method, input_bytes(pg),
                         *profile(pg, used))
    return [steps[i] for i in used], report
