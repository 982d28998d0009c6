"""Arena packing: validator, lower bound, greedy and search against brute force."""

from __future__ import annotations

import itertools
import time

import pytest
from coil.memory_planner import (
    Block,
    greedy_by_size,
    live_lower_bound,
    pack,
    search_packing,
    validate_packing,
)
from coil.memory_planner.greedy import GREEDY_ORDERS, place_in_order, time_neighbours
from hypothesis import given, settings
from hypothesis import strategies as st


def brute_lower_bound(blocks: list[Block]) -> int:
    times = range(
        min((b.lower for b in blocks), default=0), max((b.upper for b in blocks), default=0)
    )
    return max((sum(b.size for b in blocks if b.lower <= t < b.upper) for t in times), default=0)


def brute_fits(blocks: list[Block], cap: int) -> bool:
    """Try every aligned offset assignment (tiny instances only)."""
    ranges = [range(0, max(cap - b.size, -1) + 1, b.alignment) for b in blocks]
    for offs in itertools.product(*ranges):
        ok = True
        for i, j in itertools.combinations(range(len(blocks)), 2):
            a, b = blocks[i], blocks[j]
            clash = offs[i] < offs[j] + b.size and offs[j] < offs[i] + a.size
            if a.overlaps_in_time(b) and a.size and b.size and clash:
                ok = False
                break
        if ok:
            return True
    return False


@st.composite
def instances(
    draw: st.DrawFn, max_n: int = 6, max_size: int = 4, aligned: bool = False
) -> list[Block]:
    n = draw(st.integers(1, max_n))
    out = []
    for i in range(n):
        lo = draw(st.integers(0, 5))
        hi = draw(st.integers(lo + 1, 7))
        align = draw(st.sampled_from([1, 2])) if aligned else 1
        out.append(Block(f"b{i}", lo, hi, draw(st.integers(0, max_size)), align))
    return out


def test_validator_rejects_overlap_and_alignment() -> None:
    a, b = Block("a", 0, 2, 4), Block("b", 1, 3, 4)
    validate_packing([a, b], {"a": 0, "b": 4})
    with pytest.raises(ValueError, match="overlap"):
        validate_packing([a, b], {"a": 0, "b": 3})
    validate_packing([a, Block("c", 2, 3, 4)], {"a": 0, "c": 0})  # [0,2) and [2,3) are disjoint
    with pytest.raises(ValueError, match="aligned"):
        validate_packing([Block("d", 0, 1, 4, alignment=8)], {"d": 4})
    with pytest.raises(ValueError, match="capacity"):
        validate_packing([a], {"a": 1}, capacity=4)


def test_block_validation() -> None:
    with pytest.raises(ValueError, match="negative"):
        Block("a", 0, 1, -1)
    with pytest.raises(ValueError, match="empty lifetime"):
        Block("a", 2, 2, 1)


@settings(max_examples=200, deadline=None)
@given(instances(max_n=10, max_size=100))
def test_lower_bound_and_greedy(blocks: list[Block]) -> None:
    assert live_lower_bound(blocks) == brute_lower_bound(blocks)
    g = greedy_by_size(blocks)
    validate_packing(blocks, g.offsets)
    assert g.arena_size >= g.lower_bound == brute_lower_bound(blocks)


@settings(max_examples=60, deadline=None)
@given(instances(max_n=5, max_size=3, aligned=True))
def test_search_is_exact_on_tiny_instances(blocks: list[Block]) -> None:
    lb = live_lower_bound(blocks)
    cap = lb
    while not brute_fits(blocks, cap):
        cap += 1
    found = search_packing(blocks, cap, time_limit=10)
    assert found.offsets is not None
    validate_packing(blocks, found.offsets, capacity=cap)
    if cap > 0:
        below = search_packing(blocks, cap - 1, time_limit=10)
        assert below.offsets is None and below.infeasible


@settings(max_examples=40, deadline=None)
@given(instances(max_n=12, max_size=50, aligned=True))
def test_pack_valid_and_no_worse_than_greedy(blocks: list[Block]) -> None:
    result = pack(blocks, time_limit=0.5)
    validate_packing(blocks, result.offsets)
    assert result.lower_bound == live_lower_bound(blocks)
    assert result.lower_bound <= result.arena_size <= greedy_by_size(blocks).arena_size


def test_pack_meets_capacity_where_greedy_does_not() -> None:
    # Greedy-by-size puts the big block low and must stack the two halves above it, but the
    # halves can share a level at offset 0 when the big block goes above them.
    blocks = [
        Block("big", 1, 3, 4),
        Block("left", 0, 2, 2),
        Block("right", 2, 4, 2),
        Block("l2", 0, 1, 4),
        Block("r2", 3, 4, 4),
    ]
    lb = live_lower_bound(blocks)
    result = pack(blocks, capacity=lb, time_limit=5)
    validate_packing(blocks, result.offsets, capacity=lb)
    assert result.arena_size == lb


def test_zero_size_and_empty() -> None:
    assert pack([], time_limit=0.1).arena_size == 0
    res = pack([Block("z", 0, 3, 0), Block("a", 1, 2, 8)], time_limit=0.1)
    assert res.arena_size == 8


@settings(max_examples=100, deadline=None)
@given(instances(max_n=12, max_size=10))
def test_time_neighbours_are_the_overlapping_pairs(blocks: list[Block]) -> None:
    nb = time_neighbours(blocks)
    for i, a in enumerate(blocks):
        want = [j for j, b in enumerate(blocks) if j != i and a.overlaps_in_time(b)]
        assert nb[i] == want
    for name, order in GREEDY_ORDERS.items():
        for best_fit in (False, True):
            offsets = place_in_order(blocks, order(blocks), best_fit, nb)
            validate_packing(blocks, offsets)
            assert offsets == place_in_order(blocks, order(blocks), best_fit), name


def _layered(n: int) -> list[Block]:
    """A hard-ish large instance: long-lived blocks of mixed sizes over a sliding window."""
    return [
        Block(f"b{i}", i // 3, i // 3 + 1 + (i * 7919) % 40, 1 + (i * 104729) % 997)
        for i in range(n)
    ]


def test_pack_keeps_its_budget_on_large_instances() -> None:
    """The greedy pass always runs; past it, no search starts once the budget is spent.
    (Wall-clock bounds are relative to the greedy pass's own time: CI machines are shared.)"""
    blocks = _layered(1500)
    t0 = time.monotonic()
    greedy = pack(blocks, time_limit=0.0)
    greedy_s = time.monotonic() - t0
    validate_packing(blocks, greedy.offsets)
    assert greedy.method.startswith("greedy")
    t0 = time.monotonic()
    res = pack(blocks, time_limit=greedy_s + 1.0)
    elapsed = time.monotonic() - t0
    validate_packing(blocks, res.offsets)
    assert res.arena_size <= greedy.arena_size <= greedy_by_size(blocks).arena_size
    assert elapsed < 2 * greedy_s + 2.0
