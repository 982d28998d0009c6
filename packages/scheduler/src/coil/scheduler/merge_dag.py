"""The dependency DAG between fusion groups, with the cycle check fusion asks before each merge.

Fusing groups a and b into one kernel is legal for the dependencies only when no path joins
a and b through a third group (the merged kernel would then both feed and read that group).
A plain backward search from one of them answers that, but visits every ancestor, down to the
graph's inputs, at every attempt. `MergeDag` keeps a topological order of the groups (`rank`:
a group's index in it) valid across merges; along any path ranks increase, so a path from the
lower-ranked `lo` to the higher-ranked `hi` only visits groups ranked strictly between them, and
the search stops at `lo`'s rank.

Why the order stays topological after merging a and b (no path through a third group): the
groups ranked between them are split, each part in its previous order, into the ancestors of
`hi` (first) and the rest (after the merged group, which takes their window). An edge from the
rest to an ancestor of `hi` would make the former an ancestor too; a successor of `lo` in the
window is no ancestor of `hi` (that would be a path through a third group); `hi`'s
predecessors in the window are its ancestors; `lo`'s predecessors and `hi`'s successors lie
outside the window.
"""

from __future__ import annotations

import graphlib


class MergeDag:
    """Groups (ints) with their predecessor sets, merged in place.

    Args:
        preds: the predecessors of every group; the dict is owned and updated by `merge`. Its
            key order is used as the topological order when it is one (the one-op groups of an
            operation list), else one is computed.

    Raises:
        RuntimeError: the dependencies have a cycle.
    """

    def __init__(self, preds: dict[int, set[int]]) -> None:
        self.preds = preds
        self._topo: list[int | None] = list(preds)
        self._rank = {g: i for i, g in enumerate(self._topo)}
        if any(self._rank[p] >= self._rank[g] for g, ps in preds.items() for p in ps):
            try:
                self._topo = list(graphlib.TopologicalSorter(preds).static_order())
            except graphlib.CycleError as e:
                raise RuntimeError("scheduler: dependency cycle between kernel groups") from e
            self._rank = {g: i for i, g in enumerate(self._topo)}

    def order(self) -> list[int]:
        """The groups in the current topological order."""
        return [g for g in self._topo if g is not None]

    def _ancestors_between(self, lo: int, hi: int) -> set[int]:
        """The ancestors of `hi` ranked strictly above `lo` (reached other than by a direct edge
        lo -> hi); stops at the first one that `lo` feeds directly, returned with `lo` in the set."""
        rank, preds = self._rank, self.preds
        floor = rank[lo]
        stack = [p for p in preds[hi] if p != lo and rank[p] > floor]
        seen: set[int] = set()
        while stack:
            g = stack.pop()
            if g in seen:
                continue
            seen.add(g)
            for p in preds[g]:
                if p == lo:
                    seen.add(lo)
                    return seen
                if rank[p] > floor and p not in seen:
                    stack.append(p)
        return seen

    def _ordered(self, a: int, b: int) -> tuple[int, int]:
        return (a, b) if self._rank[a] < self._rank[b] else (b, a)

    def creates_cycle(self, a: int, b: int) -> bool:
        """Is there a path between a and b (either way) through some third group?"""
        lo, hi = self._ordered(a, b)
        return lo in self._ancestors_between(lo, hi)

    def merge(self, a: int, b: int, keep: int) -> None:
        """Merge groups a and b (`creates_cycle(a, b)` is False) into `keep`, one of the two:
        the other's edges move to `keep` and the order stays topological (module docstring)."""
        drop = b if keep == a else a
        assert keep in (a, b) and drop != keep
        lo, hi = self._ordered(a, b)
        anc = self._ancestors_between(lo, hi)
        assert lo not in anc, "merging these groups would create a cycle"
        topo, rank = self._topo, self._rank
        start, end = rank[lo], rank[hi]
        between = [g for g in topo[start + 1:end] if g is not None]
        window: list[int | None] = [g for g in between if g in anc]
        window.append(keep)
        window += [g for g in between if g not in anc]
        window += [None] * (end + 1 - start - len(window))  # the merged-away slot: a hole, no rank moves
        topo[start:end + 1] = window
        for i, g in enumerate(window, start):
            if g is not None:
                rank[g] = i
        del rank[drop]
        preds = self.preds
        preds[keep] = (preds[keep] | preds.pop(drop)) - {keep, drop}
        for ps in preds.values():
            if drop in ps:
                ps.discard(drop)
                ps.add(keep)
