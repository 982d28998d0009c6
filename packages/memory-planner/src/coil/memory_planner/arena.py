"""Arena packing data: blocks with lifetimes, a packing result, the lower bound and the validator.

A *block* is a buffer with a half-open lifetime ``[lower, upper)`` (the MiniMalloc convention).
Two blocks whose lifetimes intersect may not intersect in memory. A packing gives every block an
offset in one arena; the arena size is the highest ``offset + size``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

__all__ = ["Block", "Packing", "live_lower_bound", "validate_packing"]


@dataclass(frozen=True)
class Block:
    """One buffer to place in the arena.

    Attributes:
        id: unique name.
        lower: first time step at which the block is live.
        upper: first time step at which it is dead again (``lower < upper``).
        size: bytes (the size hint when the size is known only at run time).
        alignment: the offset must be a multiple of this (``>= 1``).
        size_known_at: for a block whose size is known only at run time, the step at which it
            becomes known; the block may not be allocated (live) before it, so
            ``size_known_at <= lower`` is required. ``None`` for static sizes.
    """

    id: str
    lower: int
    upper: int
    size: int
    alignment: int = 1
    size_known_at: int | None = None

    def __post_init__(self) -> None:
        if self.size < 0:
            raise ValueError(f"block {self.id!r}: negative size {self.size}")
        if self.lower >= self.upper:
            raise ValueError(f"block {self.id!r}: empty lifetime [{self.lower}, {self.upper})")
        if self.alignment < 1:
            raise ValueError(f"block {self.id!r}: alignment {self.alignment} < 1")
        if self.size_known_at is not None and self.size_known_at > self.lower:
            raise ValueError(
                f"block {self.id!r}: live from step {self.lower} but its size is known only at "
                f"step {self.size_known_at}"
            )

    def overlaps_in_time(self, other: Block) -> bool:
        """True when the two lifetimes share a step."""
        return self.lower < other.upper and other.lower < self.upper


@dataclass(frozen=True)
class Packing:
    """Offsets for every block, with the figures to judge them by.

    Attributes:
        offsets: block id -> offset in bytes.
        arena_size: ``max(offset + size)`` (0 when there are no blocks).
        lower_bound: the live-set lower bound of the instance (:func:`live_lower_bound`);
            no packing can be smaller.
        method: which algorithm produced the offsets.
        proven_optimal: True when ``arena_size`` is known to be minimal.
    """

    offsets: Mapping[str, int]
    arena_size: int
    lower_bound: int
    method: str
    proven_optimal: bool = False


def live_lower_bound(blocks: Iterable[Block]) -> int:
    """The largest total size of blocks live at one time step (a lower bound on any arena)."""
    delta: dict[int, int] = {}
    for b in blocks:
        delta[b.lower] = delta.get(b.lower, 0) + b.size
        delta[b.upper] = delta.get(b.upper, 0) - b.size
    live = best = 0
    for t in sorted(delta):
        live += delta[t]
        best = max(best, live)
    return best


def arena_size(blocks: Iterable[Block], offsets: Mapping[str, int]) -> int:
    """``max(offset + size)`` over the blocks (0 for none)."""
    return max((offsets[b.id] + b.size for b in blocks), default=0)


def validate_packing(
    blocks: Sequence[Block], offsets: Mapping[str, int], capacity: int | None = None
) -> None:
    """Raise ``ValueError`` unless ``offsets`` is a valid packing of ``blocks``.

    Valid means: every block has a non-negative offset that is a multiple of its alignment; no
    two blocks that overlap in time overlap in memory (zero-size blocks overlap nothing); and,
    when ``capacity`` is given, every block ends at or below it. Sweep over time, O(n log n + k)
    with k the number of simultaneously live pairs.
    """
    ids = [b.id for b in blocks]
    if len(set(ids)) != len(ids):
        raise ValueError("block ids must be unique")
    for b in blocks:
        if b.id not in offsets:
            raise ValueError(f"block {b.id!r} has no offset")
        off = offsets[b.id]
        if off < 0 or off % b.alignment:
            raise ValueError(
                f"block {b.id!r}: offset {off} is negative or not {b.alignment}-aligned"
            )
        if capacity is not None and off + b.size > capacity:
            raise ValueError(f"block {b.id!r} ends at {off + b.size} > capacity {capacity}")
    events = sorted(
        [(b.lower, 1, i) for i, b in enumerate(blocks)]
        + [(b.upper, 0, i) for i, b in enumerate(blocks)]
    )
    live: set[int] = set()
    for _t, kind, i in events:
        if kind == 0:
            live.discard(i)
            continue
        b = blocks[i]
        lo, hi = offsets[b.id], offsets[b.id] + b.size
        if b.size:
            for j in live:
                c = blocks[j]
                clo = offsets[c.id]
                if c.size and clo < hi and lo < clo + c.size:
                    raise ValueError(
                        f"blocks {c.id!r} and {b.id!r} overlap in time and in memory "
                        f"([{clo}, {clo + c.size}) and [{lo}, {hi}))"
                    )
        live.add(i)
