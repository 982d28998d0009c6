"""Baseline topological orders (BFS, DFS, LPMF) and the incremental liveness model they share.

All orders are lists of node indices. ``Liveness`` tracks live bytes incrementally over a set of
executed nodes (a bit mask), following the rules of :mod:`coil.memory_planner.graph`;
``peak_of_order`` there is the independent oracle the tests compare against.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

from coil.memory_planner.graph import Graph

__all__ = ["Liveness", "bfs_order", "dfs_order", "lpmf_order"]


class Liveness:
    """Precomputed masks for stepping through a graph one node at a time.

    ``step(done, live, v)`` returns ``(bytes while v runs, bytes after v)`` given the mask of
    executed nodes ``done`` (without ``v``) and the live bytes ``live`` after them.
    """

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        n = len(graph.nodes)
        self.n = n
        self.full = (1 << n) - 1
        self.base = sum(b.size for b in graph.buffers if b.input)
        self.pred_mask = [sum(1 << p for p in graph.preds[v]) for v in range(n)]
        self.succs: list[list[int]] = [[] for _ in range(n)]
        for v in range(n):
            for p in graph.preds[v]:
                self.succs[p].append(v)
        sizes = {b.name: b.size for b in graph.buffers}
        outputs = {b.name for b in graph.buffers if b.output}
        readers = {name: sum(1 << r for r in rs) for name, rs in graph.readers.items()}
        self.write_bytes = [
            sum(sizes[w] for w in dict.fromkeys(node.writes)) for node in graph.nodes
        ]
        # buffers whose freeing v may trigger: (readers mask, size), outputs never freed
        self.touch: list[list[tuple[int, int]]] = []
        for node in graph.nodes:
            touched = []
            for name in dict.fromkeys((*node.reads, *node.writes)):
                if name in graph.writer and name not in outputs:
                    touched.append((readers[name], sizes[name]))
            self.touch.append(touched)

    def ready(self, done: int, v: int) -> bool:
        """True when every predecessor of ``v`` is in ``done``."""
        return self.pred_mask[v] & done == self.pred_mask[v]

    def step(self, done: int, live: int, v: int) -> tuple[int, int]:
        """(live bytes while ``v`` runs, live bytes after it)."""
        running = live + self.write_bytes[v]
        after = done | (1 << v)
        freed = 0
        for mask, size in self.touch[v]:
            if mask & ~after == 0:
                freed += size
        return running, running - freed

    def peak(self, order: Sequence[int]) -> int:
        """Peak of ``order`` (assumed topological), computed incrementally."""
        done, live, peak = 0, self.base, self.base
        for v in order:
            running, live = self.step(done, live, v)
            peak = max(peak, running)
            done |= 1 << v
        return peak


def _kahn(graph: Graph, lifo: bool) -> list[int]:
    lv = Liveness(graph)
    indeg = [len(p) for p in graph.preds]
    order: list[int] = []
    if lifo:
        stack = sorted((v for v in range(lv.n) if not indeg[v]), reverse=True)
        while stack:
            v = stack.pop()
            order.append(v)
            for s in sorted(lv.succs[v], reverse=True):
                indeg[s] -= 1
                if not indeg[s]:
                    stack.append(s)
        return order
    heap = [v for v in range(lv.n) if not indeg[v]]
    heapq.heapify(heap)
    frontier: list[int] = []
    while heap or frontier:
        if not heap:  # next BFS level
            heap, frontier = frontier, []
            heapq.heapify(heap)
        v = heapq.heappop(heap)
        order.append(v)
        for s in lv.succs[v]:
            indeg[s] -= 1
            if not indeg[s]:
                frontier.append(s)
    return order


def bfs_order(graph: Graph) -> list[int]:
    """Breadth-first (level by level) topological order; within a level, lowest index first."""
    return _kahn(graph, lifo=False)


def dfs_order(graph: Graph) -> list[int]:
    """Depth-first topological order: after a node, its newly ready successors run first."""
    return _kahn(graph, lifo=True)


def lpmf_order(graph: Graph) -> list[int]:
    """Least-peak-memory-first greedy order.

    Among the ready nodes, run the one with the fewest live bytes while it runs; ties go to the
    fewest live bytes after it, then to the lowest index.

    All ready nodes share the live bytes before them, so the choice only depends on each node's
    own key ``(bytes it writes, bytes it writes - bytes it frees)``; a node's key changes only
    when a co-reader of one of its buffers runs. A heap with lazy updates and per-buffer counts
    of readers still to run make this O((nodes + edges) log nodes).
    """
    lv = Liveness(graph)
    outputs = {b.name for b in graph.buffers if b.output}
    sizes = {b.name: b.size for b in graph.buffers}
    # tracked buffers: written, not outputs (freed once their readers have run)
    left_readers = {
        name: len(rs) for name, rs in graph.readers.items() if name in graph.writer and name not in outputs
    }
    reads = [[r for r in dict.fromkeys(n.reads) if r in left_readers] for n in graph.nodes]
    dead = [
        sum(sizes[w] for w in dict.fromkeys(n.writes) if w in left_readers and not left_readers[w])
        for n in graph.nodes
    ]

    def key(v: int) -> tuple[int, int, int]:
        freed = dead[v] + sum(sizes[b] for b in reads[v] if left_readers[b] == 1)
        return (lv.write_bytes[v], lv.write_bytes[v] - freed, v)

    indeg = [len(p) for p in graph.preds]
    current: dict[int, tuple[int, int, int]] = {}
    heap: list[tuple[int, int, int]] = []
    for v in range(lv.n):
        if not indeg[v]:
            current[v] = key(v)
            heap.append(current[v])
    heapq.heapify(heap)
    order: list[int] = []
    while heap:
        k = heapq.heappop(heap)
        v = k[2]
        if current.get(v) != k:
            continue  # stale entry
        del current[v]
        order.append(v)
        for b in reads[v]:
            left_readers[b] -= 1
            if left_readers[b] == 1:  # its last reader now frees it: re-key that reader if ready
                for u in graph.readers[b]:
                    if u in current:
                        current[u] = key(u)
                        heapq.heappush(heap, current[u])
        for s in lv.succs[v]:
            indeg[s] -= 1
            if not indeg[s]:
                current[s] = key(s)
                heapq.heappush(heap, current[s])
    return order
