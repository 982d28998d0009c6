"""Local search over orders: move one node at a time, each move priced incrementally.

A move takes node ``v`` from position ``k`` to another legal position ``j`` (after all its
predecessors, before all its successors). Only the steps between ``j`` and ``k`` change their
live bytes, and they can be priced by sliding ``v`` one position at a time: when ``v`` passes a
neighbour ``u``, only the two of them change, by amounts that depend on ``v``'s and ``u``'s own
buffers (see :meth:`_Profile.slide_left` / :meth:`_Profile.slide_right`). With prefix and suffix
maxima of the live bytes of the current order, each candidate position costs O(buffers of v),
so all positions of one node cost O(window x buffers) instead of O(window x n x buffers).

The objective is lexicographic: the peak, then the number of steps at the peak (so that a graph
with several steps at the peak can be improved one step at a time). Only nodes whose window
holds a step at the peak can improve it; a slide stops as soon as a passed step exceeds the peak.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Sequence

from coil.memory_planner.graph import Graph

__all__ = ["improve_order"]


class _Static:
    """Per-graph tables by node index and buffer index ("tracked" = freed after its readers)."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        n = len(graph.nodes)
        self.n = n
        bidx = {b.name: i for i, b in enumerate(graph.buffers)}
        self.size = [b.size for b in graph.buffers]
        self.base = sum(b.size for b in graph.buffers if b.input)
        tracked = [
            b.name in graph.writer and not b.output and not b.input for b in graph.buffers
        ]
        self.tracked = tracked
        self.writer = [graph.writer.get(b.name, -1) for b in graph.buffers]
        self.readers = [list(graph.readers[b.name]) for b in graph.buffers]
        self.output = [b.output for b in graph.buffers]
        # reads[v]: tracked buffers v reads; kept[v]: bytes of v's writes that outlive v's step;
        # writes_all[v]: bytes of all v's writes
        self.reads: list[list[int]] = []
        self.read_set: list[set[int]] = []
        self.kept: list[int] = []
        self.writes_all: list[int] = []
        for node in graph.nodes:
            rs = [bidx[r] for r in dict.fromkeys(node.reads) if tracked[bidx[r]]]
            self.reads.append(rs)
            self.read_set.append(set(rs))
            ws = [bidx[w] for w in dict.fromkeys(node.writes)]
            self.kept.append(sum(self.size[w] for w in ws if self.readers[w] or self.output[w]))
            self.writes_all.append(sum(self.size[w] for w in ws))
        self.preds = [list(p) for p in graph.preds]
        self.succs: list[list[int]] = [[] for _ in range(n)]
        for v in range(n):
            for p in graph.preds[v]:
                self.succs[p].append(v)


