"""Exact arena packing by depth-first search over "lowest section first" decisions.

Our own formulation, in the spirit of MiniMalloc (Moffitt, ASPLOS 2023):

* Time is cut into *sections* between consecutive lifetime ends; each section has a *floor*,
  the top of what is placed there (or a raised level under which nothing more will go).
* *Gravity.* Any packing can be pushed down until every block rests on a block that overlaps it
  in time, or on 0; so a block's offset is the highest floor over its lifetime (its *skyline*).
* Each step takes the open section ``s`` with the lowest floor ``h`` and branches: either one of
  the unplaced blocks covering ``s`` whose skyline is ``h`` goes to offset ``h``, or none will
  (the *skip* branch) and the floor of ``s`` rises to the lowest level at which a block covering
  it can still sit: its skyline when that is above ``h``, else the lowest top
  (``skyline + size``) of an unplaced neighbour that does not cover ``s`` and could lift it.
  When no block covering ``s`` has skyline ``h`` the rise is forced. This loses no packing, so
  the search is complete for a fixed capacity.
* *Inference.* The unplaced blocks of a section live together above its floor, so
  ``floor[t] + remaining[t] <= capacity`` for every section; every unplaced block must fit below
  the capacity at its skyline. Identical blocks (same lifetime and size) are interchangeable:
  only one of them is tried per step.
* *Backjumping.* A failed subtree returns a set ``E`` of sections (a bit mask) that explains
  the failure: the unplaced blocks covering a section of ``E`` do not fit at or above their
  skylines even in the *relaxed* problem where two blocks must be apart in memory only when
  they share a section of ``E``. A failed inference gives such a set at once (the first section
  of a block above the capacity; a section whose stack is too high). A node's branches cover
  every packing of the relaxed problem for the union of: the branching section, the branches'
  sets and, for each placed block, one section it shares with each neighbour it lifted into a
  branch's set (that lift holds only where the two must be apart). The skip level reads only
  skylines, which bound the relaxed problem as well. When the decision into a subtree changed
  no block or floor of the subtree's set, the parent's relaxed problem is the same, so the
  parent fails too and its remaining alternatives are skipped. Without this the search
  thrashes: a dead end in one part of the timeline is rediscovered under every arrangement of
  another part that was decided after it. (In aggressive mode the sets are heuristics too.)

The search returns a packing, proves that there is none (``infeasible``), or runs out of time
or nodes.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

from coil.memory_planner.arena import Block
from coil.memory_planner.greedy import time_neighbours

__all__ = ["Prepared", "SearchResult", "search_packing", "search_prepared"]


@dataclass(frozen=True)
class SearchResult:
    """Outcome of :func:`search_packing`.

    Attributes:
        offsets: the packing found, or None.
        infeasible: True when the search proved that no packing fits the capacity.
        nodes: search nodes expanded.
    """

    offsets: dict[str, int] | None
    infeasible: bool
    nodes: int


class _OutOfBudget(Exception):
    pass


_SOLVED = -1  # what the search returns on success; a failure returns a (positive) section mask


def _align_up(x: int, a: int) -> int:
    return -(-x // a) * a


class _Tables:
    """The static part of a search instance (shared by every search over the same blocks).

    ``blocks`` are the blocks of non-zero size; sections are the gaps between consecutive
    lifetime ends; ``cover[t]`` lists the blocks live in section ``t``; ``rem0``/``span0`` are
    the initial remaining bytes / spanning-block counts per section.
    """

    def __init__(self, blocks: Sequence[Block]) -> None:
        self.blocks = list(blocks)
        n = len(blocks)
        points = sorted({b.lower for b in blocks} | {b.upper for b in blocks})
        index = {p: k for k, p in enumerate(points)}
        self.first = [index[b.lower] for b in blocks]
        self.stop = [index[b.upper] for b in blocks]
        nsec = max(len(points) - 1, 0)
        self.nsec = nsec
        self.size = [b.size for b in blocks]
        self.align = [b.alignment for b in blocks]
        self.rem0 = [0] * nsec
        # span0[t]: blocks live in both section t and t + 1
        self.span0 = [0] * nsec
        self.cover: list[list[int]] = [[] for _ in range(nsec)]
        for i in range(n):
            for t in range(self.first[i], self.stop[i]):
                self.rem0[t] += self.size[i]
                self.cover[t].append(i)
            for t in range(self.first[i], self.stop[i] - 1):
                self.span0[t] += 1
        self.neighbours = time_neighbours(blocks)
        self.kind = [(b.lower, b.upper, b.size, b.alignment) for b in blocks]


class _Solver:
    """Search state with a trail: every change is recorded so it can be undone."""

    def __init__(
        self,
        tables: _Tables,
        capacity: int,
        priority: Sequence[int],
        deadline: float,
        node_limit: int,
    ) -> None:
        self.cap = capacity
        self.deadline = deadline
        self.node_limit = node_limit
        self.nodes = 0
        self.aggressive = False
        n = len(tables.blocks)
        self.first, self.stop, self.nsec = tables.first, tables.stop, tables.nsec
        self.size, self.align, self.cover = tables.size, tables.align, tables.cover
        self.neighbours, self.kind = tables.neighbours, tables.kind
        self.floor = [0] * tables.nsec
        self.rem = list(tables.rem0)
        self.span = list(tables.span0)
        self.off = [0] * n
        self.rank = [0] * n
        for r, i in enumerate(priority):
            self.rank[i] = r
        self.unplaced = set(range(n))
        self.result: dict[int, int] = {}
        # trail entries: (block placed or -1, section raised or -1, old floors, lifted skylines)
        self.trail: list[tuple[int, int, list[int], list[tuple[int, int]]]] = []
        # section masks: the sections each block covers; the explanation of the last failure
        self.span_mask = [(1 << z) - (1 << a) for a, z in zip(self.first, self.stop, strict=True)]
        self.why = 0

    def feasible_root(self) -> bool:
        return all(r <= self.cap for r in self.rem) and all(s <= self.cap for s in self.size)

    def run(self) -> bool:
        return self._dfs(0, self.nsec) == _SOLVED

    # -- state changes -------------------------------------------------------------------------

    def _lift(self, js: Sequence[int], level: int, changed: list[tuple[int, int]]) -> bool:
        """Raise the skyline of the unplaced blocks ``js`` to ``level``; False if that fails.

        On failure ``self.why`` holds the section mask that explains it.
        """
        off, size, cap, unplaced = self.off, self.size, self.cap, self.unplaced
        bad = -1
        lo, hi = self.nsec, 0
        for j in js:
            if j in unplaced and off[j] < level:
                changed.append((j, off[j]))
                nj = _align_up(level, self.align[j])
                off[j] = nj
                if nj + size[j] > cap and bad < 0:
                    bad = j
                lo = min(lo, self.first[j])
                hi = max(hi, self.stop[j])
        if bad >= 0:
            self.why = 1 << self.first[bad]
            return False
        # the unplaced blocks of a section all sit at or above the lowest skyline among them
        rem, cover = self.rem, self.cover
        for t in range(lo, hi):
            r = rem[t]
            if r and min(off[c] for c in cover[t] if c in unplaced) + r > cap:
                self.why = 1 << t
                return False
        return True

    def _place(self, i: int) -> bool:
        o = self.off[i]
        size = self.size[i]
        top = o + size
        a, z = self.first[i], self.stop[i]
        floor, rem, span = self.floor, self.rem, self.span
        changed: list[tuple[int, int]] = []
        self.trail.append((i, -1, floor[a:z], changed))
        for t in range(a, z):
            floor[t] = top
            rem[t] -= size
        for t in range(a, z - 1):
            span[t] -= 1
        self.unplaced.discard(i)
        self.result[i] = o
        return self._lift(self.neighbours[i], top, changed)

    def _raise(self, s: int, level: int) -> bool:
        changed: list[tuple[int, int]] = []
        self.trail.append((-1, s, [self.floor[s]], changed))
        self.floor[s] = level
        return self._lift(self.cover[s], level, changed)

    def _undo_to(self, mark: int) -> None:
        off, floor, rem, span, size = self.off, self.floor, self.rem, self.span, self.size
        while len(self.trail) > mark:
            i, s, old_floor, changed = self.trail.pop()
            for j, old in reversed(changed):
                off[j] = old
            if i >= 0:
                a, z = self.first[i], self.stop[i]
                floor[a:z] = old_floor
                for t in range(a, z):
                    rem[t] += size[i]
                for t in range(a, z - 1):
                    span[t] += 1
                self.unplaced.add(i)
                del self.result[i]
            else:
                floor[s] = old_floor[0]

    # -- search --------------------------------------------------------------------------------

    def _components(self, lo: int, hi: int) -> list[tuple[int, int]]:
        """Independent sub-ranges of [lo, hi) that still hold unplaced blocks."""
        comps: list[tuple[int, int]] = []
        start = -1
        rem, span = self.rem, self.span
        for t in range(lo, hi):
            if rem[t] and start < 0:
                start = t
            if start >= 0 and (t == hi - 1 or not span[t]):
                comps.append((start, t + 1))
                start = -1
        return comps

    def _skip_level(self, s: int, h: int) -> tuple[int | None, int]:
        """Lowest offset a block covering ``s`` can take if none takes ``h`` (None: none can),
        with the sections that conclusion rests on (``s``; in aggressive mode also the valley).

        A block whose skyline is ``h`` must then rest on an unplaced neighbour ``d`` that does
        not cover ``s``: at ``skyline(d) + size(d)`` or higher. In aggressive mode, when some
        block covering ``s`` already has a skyline above ``h``, blocks that could only be lifted
        later are ignored, and a flat valley is raised to its lower wall (heuristic jumps).
        """
        off, size, unplaced, first, stop = self.off, self.size, self.unplaced, self.first, self.stop
        why = 1 << s
        jump = self.aggressive and any(off[c] > h for c in self.cover[s] if c in unplaced)
        if self.aggressive and not jump:
            # merge the flat valley around s with its lower wall (skyline heuristic)
            floor = self.floor
            lo, hi = s, s
            while lo > 0 and floor[lo - 1] == h:
                lo -= 1
            while hi + 1 < self.nsec and floor[hi + 1] == h:
                hi += 1
            walls = [floor[t] for t in (lo - 1, hi + 1) if 0 <= t < self.nsec and floor[t] > h]
            if walls:
                return min(walls), why | ((2 << min(hi + 1, self.nsec - 1)) - (1 << max(lo - 1, 0)))
        level: int | None = None
        for c in self.cover[s]:
            if c not in unplaced:
                continue
            if off[c] > h:
                cand = off[c]
            elif jump:
                continue
            else:
                lowest = -1
                for d in self.neighbours[c]:
                    if d not in unplaced or first[d] <= s < stop[d]:
                        continue
                    if lowest < 0 or off[d] + size[d] < lowest:
                        lowest = off[d] + size[d]
                if lowest < 0:
                    continue
                cand = max(lowest, h + 1)  # d sits at h or higher; the max keeps progress
            if level is None or cand < level:
                level = cand
        return level, why

    def _contact(self, i: int, lifted: Sequence[tuple[int, int]], why: int) -> int:
        """Sections where placed block ``i`` meets the blocks it lifted that ``why`` concerns.

        The lift of a neighbour ``j`` by ``i`` holds only where the two must not overlap, that
        is in a section both cover; a failure explained by ``j``'s sections therefore also rests
        on one such section.
        """
        first, span = self.first, self.span_mask
        m = 0
        for j, _old in lifted:
            if span[j] & why:
                m |= 1 << max(first[i], first[j])
        return m

    def _changed_since(self, mark: int) -> int:
        """Mask of the sections whose local state the trail entries after ``mark`` changed."""
        m = 0
        span = self.span_mask
        for i, s, _old, changed in self.trail[mark:]:
            m |= span[i] if i >= 0 else 1 << s
            for j, _o in changed:
                m |= span[j]
        return m

    def _dfs(self, lo: int, hi: int) -> int:
        """Complete the sections ``[lo, hi)``: SOLVED, or the mask explaining the failure."""
        comps = self._components(lo, hi)
        if not comps:
            return _SOLVED
        self.nodes += 1
        if self.nodes % 16 == 0 and (
            time.monotonic() > self.deadline or self.nodes > self.node_limit
        ):
            raise _OutOfBudget
        mark = len(self.trail)
        if len(comps) > 1:
            for clo, chi in comps:
                r = self._dfs(clo, chi)
                if r != _SOLVED:
                    # explanations stay inside their component, which the parts solved before
                    # it did not touch; if one did, only "everything" is a safe explanation
                    if r & self._changed_since(mark):
                        r = (1 << self.nsec) - 1
                    self._undo_to(mark)
                    return r
            return _SOLVED
        lo, hi = comps[0]
        floor, rem, off = self.floor, self.rem, self.off
        h = min(floor[t] for t in range(lo, hi) if rem[t])
        # any open section at the lowest floor may be branched on: take the one with the fewest
        # blocks whose skyline is h (fail first); a block whose alignment puts it above h waits
        # for the skip branch, which raises the floor to it
        unplaced = self.unplaced
        s = -1
        at_h: list[int] = []
        for t in range(lo, hi):
            if rem[t] and floor[t] == h:
                fits = [c for c in self.cover[t] if c in unplaced and off[c] == h]
                if s < 0 or len(fits) < len(at_h):
                    s, at_h = t, fits
                    if len(fits) <= 1:
                        break
        at_h.sort(key=self.rank.__getitem__)
        tried: set[tuple[int, int, int, int]] = set()
        why = 1 << s
        for i in at_h:
            if self.kind[i] in tried:
                continue
            tried.add(self.kind[i])
            r = self._dfs(lo, hi) if self._place(i) else self.why
            if r == _SOLVED:
                return _SOLVED
            changed = self._changed_since(mark)
            if not r & changed:  # placing i did not cause it: the parent fails the same way
                self._undo_to(mark)
                return r
            why |= r | self._contact(i, self.trail[mark][3], r)
            self._undo_to(mark)
        level, read = self._skip_level(s, h)
        why |= read
        if level is None or level + rem[s] > self.cap:
            return why
        r = self._dfs(lo, hi) if self._raise(s, level) else self.why
        if r == _SOLVED:
            return _SOLVED
        changed = self._changed_since(mark)
        self._undo_to(mark)
        return r if not r & changed else why | r


class Prepared:
    """Blocks prepared once for many searches (different capacities, priorities, budgets)."""

    def __init__(self, blocks: Sequence[Block]) -> None:
        self.blocks = list(blocks)
        self.zero = {b.id: 0 for b in blocks if b.size == 0}
        self.live_index = [i for i, b in enumerate(blocks) if b.size > 0]
        self.tables = _Tables([blocks[i] for i in self.live_index])


def search_prepared(
    prep: Prepared,
    capacity: int,
    *,
    time_limit: float,
    priority: Sequence[int] | None = None,
    node_limit: int = 1 << 62,
    aggressive: bool = False,
) -> SearchResult:
    """:func:`search_packing` on blocks already prepared (same arguments and result)."""
    live = prep.tables.blocks
    if priority is None:
        order = sorted(
            range(len(live)), key=lambda i: (-live[i].size, -(live[i].upper - live[i].lower), i)
        )
    else:
        keep = {orig: k for k, orig in enumerate(prep.live_index)}
        order = [keep[i] for i in priority if i in keep]
    solver = _Solver(prep.tables, capacity, order, time.monotonic() + time_limit, node_limit)
    solver.aggressive = aggressive
    if not solver.feasible_root():
        return SearchResult(None, True, 0)
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 200_000))
    try:
        found = solver.run()
    except _OutOfBudget:
        return SearchResult(None, False, solver.nodes)
    finally:
        sys.setrecursionlimit(limit)
    if not found:
        return SearchResult(None, not aggressive, solver.nodes)
    offsets = {live[i].id: o for i, o in solver.result.items()}
    offsets.update(prep.zero)
    return SearchResult(offsets, False, solver.nodes)


def search_packing(
    blocks: Sequence[Block],
    capacity: int,
    *,
    time_limit: float,
    priority: Sequence[int] | None = None,
    node_limit: int = 1 << 62,
    aggressive: bool = False,
) -> SearchResult:
    """Search for a packing of ``blocks`` into ``capacity`` bytes.

    Args:
        blocks: the blocks (any sizes, zero-size blocks go to offset 0).
        capacity: the arena size to fit in.
        time_limit: seconds of wall time before giving up.
        priority: an order of block indices; among blocks of equal skyline the earlier one is
            tried first (default: larger, then longer blocks first).
        node_limit: give up after this many search nodes.
        aggressive: raise a skipped section straight to the next skyline step (faster on loose
            capacities, but then an exhausted search proves nothing).

    Returns:
        A :class:`SearchResult`: ``offsets`` when a packing was found (always valid),
        ``infeasible`` when the search proved there is none, both empty on time-out.
    """
    return search_prepared(
        Prepared(blocks),
        capacity,
        time_limit=time_limit,
        priority=priority,
        node_limit=node_limit,
        aggressive=aggressive,
    )
