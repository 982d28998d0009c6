"""Stable topological sort."""

from __future__ import annotations

import heapq

from coil.fx_passes.conditions import TOPOLOGICALLY_SORTED
from coil.fx_passes.infra import PassResult, graph_pass
from coil.fx_passes.ops import is_impure
from torch.fx import GraphModule, Node

__all__ = ["stable_topological_sort"]


@graph_pass("stable_topological_sort", ensures=(TOPOLOGICALLY_SORTED,))
def stable_topological_sort(gm: GraphModule) -> PassResult:
    """Order nodes so every node follows its inputs, moving as little as possible.

    Stage: any.

    Args:
        gm: the graph module, edited in place.

    Returns:
        ``PassResult(gm, modified)``; modified when some node moved. A sorted graph is
        returned unchanged.

    Example::

        before: b = aten.relu(a); a = aten.exp(x); return b     (a used before defined)
        after:  a = aten.exp(x); b = aten.relu(a); return b

    Soundness: Kahn's algorithm taking, among ready nodes, the one earliest in the current
    order (so the result is deterministic and equals the input when already sorted). Impure
    nodes (mutations, random ops, modules) are barriers: they keep their order with respect to
    every other node that precedes or follows them, so no read moves across a write and random
    ops keep their draw order. Placeholders stay first and the output last.

    Raises:
        ValueError: the graph has a cycle.
    """
    nodes: list[Node] = list(gm.graph.nodes)
    index = {n: i for i, n in enumerate(nodes)}
    preds: dict[Node, set[Node]] = {n: {a for a in n.all_input_nodes if a in index} for n in nodes}
    last_barrier: Node | None = None
    since_barrier: list[Node] = []
    for n in nodes:
        if last_barrier is not None:
            preds[n].add(last_barrier)
        if is_impure(n) or n.op == "output":
            preds[n].update(since_barrier)
            last_barrier, since_barrier = n, []
        else:
            since_barrier.append(n)
    succs: dict[Node, list[Node]] = {n: [] for n in nodes}
    for n, ps in preds.items():
        ps.discard(n)
        for p in ps:
            succs[p].append(n)
    remaining = {n: len(ps) for n, ps in preds.items()}
    ready = [(index[n], n.name) for n in nodes if remaining[n] == 0]
    heapq.heapify(ready)
    by_name = {n.name: n for n in nodes}
    order: list[Node] = []
    while ready:
        _, name = heapq.heappop(ready)
        n = by_name[name]
        order.append(n)
        for s in succs[n]:
            remaining[s] -= 1
            if remaining[s] == 0:
                heapq.heappush(ready, (index[s], s.name))
    if len(order) != len(nodes):
        raise ValueError("graph has a cycle; cannot sort it")
    if order == nodes:
        return PassResult(gm, False)
    cursor = order[0]
    for n in order[1:]:
        cursor.append(n)
        cursor = n
    return PassResult(gm, True)
