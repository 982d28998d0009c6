"""Collectives overlapped with compute: each launch as early and each wait as late as the data
dependences allow, within a bound on the planned peak (`overlap_order`).

Between a collective's launch and its wait the GPU computes whatever else is ready while the
collective runs on its own stream; an order that waits right after launching (the traced
program's) hides nothing. `overlap_order` moves, in the ordered schedule:

1. every launch, first to last, up to just after the last earlier step it depends on, never
   past another launch (so the launches keep their order: every rank issues the collectives in
   one order, `collectives` module docstring);
2. every wait, last to first, down to just before the first later step that depends on it.

Two steps depend on each other when one writes (stores, mutates, defines the size symbol of)
what the other reads or writes. A wait counts as writing its collective's result (readers of
that buffer, not only of the wait's alias, stay after it) and as reading what its collective
reads (`collectives.in_flight_reads`: nothing may overwrite those before the wait). The moves
are deterministic (the order and the steps alone decide them), so every rank makes the same.

Memory bound: overlapping costs memory (a collective's inputs and result stay live while it
runs), so the moved order is kept only when its peak of live bytes in the memory planner's model
(`ordering.planner_graph`, where the wait keeps its collective's inputs live) is at most
PEAK_GROWTH above the peak of the order it came from; otherwise the waits alone are moved, under
the same bound, or nothing. Symbolic sizes are taken at the graph's size hints (which may differ
between ranks: then so may the waits' places, never the launches' order); a size with no hint
(a data-dependent one) keeps the order.
"""

from __future__ import annotations

from collections.abc import Sequence, Set

from coil.lowering_ir import ExternKernel, LoweredGraph
from coil.lowering_ir.nodes import used_symbols
from coil.memory_planner import Graph as PGraph
from coil.memory_planner import live_bytes_per_step
from coil.scheduler.collectives import is_launch, is_wait, waited_launches
from coil.scheduler.ordering import StepT, planner_graph, step_reads, step_writes

Access = tuple[frozenset[str], frozenset[str]]

# how much higher (a fraction of its peak) an overlapped order's planned peak may be than the
# order it came from: hiding a collective is worth some memory, not an unbounded amount
PEAK_GROWTH = 1 / 8


def accesses(steps: Sequence[StepT]) -> list[Access]:
    """(reads, writes) of each step, as the module docstring counts them; size symbols as
    `sym:<name>`."""
    waited = waited_launches(steps)
    out: list[Access] = []
    for i, st in enumerate(steps):
        reads = set(step_reads(st)) | {f"sym:{s}" for s in used_symbols(st)}
        writes = set(step_writes(st))
        if isinstance(st, ExternKernel):
            writes |= set(st.mutates) | {f"sym:{s}" for s in st.defined_symbols()}
        for launch in waited.get(i, ()):  # what `in_flight_reads` gives this wait, and the results
            reads |= set(step_reads(steps[launch]))
            writes |= set(step_writes(steps[launch]))
        out.append((frozenset(reads - writes), frozenset(writes)))
    return out


def _depends(a: Access, b: Access) -> bool:
    return bool(a[1] & (b[0] | b[1]) or a[0] & b[1])


def _moved(steps: Sequence[StepT], acc: Sequence[Access], launches: bool) -> list[int]:
    """The order (indices into `steps`) with launches raised (when `launches`) and waits sunk;
    `acc` is `accesses(steps)`."""
    launch = [is_launch(st) for st in steps]
    order = list(range(len(steps)))
    if launches:
        for i in [i for i in order if launch[i]]:
            p = order.index(i)
            q = p
            while q > 0 and not launch[order[q - 1]] and not _depends(acc[order[q - 1]], acc[i]):
                q -= 1
            order.insert(q, order.pop(p))
    for i in reversed([i for i in order if is_wait(steps[i])]):
        p = order.index(i)
        q = p
        while q + 1 < len(order) and not _depends(acc[i], acc[order[q + 1]]):
            q += 1
        order.insert(q, order.pop(p))
    return order


def _peak(pg: PGraph, order: Sequence[int]) -> int | None:
    try:
        return max(live_bytes_per_step(pg, order), default=0)
    except ValueError:  # not an order of the planner graph: never taken
        return None


def overlap_order(steps: Sequence[StepT], graph: LoweredGraph, outputs: Set[str]) -> list[int] | None:
    """The overlapped order of `steps` (indices), or None to keep it (see the module docstring)."""
    if not any(is_launch(st) for st in steps):
        return None
    pg = planner_graph(steps, graph, outputs, graph.symbol_hints)
    if pg is None:
        return None
    base = _peak(pg, range(len(steps)))
    assert base is not None
    acc = accesses(steps)
    for launches in (True, False):
        order = _moved(steps, acc, launches)
        if order == list(range(len(steps))):
            continue
        peak = _peak(pg, order)
        if peak is not None and peak <= base * (1 + PEAK_GROWTH):
            return order
    return None
