"""From a graph and an order to lifetimes: arena blocks and reuse-mode buffer lifetimes.

Step ``k`` is the ``k``-th node of the order. A non-input buffer is live from its writer's step
to its last reader's step (inclusive; its writer's step alone when nobody reads it; the last
step for outputs), exactly as :func:`coil.memory_planner.graph.live_bytes_per_step` counts.
Graph inputs are not returned (they live for the whole run and are never planned).
"""

from __future__ import annotations

from collections.abc import Sequence

from coil.memory_planner.arena import Block
from coil.memory_planner.graph import Graph
from coil.memory_planner.reuse import BufferLifetime

__all__ = ["blocks_from_order", "lifetimes_from_order"]


def _spans(graph: Graph, order: Sequence[int]) -> list[tuple[str, int, int, int, int | None]]:
    """(name, size, first step, last step inclusive, step its size is known) per buffer."""
    if not graph.is_topological(order):
        raise ValueError("order is not a topological order of the graph")
    pos = {v: k for k, v in enumerate(order)}
    index = {n.name: i for i, n in enumerate(graph.nodes)}
    n = len(order)
    out = []
    for b in graph.buffers:
        if b.input or b.name not in graph.writer:
            continue
        start = pos[graph.writer[b.name]]
        end = n - 1 if b.output else max([start, *(pos[r] for r in graph.readers[b.name])])
        known = None if b.size_known_at is None else pos[index[b.size_known_at]]
        out.append((b.name, b.size, start, end, known))
    return out


def blocks_from_order(graph: Graph, order: Sequence[int], alignment: int = 1) -> list[Block]:
    """Arena blocks for ``order``: ``[lower, upper) = [first step, last step + 1)``.

    A buffer whose size is known only after node ``k`` gets ``size_known_at`` = ``k``'s step;
    the graph makes its writer run after ``k``, so the block never starts before it.
    """
    return [
        Block(name, start, end + 1, size, alignment, known)
        for name, size, start, end, known in _spans(graph, order)
    ]


def lifetimes_from_order(
    graph: Graph, order: Sequence[int], pool: str = "default"
) -> list[BufferLifetime]:
    """Reuse-mode lifetimes for ``order`` (outputs end at ``len(order)``, per the contract)."""
    n = len(order)
    outputs = {b.name for b in graph.buffers if b.output}
    return [
        BufferLifetime(name, size, start, n if name in outputs else end, pool)
        for name, size, start, end, _known in _spans(graph, order)
    ]
