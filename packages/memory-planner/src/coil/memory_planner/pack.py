"""The arena packing driver: greedy orders first, then search under a time budget."""

from __future__ import annotations

import time
from collections.abc import Sequence

from coil.memory_planner.arena import Block, Packing, arena_size, live_lower_bound
from coil.memory_planner.greedy import GREEDY_ORDERS, place_in_order, time_neighbours
from coil.memory_planner.restarts import Restarts
from coil.memory_planner.search import Prepared

__all__ = ["pack"]


def _best_greedy(
    blocks: Sequence[Block], neighbours: Sequence[Sequence[int]]
) -> tuple[dict[str, int], int, str]:
    best: tuple[dict[str, int], int, str] | None = None
    for name, order in GREEDY_ORDERS.items():
        for best_fit in (False, True):
            offsets = place_in_order(blocks, order(blocks), best_fit, neighbours)
            size = arena_size(blocks, offsets)
            if best is None or size < best[1]:
                best = (offsets, size, f"greedy-{name}-{'best' if best_fit else 'first'}-fit")
    assert best is not None
    return best


def pack(
    blocks: Sequence[Block], *, capacity: int | None = None, time_limit: float = 10.0
) -> Packing:
    """Pack ``blocks`` into one arena, as small as can be found within ``time_limit`` seconds.

    Args:
        blocks: the blocks; ids unique. A block whose size is known only at run time is packed
            with its size hint (the hint must be an upper bound of the real size for the offsets
            to stay valid; ``Block`` already refuses a lifetime that starts before its size is
            known).
        capacity: when given, the arena size to meet; the search stops as soon as it is met
            (and otherwise keeps the smallest arena it found, which may exceed it).
            When omitted, the target is the live-set lower bound.
        time_limit: wall-clock budget in seconds for the whole call (the greedy pass always runs).

    Returns:
        A valid :class:`Packing`; ``lower_bound`` is the live-set bound; ``proven_optimal`` is
        set when the arena equals that bound.

    Method: the best of several greedy orders (first fit and best fit), then restarted decision
    searches (:class:`~coil.memory_planner.restarts.Restarts`: the search of
    :mod:`~coil.memory_planner.search` under several block orders, node limits doubling per
    round): a quarter of the budget left after the greedy pass at the target, then a ladder of
    looser capacities (+10 %, +5 %, +2 %, a twelfth each) to secure a good arena, then the rest
    of the budget at the target again, resuming the target's schedule where it stopped. Every
    search stops at a node limit, so what is found does not depend on the machine's speed, only
    whether it is found before the deadline. The greedy pass always runs in full (O(sum of time
    overlaps x log) per order), so ``time_limit`` is exceeded only when the greedy pass alone
    takes longer.
    """
    deadline = time.monotonic() + time_limit
    ids = [b.id for b in blocks]
    if len(set(ids)) != len(ids):
        raise ValueError("block ids must be unique")
    lb = live_lower_bound(blocks)
    offsets, best, method = _best_greedy(blocks, time_neighbours(blocks))
    target = max(lb, capacity) if capacity is not None else lb
    if best <= target:
        return Packing(offsets, best, lb, method, best == lb)
    prep = Prepared(blocks)  # the search's tables, built once for every search below
    schedules: dict[int, Restarts] = {}  # per capacity: a later attempt resumes the schedule

    def attempt(cap: int, until: float) -> bool:
        nonlocal offsets, best, method
        if cap not in schedules:
            schedules[cap] = Restarts(prep, cap)
        restarts = schedules[cap]
        found = restarts.run(until)
        if found is not None:
            size = arena_size(blocks, found)
            if size < best:
                offsets, best, method = found, size, "search"
            return True
        return restarts.infeasible

    start = time.monotonic()
    left = deadline - start  # the greedy pass and the tables used part of the budget
    if left <= 0:
        return Packing(offsets, best, lb, method, best == lb)
    if attempt(target, start + left / 4) and best <= target:
        return Packing(offsets, best, lb, method, best == lb)
    for factor in (1.10, 1.05, 1.02):
        cap = int(target * factor)
        if cap >= best or time.monotonic() >= deadline:
            continue
        slice_end = min(deadline, time.monotonic() + left / 12)
        if not attempt(cap, slice_end):
            break
    if best > target and time.monotonic() < deadline:
        attempt(target, deadline)
    return Packing(offsets, best, lb, method, best == lb)