class _Profile:
    """One order with its live bytes per step and the tables that price moves."""

    def __init__(self, st: _Static, order: Sequence[int]) -> None:
        self.st = st
        self.order = list(order)
        n = st.n
        pos = [0] * n
        for k, v in enumerate(self.order):
            pos[v] = k
        self.pos = pos
        # end[b]: position of the last step at which tracked buffer b is live
        end = [0] * len(st.size)
        delta = [0] * (n + 1)
        for b, size in enumerate(st.size):
            w = st.writer[b]
            if w < 0:
                continue
            start = pos[w]
            e = n - 1 if st.output[b] else max([start, *(pos[r] for r in st.readers[b])])
            end[b] = e
            delta[start] += size
            delta[e + 1] -= size
        self.end = end
        live = []
        acc = st.base
        for k in range(n):
            acc += delta[k]
            live.append(acc)
        self.live = live
        self.peak = max([st.base, *live])
        peak = self.peak
        self.peak_count = sum(1 for x in live if x == peak)
        self.at_peak = [k for k, x in enumerate(live) if x == peak]
        # freed_at[k]: bytes of tracked buffers whose last reader is the node at step k
        self.freed_at = [
            sum(st.size[b] for b in st.reads[v] if end[b] == k) for k, v in enumerate(self.order)
        ]
        neg = -1
        self.pre_max = []
        self.pre_cnt = []
        m, c = neg, 0
        for x in live:
            m = max(m, x)
            c += x == peak
            self.pre_max.append(m)
            self.pre_cnt.append(c)
        self.suf_max = [neg] * (n + 1)
        self.suf_cnt = [0] * (n + 1)
        m, c = neg, 0
        for k in range(n - 1, -1, -1):
            m = max(m, live[k])
            c += live[k] == peak
            self.suf_max[k] = m
            self.suf_cnt[k] = c

    def _peak_in(self, lo: int, hi: int) -> bool:
        """True when some step in [lo, hi] is at the peak."""
        i = bisect.bisect_left(self.at_peak, lo)
        return i < len(self.at_peak) and self.at_peak[i] <= hi

    def slide_left(self, v: int) -> tuple[tuple[int, int], int] | None:
        """The best ((peak, count at peak), position) for moving ``v`` earlier, or None."""
        st, live, pos, order = self.st, self.live, self.pos, self.order
        k = pos[v]
        lo = max((pos[p] + 1 for p in st.preds[v]), default=0)
        if lo >= k or not self._peak_in(lo, k):
            return None
        size, end, peak = st.size, self.end, self.peak
        ends_here = [b for b in st.reads[v] if end[b] == k]  # v is their last reader
        live_v = live[k]
        passed_max, passed_cnt = -1, 0
        best: tuple[tuple[int, int], int] | None = None
        suf_max, suf_cnt = self.suf_max[k + 1], self.suf_cnt[k + 1]
        for t in range(k - 1, lo - 1, -1):
            u = order[t]
            reads_u = st.read_set[u]
            u_new = live[t] + st.kept[v] - sum(size[b] for b in ends_here if b not in reads_u)
            if ends_here:
                ends_here = [b for b in ends_here if b not in reads_u]
            live_v += self.freed_at[t] - st.kept[u]
            if u_new > passed_max:
                passed_max = u_new
            passed_cnt += u_new == peak
            if passed_max > peak:
                break
            before = self.pre_max[t - 1] if t else -1
            new_peak = max(before, passed_max, live_v, suf_max)
            if new_peak > peak:
                continue
            cnt = (self.pre_cnt[t - 1] if t else 0) + passed_cnt + (live_v == peak) + suf_cnt
            score = (new_peak, cnt if new_peak == peak else 0)
            if best is None or score < best[0]:
                best = (score, t)
        return best

    def slide_right(self, v: int) -> tuple[tuple[int, int], int] | None:
        """The best ((peak, count at peak), position) for moving ``v`` later, or None."""
        st, live, pos, order = self.st, self.live, self.pos, self.order
        n = st.n
        k = pos[v]
        hi = min((pos[s] - 1 for s in st.succs[v]), default=n - 1)
        if hi <= k or not self._peak_in(k, hi):
            return None
        size, end, peak = st.size, self.end, self.peak
        reads_v = st.reads[v]
        ends_here = {b for b in reads_v if end[b] == k}
        live_v = live[k]
        passed_max, passed_cnt = -1, 0
        best: tuple[tuple[int, int], int] | None = None
        pre_max = self.pre_max[k - 1] if k else -1
        pre_cnt = self.pre_cnt[k - 1] if k else 0
        for t in range(k + 1, hi + 1):
            u = order[t]
            reads_u = st.read_set[u]
            u_new = live[t] - st.kept[v] + sum(size[b] for b in ends_here if b not in reads_u)
            shared_last = [b for b in reads_v if end[b] == t and b in reads_u]
            for b in shared_last:
                ends_here.add(b)
            live_v += st.kept[u] - self.freed_at[t] + sum(size[b] for b in shared_last)
            if u_new > passed_max:
                passed_max = u_new
            passed_cnt += u_new == peak
            if passed_max > peak:
                break
            new_peak = max(pre_max, passed_max, live_v, self.suf_max[t + 1])
            if new_peak > peak:
                continue
            cnt = pre_cnt + passed_cnt + (live_v == peak) + self.suf_cnt[t + 1]
            score = (new_peak, cnt if new_peak == peak else 0)
            if best is None or score < best[0]:
                best = (score, t)
        return best

    def moved(self, v: int, j: int) -> list[int]:
        """The order with ``v`` moved to position ``j``."""
        rest = self.order[: self.pos[v]] + self.order[self.pos[v] + 1 :]
        return [*rest[:j], v, *rest[j:]]


def improve_order(graph: Graph, order: list[int], *, deadline: float) -> tuple[list[int], int]:
    """Local search: move single nodes to the legal position that lowers the peak most.

    A move is taken when it lowers the peak, or keeps it and lowers the number of steps at the
    peak. Repeats until no single move helps or the deadline passes; always returns a
    topological order no worse than ``order`` (raises ``ValueError`` if ``order`` is not one).
    """
    if not graph.is_topological(order):
        raise ValueError("order is not a topological order of the graph")
    st = _Static(graph)
    prof = _Profile(st, order)
    improved = True
    while improved and time.monotonic() < deadline:
        improved = False
        current = (prof.peak, prof.peak_count)
        # nodes near the peak steps first: only moves whose window holds a peak step can help
        first = prof.at_peak[0] if prof.at_peak else 0
        candidates = sorted(range(st.n), key=lambda v: abs(prof.pos[v] - first))
        for i, v in enumerate(candidates):
            if i % 64 == 0 and time.monotonic() > deadline:
                break
            best = None
            for res in (prof.slide_left(v), prof.slide_right(v)):
                if res is not None and res[0] < current and (best is None or res[0] < best[0]):
                    best = res
            if best is not None:
                prof = _Profile(st, prof.moved(v, best[1]))
                improved = True
                break
    return prof.order, prof.peak
