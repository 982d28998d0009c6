"""Greedy arena packing: place blocks one by one in a chosen order.

``greedy_by_size`` is the baseline (TFLite's "greedy by size": largest first, lowest offset that
fits). ``place_in_order`` is the general routine; ``pack`` tries several orders with it before it
searches.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence

from coil.memory_planner.arena import Block, Packing, arena_size, live_lower_bound

__all__ = ["GREEDY_ORDERS", "greedy_by_size", "place_in_order", "time_neighbours"]


def _align_up(x: int, a: int) -> int:
    return -(-x // a) * a


def time_neighbours(blocks: Sequence[Block]) -> list[list[int]]:
    """For each block, the indices of the other blocks whose lifetimes intersect its own.

    A sweep over the blocks sorted by ``lower``: O(n log n + n x blocks starting before it
    ends), with no per-pair method calls; shared by every greedy order and the search.
    """
    n = len(blocks)
    by_lower = sorted(range(n), key=lambda i: blocks[i].lower)
    lowers = [blocks[i].lower for i in by_lower]
    up = [b.upper for b in blocks]
    out: list[list[int]] = []
    for i, b in enumerate(blocks):
        stop = bisect.bisect_left(lowers, b.upper)  # blocks starting before b ends
        lo = b.lower
        out.append(sorted(j for j in by_lower[:stop] if up[j] > lo and j != i))
    return out


def place_in_order(
    blocks: Sequence[Block],
    order: Sequence[int],
    best_fit: bool = False,
    neighbours: Sequence[Sequence[int]] | None = None,
) -> dict[str, int]:
    """Place ``blocks`` in the order of the indices ``order``; return block id -> offset.

    Each block goes into a gap between the already placed blocks that overlap it in time: the
    lowest gap that fits (first fit), or with ``best_fit`` the smallest gap that fits (lowest on
    ties), or on top of them all when no gap fits. The result is always a valid packing.
    ``neighbours`` (from :func:`time_neighbours`) saves recomputing the time overlaps; the cost
    is then O(sum over blocks of placed neighbours x log).
    """
    if neighbours is None:
        neighbours = time_neighbours(blocks)
    size = [b.size for b in blocks]
    off = [0] * len(blocks)
    placed = [False] * len(blocks)
    for i in order:
        b = blocks[i]
        placed[i] = True
        if b.size == 0:
            continue
        busy = sorted((off[j], off[j] + size[j]) for j in neighbours[i] if placed[j] and size[j])
        choice: int | None = None
        choice_gap = 0
        cursor = 0
        for lo, hi in busy:
            start = _align_up(cursor, b.alignment)
            if start + b.size <= lo:
                gap = lo - start
                if choice is None or (best_fit and gap < choice_gap):
                    choice, choice_gap = start, gap
                    if not best_fit:
                        break
            cursor = max(cursor, hi)
        if choice is None:
            choice = _align_up(cursor, b.alignment)
        off[i] = choice
    return {b.id: off[i] for i, b in enumerate(blocks)}


def _by_size(bs: Sequence[Block]) -> list[int]:
    return sorted(range(len(bs)), key=lambda i: (-bs[i].size, -(bs[i].upper - bs[i].lower), i))


def _by_area(bs: Sequence[Block]) -> list[int]:
    return sorted(range(len(bs)), key=lambda i: (-bs[i].size * (bs[i].upper - bs[i].lower), i))


def _by_length(bs: Sequence[Block]) -> list[int]:
    return sorted(range(len(bs)), key=lambda i: (-(bs[i].upper - bs[i].lower), -bs[i].size, i))


def _by_start(bs: Sequence[Block]) -> list[int]:
    return sorted(range(len(bs)), key=lambda i: (bs[i].lower, -bs[i].size, i))


GREEDY_ORDERS: dict[str, Callable[[Sequence[Block]], list[int]]] = {
    "size": _by_size,
    "area": _by_area,
    "length": _by_length,
    "start": _by_start,
}
"""Named block orders for :func:`place_in_order` (a table: add an order by adding a row)."""


def greedy_by_size(blocks: Sequence[Block]) -> Packing:
    """The baseline: largest block first, each at the lowest offset that fits (first fit)."""
    offsets = place_in_order(blocks, _by_size(blocks))
    return Packing(offsets, arena_size(blocks, offsets), live_lower_bound(blocks), "greedy-by-size")
