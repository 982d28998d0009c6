"""Lower bounds on the peak of every order, to certify an order optimal without searching.

While node ``v`` runs, in *any* topological order, these buffers are live:

* the graph inputs and everything ``v`` writes;
* every buffer written by an ancestor of ``v`` that is a graph output, or that is read by ``v``
  or by a descendant of ``v`` (its writer has run, one of its readers has not finished).

Their total, :func:`forced_live_bytes`, is a lower bound on the peak of every order; when an
order's peak equals it at one of its peak steps, that order is optimal. Cost: one traversal of
the graph and one pass over its buffers per node asked about.
"""

from __future__ import annotations

from collections.abc import Sequence

from coil.memory_planner.graph import Graph, live_bytes_per_step

__all__ = ["certified_optimal", "forced_live_bytes"]


def _reach(start: int, edges: Sequence[Sequence[int]]) -> set[int]:
    """Nodes reachable from ``start`` along ``edges`` (``start`` excluded)."""
    seen: set[int] = set()
    stack = list(edges[start])
    while stack:
        u = stack.pop()
        if u not in seen:
            seen.add(u)
            stack.extend(edges[u])
    return seen


def forced_live_bytes(graph: Graph, v: int, succs: Sequence[Sequence[int]] | None = None) -> int:
    """Bytes live while node ``v`` runs in every topological order (see the module docstring).

    ``succs`` (successor lists by node index) may be passed to save rebuilding them.
    """
    if succs is None:
        out: list[list[int]] = [[] for _ in graph.nodes]
        for u, ps in enumerate(graph.preds):
            for p in ps:
                out[p].append(u)
        succs = out
    anc = _reach(v, [list(p) for p in graph.preds])
    desc = _reach(v, succs)
    desc.add(v)
    writes = set(graph.nodes[v].writes)
    total = 0
    for b in graph.buffers:
        if b.input or b.name in writes:
            total += b.size
            continue
        w = graph.writer.get(b.name)
        if w is None or w not in anc:
            continue
        if b.output or any(r in desc for r in graph.readers[b.name]):
            total += b.size
    return total


def certified_optimal(graph: Graph, order: Sequence[int], peak: int, max_steps: int = 8) -> bool:
    """True when ``order``'s ``peak`` equals :func:`forced_live_bytes` at one of its peak steps
    (then no order has a lower peak). Only the first ``max_steps`` steps at the peak are
    examined, so a False proves nothing."""
    if not graph.nodes:
        return True
    steps = live_bytes_per_step(graph, order)
    base = sum(b.size for b in graph.buffers if b.input)
    if peak == base:
        return True
    succs: list[list[int]] = [[] for _ in graph.nodes]
    for u, ps in enumerate(graph.preds):
        for p in ps:
            succs[p].append(u)
    at_peak = [v for v, live in zip(order, steps, strict=True) if live == peak][:max_steps]
    return any(forced_live_bytes(graph, v, succs) == peak for v in at_peak)
