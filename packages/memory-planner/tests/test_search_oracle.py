"""The exact packing search against exhaustive enumeration, and its backjumping explanations.

Seeded random instances of 5-9 blocks with small sizes and lifetimes: at every capacity from
the live-set bound up, the complete search must find a packing exactly when one exists (and
prove infeasibility otherwise), and every explanation a failed subtree returns must really be
infeasible on its own (the relaxed problem of ``search.py``'s module docstring), because a
too-small explanation lets backjumping prune packings.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator

import pytest
from coil.memory_planner import Block, live_lower_bound, pack, search_packing, validate_packing
from coil.memory_planner import search as search_mod


def _fits(blocks: list[Block], cap: int) -> bool:
    """Exhaustive: try every aligned offset of every block (largest first), with backtracking."""
    order = sorted(blocks, key=lambda b: -b.size)
    placed: list[tuple[Block, int]] = []

    def place(k: int) -> bool:
        if k == len(order):
            return True
        b = order[k]
        for o in range(0, cap - b.size + 1, b.alignment):
            if all(
                not (b.overlaps_in_time(c) and o < oc + c.size and oc < o + b.size)
                for c, oc in placed
            ):
                placed.append((b, o))
                if place(k + 1):
                    return True
                placed.pop()
        return False

    return place(0)


def _instances(count: int) -> Iterator[tuple[int, list[Block]]]:
    for seed in range(count):
        rng = random.Random(seed)
        steps = rng.randint(3, 7)
        blocks = []
        for i in range(rng.randint(5, 9)):
            lo = rng.randrange(0, steps - 1)
            hi = rng.randrange(lo + 1, steps + 1)
            align = rng.choice([1, 2]) if seed % 5 == 0 else 1
            blocks.append(Block(f"b{i}", lo, hi, rng.randint(1, rng.choice([3, 6])), align))
        yield seed, blocks


def _capacities(blocks: list[Block]) -> range:
    lb = live_lower_bound(blocks)
    return range(max(lb, max(b.size for b in blocks)), lb + 3)


def test_exact_search_agrees_with_enumeration() -> None:
    for seed, blocks in _instances(250):
        for cap in _capacities(blocks):
            truth = _fits(blocks, cap)
            res = search_packing(blocks, cap, time_limit=30.0)
            if res.offsets is not None:
                validate_packing(blocks, res.offsets, capacity=cap)
            assert (res.offsets is not None, res.infeasible) == (truth, not truth), (seed, cap)
            if truth and seed % 4 == 0:  # pack's packings are valid, so only misses can fail
                found = pack(blocks, capacity=cap, time_limit=30.0)
                validate_packing(blocks, found.offsets)
                assert found.arena_size <= cap, (seed, cap)


def _relaxed_fits(solver: search_mod._Solver, sections: int) -> bool:
    """Whether the unplaced blocks covering ``sections`` fit at or above their skylines when
    two blocks need be apart in memory only if they share one of ``sections``."""
    span, off, size, align = solver.span_mask, solver.off, solver.size, solver.align
    todo = sorted((j for j in solver.unplaced if span[j] & sections), key=lambda j: -size[j])
    at: dict[int, int] = {}

    def place(k: int) -> bool:
        if k == len(todo):
            return True
        j = todo[k]
        for o in range(off[j], solver.cap - size[j] + 1, align[j]):
            if all(
                not (span[i] & span[j] & sections and o < oi + size[i] and oi < o + size[j])
                for i, oi in at.items()
            ):
                at[j] = o
                if place(k + 1):
                    return True
                del at[j]
        return False

    return place(0)


def test_backjumping_explanations_are_infeasible(monkeypatch: pytest.MonkeyPatch) -> None:
    bad: list[tuple[str, int]] = []
    dfs: Callable[[search_mod._Solver, int, int], int] = search_mod._Solver._dfs
    place: Callable[[search_mod._Solver, int], bool] = search_mod._Solver._place

    def checked_dfs(self: search_mod._Solver, lo: int, hi: int) -> int:
        why = dfs(self, lo, hi)
        if why != search_mod._SOLVED and _relaxed_fits(self, why):
            bad.append(("subtree", why))
        return why

    def checked_place(self: search_mod._Solver, i: int) -> bool:
        ok = place(self, i)
        if not ok and _relaxed_fits(self, self.why):
            bad.append(("inference", self.why))
        return ok

    monkeypatch.setattr(search_mod._Solver, "_dfs", checked_dfs)
    monkeypatch.setattr(search_mod._Solver, "_place", checked_place)
    for seed, blocks in [(-1, _CONTACT), *_instances(80)]:
        for cap in _capacities(blocks):
            search_packing(blocks, cap, time_limit=30.0)
            assert not bad, (seed, cap, bad[:3])


# A placement here lifts a neighbour into a dead end that the neighbour's own sections explain
# only together with a section where the two must be apart (found by the random sweep).
_CONTACT = [
    Block("b0", 5, 7, 6, 1),
    Block("b1", 3, 5, 6, 2),
    Block("b2", 1, 4, 3, 2),
    Block("b3", 4, 6, 6, 2),
    Block("b4", 1, 5, 5, 2),
    Block("b5", 3, 7, 4, 2),
    Block("b6", 1, 6, 5, 2),
]
