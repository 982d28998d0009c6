"""Search for a low-peak topological order: exact, beam and local improvement, under a budget.

* ``exact_order``: bottleneck shortest path (Dijkstra on the max of live bytes) over the sets of
  executed nodes. The live bytes after a set do not depend on the order that produced it, so the
  first time the full set is popped its peak is optimal. Exponential: it gives up past a state
  limit or the deadline.
* ``beam_order``: the same state space, level by level, keeping the ``width`` most promising
  sets (lowest peak so far, then fewest live bytes).
* ``improve_order``: moves single nodes to other legal positions while that lowers the peak.
* ``best_order``: runs the baselines, then the searches, and returns the best order found.
"""

from __future__ import annotations

import heapq
import time
from dataclasses import dataclass

from coil.memory_planner.graph import Graph
from coil.memory_planner.orders import Liveness, bfs_order, dfs_order, lpmf_order

__all__ = ["OrderResult", "beam_order", "best_order", "exact_order", "improve_order"]


@dataclass(frozen=True)
class OrderResult:
    """The order chosen by :func:`best_order`.

    Attributes:
        order: node names in execution order.
        peak: its peak of live bytes.
        baseline_peak: the peak of the graph's own node order.
        method: which algorithm found it.
        optimal: True when the exact search proved no order has a lower peak.
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
    # entries: (peak so far, -nodes done, live, done mask)
    heap: list[tuple[int, int, int, int]] = [(lv.base, 0, lv.base, 0)]
    closed: set[int] = set()
    popped = 0
    while heap:
        cost, negdepth, live, done = heapq.heappop(heap)
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
        for v in range(lv.n):
            if done >> v & 1 or not lv.ready(done, v):
                continue
            running, after = lv.step(done, live, v)
            nxt = done | (1 << v)
            c = max(cost, running)
            if bound is not None and c > bound:
                continue
            if nxt in closed or c >= best_cost.get(nxt, c + 1):
                continue
            best_cost[nxt] = c
            parent[nxt] = (done, v)
            heapq.heappush(heap, (c, negdepth - 1, after, nxt))
    return None


def beam_order(graph: Graph, width: int, *, deadline: float) -> tuple[list[int], int] | None:
    """Beam search keeping ``width`` partial orders per depth; None past the deadline."""
    lv = Liveness(graph)
    beam: list[tuple[int, int, int, list[int]]] = [(lv.base, lv.base, 0, [])]
    for _depth in range(lv.n):
        if time.monotonic() > deadline:
            return None
        nxt: dict[int, tuple[int, int, int, list[int]]] = {}
        for peak, live, done, order in beam:
            for v in range(lv.n):
                if done >> v & 1 or not lv.ready(done, v):
                    continue
                running, after = lv.step(done, live, v)
                mask = done | (1 << v)
                cand = (max(peak, running), after, mask, order)
                old = nxt.get(mask)
                if old is None or cand[:2] < old[:2]:
                    nxt[mask] = (cand[0], cand[1], mask, [*order, v])
        beam = heapq.nsmallest(width, nxt.values(), key=lambda s: (s[0], s[1]))
    peak, _live, _done, order = min(beam, key=lambda s: s[0])
    return order, peak


def improve_order(graph: Graph, order: list[int], *, deadline: float) -> tuple[list[int], int]:
    """Local search: move one node at a time to the legal position that lowers the peak most.

    Repeats until no single move helps or the deadline passes; always returns a topological
    order no worse than ``order``.
    """
    lv = Liveness(graph)
    best = list(order)
    best_peak = lv.peak(best)
    improved = True
    while improved and time.monotonic() < deadline:
        improved = False
        for k in range(len(best)):
            if time.monotonic() > deadline:
                break
            v = best[k]
            rest = best[:k] + best[k + 1 :]
            pos = {u: i for i, u in enumerate(rest)}
            lo = max((pos[p] + 1 for p in graph.preds[v]), default=0)
            hi = min((pos[s] for s in lv.succs[v]), default=len(rest))
            for j in range(lo, hi + 1):
                if j == k:
                    continue
                cand = [*rest[:j], v, *rest[j:]]
                p = lv.peak(cand)
                if p < best_peak:
                    best, best_peak, improved = cand, p, True
                    break
            if improved:
                break
    return best, best_peak


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
    lowest index). BFS, DFS and LPMF run first; then the exact search (small graphs), beam
    searches of growing width, and local improvement of the best order so far. The result is
    never worse than the baseline or any of the three heuristics.
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
    optimal = False
    exact = exact_order(graph, deadline=time.monotonic() + time_limit / 2, bound=peak)
    if exact is not None:
        order, peak, method, optimal = exact[0], exact[1], "exact", True
    else:
        width = 4
        while time.monotonic() < deadline - time_limit / 4 and width <= 4096:
            res = beam_order(graph, width, deadline=deadline - time_limit / 4)
            if res is not None and res[1] < peak:
                order, peak, method = res[0], res[1], f"beam-{width}"
            width *= 4
        new_order, new_peak = improve_order(graph, order, deadline=deadline)
        if new_peak < peak:
            order, peak, method = new_order, new_peak, f"{method}+local"
    names = tuple(graph.nodes[v].name for v in order)
    return OrderResult(names, peak, baseline_peak, method, optimal)
