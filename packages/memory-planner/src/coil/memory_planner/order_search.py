"""Search for a low-peak topological order: exact, beam and local improvement, under a budget.

* ``exact_order``: bottleneck shortest path (Dijkstra on the max of live bytes) over the sets of
  executed nodes. The live bytes after a set do not depend on the order that produced it, so the
  first time the full set is popped its peak is optimal. Exponential: it gives up past a state
  limit or the deadline.
* ``beam_order``: the same state space, level by level, keeping the ``width`` most promising
  sets (lowest peak so far, then fewest live bytes).
* ``improve_order`` (:mod:`coil.memory_planner.local_search`): moves single nodes to other
  legal positions while that lowers the peak.
* ``best_order``: runs the baselines, then the searches, and returns the best order found.
"""

from __future__ import annotations

import heapq
import time
from dataclasses import dataclass
from typing import Any

from coil.memory_planner.bounds import certified_optimal
from coil.memory_planner.graph import Graph
from coil.memory_planner.local_search import improve_order
from coil.memory_planner.orders import Liveness, bfs_order, dfs_order, lpmf_order

__all__ = ["OrderResult", "beam_order", "best_order", "exact_order", "improve_order"]

_EXACT_SHARE_NODES = 64


@dataclass(frozen=True)
class OrderResult:
    """The order chosen by :func:`best_order`.

    Attributes:
        order: node names in execution order.
        peak: its peak of live bytes.
        baseline_peak: the peak of the graph's own node order.
        method: which algorithm found it.
        optimal: True when no order has a lower peak (the exact search finished, or the peak
            meets the forced-live-bytes lower bound).
    """

    order: tuple[str, ...]
    peak: int
    baseline_peak: int
    method: str
    optimal: bool


def exact_order(
    graph: Graph, *, deadline: float, max_states: int = 200_000, bound: int | None = None
) -> tuple[list[int], int] | None:
    """A minimum-peak order, or None when the deadline or state limit is hit first.

    ``bound``: an achievable peak (prunes every state whose peak already exceeds it).
    """
    lv = Liveness(graph)
    if lv.n == 0:
        return [], lv.base
    best_cost: dict[int, int] = {0: lv.base}
    parent: dict[int, tuple[int, int]] = {}
    # entries: (peak so far, -nodes done, live, done mask, ready nodes)
    roots = tuple(v for v in range(lv.n) if not graph.preds[v])
    heap: list[tuple[int, int, int, int, tuple[int, ...]]] = [(lv.base, 0, lv.base, 0, roots)]
    closed: set[int] = set()
    popped = 0
    while heap:
        cost, negdepth, live, done, ready = heapq.heappop(heap)
        if done in closed:
            continue
        closed.add(done)
        if done == lv.full:
            order: list[int] = []
            while done:
                prev, v = parent[done]
                order.append(v)
                done = prev
            return order[::-1], cost
        popped += 1
        if popped % 512 == 0 and time.monotonic() > deadline:
            return None
        if len(best_cost) > max_states:
            return None
        for v in ready:
            running, after = lv.step(done, live, v)
            nxt = done | (1 << v)
            c = max(cost, running)
            if bound is not None and c > bound:
                continue
            if nxt in closed or c >= best_cost.get(nxt, c + 1):
                continue
            best_cost[nxt] = c
            parent[nxt] = (done, v)
            newly = [s for s in lv.succs[v] if lv.ready(nxt, s)]
            rest = tuple(sorted([u for u in ready if u != v] + newly))
            heapq.heappush(heap, (c, negdepth - 1, after, nxt, rest))
    return None


def beam_order(graph: Graph, width: int, *, deadline: float) -> tuple[list[int], int] | None:
    """Beam search keeping ``width`` partial orders per depth; None past the deadline.

    Each partial order keeps its set of ready nodes, updated as nodes run, so a depth costs
    O(width x ready nodes x buffers per node); two partial orders that ran the same set of nodes
    are merged (the lower (peak, live bytes) survives). Ties break on the earlier partial order,
    then the lower node index, so the result is deterministic.
    """
    lv = Liveness(graph)
    # a partial order: (peak, live, done mask, ready nodes, path as nested (node, parent) pairs)
    root: tuple[int, int, int, tuple[int, ...], Any] = (
        lv.base,
        lv.base,
        0,
        tuple(v for v in range(lv.n) if not graph.preds[v]),
        None,
    )
    beam = [root]
    for _depth in range(lv.n):
        if time.monotonic() > deadline:
            return None
        cands: dict[int, tuple[int, int, int, int]] = {}
        for si, (peak, live, done, ready, _path) in enumerate(beam):
            for v in ready:
                running, after = lv.step(done, live, v)
                mask = done | (1 << v)
                cand = (max(peak, running), after, si, v)
                old = cands.get(mask)
                if old is None or cand < old:
                    cands[mask] = cand
        nxt = []
        for peak, after, si, v in heapq.nsmallest(width, cands.values()):
            _p, _l, done, ready, path = beam[si]
            mask = done | (1 << v)
            newly = [s for s in lv.succs[v] if lv.ready(mask, s)]
            rest = tuple(sorted([u for u in ready if u != v] + newly))
            nxt.append((peak, after, mask, rest, (v, path)))
        beam = nxt
    peak, _live, _done, _ready, path = min(beam, key=lambda s: s[0])
    order: list[int] = []
    while path is not None:
        order.append(path[0])
        path = path[1]
    return order[::-1], peak


def _stable_topological(graph: Graph) -> list[int]:
    """The node list's order when it is topological, else Kahn's order by lowest index."""
    natural = list(range(len(graph.nodes)))
    if graph.is_topological(natural):
        return natural
    lv = Liveness(graph)
    indeg = [len(p) for p in graph.preds]
    heap = [v for v in natural if not indeg[v]]
    order: list[int] = []
    while heap:
        v = heapq.heappop(heap)
        order.append(v)
        for s in lv.succs[v]:
            indeg[s] -= 1
            if not indeg[s]:
                heapq.heappush(heap, s)
    return order


def best_order(graph: Graph, *, time_limit: float = 5.0) -> OrderResult:
    """The lowest-peak topological order found within ``time_limit`` seconds.

    The baseline is the graph's node order (or, if that is not topological, Kahn's order by
    lowest index). BFS, DFS and LPMF run first; then the exact search (half the budget up to
    64 nodes, a tenth beyond), beam searches of growing width until two thirds of the budget,
    and local improvement of the best order so far with what is left. The result is never
    worse than the baseline or any of the three heuristics. The search stops early, with
    ``optimal`` set, as soon as an order's peak meets the lower bound of
    :func:`~coil.memory_planner.bounds.certified_optimal` (or the exact search finishes). The baselines always run, so a
    very large graph may take longer than ``time_limit`` (they are O((nodes + edges) log nodes)).
    """
    deadline = time.monotonic() + time_limit
    lv = Liveness(graph)
    baseline = _stable_topological(graph)
    baseline_peak = lv.peak(baseline)
    cands = {
        "baseline": baseline,
        "bfs": bfs_order(graph),
        "dfs": dfs_order(graph),
        "lpmf": lpmf_order(graph),
    }
    method, order = min(cands.items(), key=lambda kv: lv.peak(kv[1]))
    peak = lv.peak(order)
    optimal = certified_optimal(graph, order, peak)
    if not optimal:
        # the exact search is exponential: on large graphs it gets a small share of the budget
        share = 0.5 if lv.n <= _EXACT_SHARE_NODES else 0.1
        exact = exact_order(graph, deadline=time.monotonic() + time_limit * share, bound=peak)
        if exact is not None:
            order, peak, method, optimal = exact[0], exact[1], "exact", True
    if not optimal:
        beam_deadline = deadline - time_limit / 3
        width = 4
        while time.monotonic() < beam_deadline and width <= 4096 and not optimal:
            res = beam_order(graph, width, deadline=beam_deadline)
            if res is not None and res[1] < peak:
                order, peak, method = res[0], res[1], f"beam-{width}"
                optimal = certified_optimal(graph, order, peak)
            width *= 4
    if not optimal:
        new_order, new_peak = improve_order(graph, order, deadline=deadline)
        if new_peak < peak:
            order, peak, method = new_order, new_peak, f"{method}+local"
            optimal = certified_optimal(graph, order, peak)
    names = tuple(graph.nodes[v].name for v in order)
    return OrderResult(names, peak, baseline_peak, method, optimal)
