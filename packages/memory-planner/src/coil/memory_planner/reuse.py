"""Reuse mode: buffers take over the storage of dead buffers of equal size and pool.

This is the planning mode for runtimes that allocate each buffer separately (no arena). The
contract with wrapper-codegen is written in ``docs/contracts.md``; this module implements it.

Accounting model. Steps are numbered ``0 .. n``. A buffer is live on the closed interval
``[start, end]`` of steps. A *storage* is one real allocation; it is held from the start of its
first buffer to the end of its last buffer, *including the gaps between them* (the storage is not
returned to the runtime between two users, that is the point of reuse). With no reuse every buffer
is its own storage, so reuse can only add held bytes (in the gaps); ``plan_reuse`` accepts a reuse
only when the held gap never lifts the peak above the unplanned peak, so
``peak_bytes == unplanned_peak_bytes`` for every plan it returns.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = ["BufferLifetime", "ReusePlan", "check_reuse_plan", "plan_reuse"]


@dataclass(frozen=True)
class BufferLifetime:
    """One buffer of a straight-line program, as seen by reuse planning.

    Attributes:
        name: unique buffer name.
        size: bytes (a hint where the size is symbolic).
        start: index of the step that writes it (it is allocated just before that step).
        end: index of the last step that reads it, inclusive (freed just after it); graph outputs
            have ``end`` = number of steps.
        pool: storage is shared only between buffers of equal pool and equal size.
    """

    name: str
    size: int
    start: int
    end: int
    pool: str

    def __post_init__(self) -> None:
        if self.size < 0:
            raise ValueError(f"buffer {self.name!r}: negative size {self.size}")
        if self.start < 0 or self.end < self.start:
            raise ValueError(
                f"buffer {self.name!r}: bad lifetime [{self.start}, {self.end}] "
                "(need 0 <= start <= end)"
            )


@dataclass(frozen=True)
class ReusePlan:
    """The result of :func:`plan_reuse`.

    Attributes:
        storage: buffer -> buffer whose storage it takes (itself when fresh). The value is the
            *previous holder* of the storage, so following the mapping from any buffer walks back
            through the holders to the buffer that allocated the storage (which maps to itself).
        peak_bytes: peak of live bytes with the plan (storages held through their gaps).
        unplanned_peak_bytes: peak with no reuse at all; ``peak_bytes <= unplanned_peak_bytes``.
    """

    storage: Mapping[str, str]
    peak_bytes: int
    unplanned_peak_bytes: int


def _profile(intervals: Sequence[tuple[int, int, int]], horizon: int) -> list[int]:
    """Live bytes at each step ``0..horizon`` for closed intervals ``(start, end, size)``."""
    delta = [0] * (horizon + 2)
    for start, end, size in intervals:
        delta[start] += size
        delta[end + 1] -= size
    live = [0] * (horizon + 1)
    acc = 0
    for t in range(horizon + 1):
        acc += delta[t]
        live[t] = acc
    return live


def _storage_roots(storage: Mapping[str, str]) -> dict[str, str]:
    """Map every buffer to the buffer that allocated its storage (follows the holder chain)."""
    roots: dict[str, str] = {}
    for name in storage:
        seen: list[str] = []
        cur = name
        while cur not in roots and storage[cur] != cur:
            if cur in seen:
                raise ValueError(f"storage chain through {cur!r} is a cycle")
            seen.append(cur)
            cur = storage[cur]
        root = roots.get(cur, cur)
        for s in [*seen, name]:
            roots[s] = root
    return roots


def _planned_peak(buffers: Sequence[BufferLifetime], storage: Mapping[str, str]) -> int:
    roots = _storage_roots(storage)
    by_name = {b.name: b for b in buffers}
    held: dict[str, tuple[int, int, int]] = {}
    for b in buffers:
        r = roots[b.name]
        lo, hi, size = held.get(r, (b.start, b.end, by_name[r].size))
        held[r] = (min(lo, b.start), max(hi, b.end), size)
    horizon = max((b.end for b in buffers), default=0)
    return max(_profile(list(held.values()), horizon), default=0)


def check_reuse_plan(buffers: Sequence[BufferLifetime], plan: ReusePlan) -> None:
    """Raise ``ValueError`` unless ``plan`` obeys the reuse contract for ``buffers``.

    Checks: every buffer is mapped; a buffer maps to itself or to a buffer A of equal pool and
    size with ``A.end < B.start``; each storage has at most one successor (one live buffer at a
    time); the reported peaks match a recomputation; ``peak_bytes <= unplanned_peak_bytes``.
    """
    by_name = {b.name: b for b in buffers}
    if set(plan.storage) != set(by_name):
        raise ValueError("plan.storage must map exactly the planned buffers")
    successors: dict[str, str] = {}
    for name, prev in plan.storage.items():
        if prev == name:
            continue
        if prev not in by_name:
            raise ValueError(f"{name!r} takes storage of unknown buffer {prev!r}")
        a, b = by_name[prev], by_name[name]
        if a.pool != b.pool or a.size != b.size:
            raise ValueError(f"{name!r} takes storage of {prev!r} with another pool or size")
        if not a.end < b.start:
            raise ValueError(f"{name!r} (start {b.start}) takes {prev!r} (end {a.end}) while live")
        if prev in successors:
            raise ValueError(f"storage of {prev!r} is taken twice ({successors[prev]!r}, {name!r})")
        successors[prev] = name
    horizon = max((b.end for b in buffers), default=0)
    unplanned = max(_profile([(b.start, b.end, b.size) for b in buffers], horizon), default=0)
    if plan.unplanned_peak_bytes != unplanned:
        raise ValueError(f"unplanned peak {plan.unplanned_peak_bytes} != recomputed {unplanned}")
    planned = _planned_peak(buffers, plan.storage)
    if plan.peak_bytes != planned:
        raise ValueError(f"planned peak {plan.peak_bytes} != recomputed {planned}")
    if planned > unplanned:
        raise ValueError(f"plan raises the peak from {unplanned} to {planned}")


def plan_reuse(buffers: Sequence[BufferLifetime]) -> ReusePlan:
    """Let buffers take over dead buffers' storage without ever raising the peak.

    Args:
        buffers: the non-input buffers of a program, names unique.

    Returns:
        A :class:`ReusePlan`. ``B`` takes ``A``'s storage only if ``A.end < B.start``,
        ``A.pool == B.pool`` and ``A.size == B.size``; each storage carries one live buffer at a
        time; holding a storage through a gap never lifts live bytes above the unplanned peak, so
        ``peak_bytes == unplanned_peak_bytes``.

    Method: buffers are visited by start step; each one takes, among the free storages of its
    (pool, size), the one freed most recently (the shortest gap to hold) whose gap fits under the
    peak. Deterministic: ties break by name.

    Example: ``a=[0,1] b=[2,3]`` of equal size and pool -> ``storage == {"a": "a", "b": "a"}``.

    Raises:
        ValueError: duplicate names.
    """
    names = [b.name for b in buffers]
    if len(set(names)) != len(names):
        raise ValueError("buffer names must be unique")
    horizon = max((b.end for b in buffers), default=0)
    live = _profile([(b.start, b.end, b.size) for b in buffers], horizon)
    peak = max(live, default=0)
    storage: dict[str, str] = {}
    # (pool, size) -> list of (end step of current holder, holder name) of storages whose
    # holder has been visited; a storage is free for B when its holder's end < B.start.
    free: dict[tuple[str, int], list[tuple[int, str]]] = {}
    for b in sorted(buffers, key=lambda x: (x.start, x.end, x.name)):
        key = (b.pool, b.size)
        choices = free.setdefault(key, [])
        best: int | None = None
        for i, (end, holder) in enumerate(choices):
            if end >= b.start:
                continue
            if b.size and any(live[t] + b.size > peak for t in range(end + 1, b.start)):
                continue
            if best is None or (-end, holder) < (-choices[best][0], choices[best][1]):
                best = i
        if best is None:
            storage[b.name] = b.name
            choices.append((b.end, b.name))
            continue
        end, holder = choices[best]
        storage[b.name] = holder
        for t in range(end + 1, b.start):
            live[t] += b.size
        choices[best] = (b.end, b.name)
    return ReusePlan(storage=storage, peak_bytes=max(live, default=0), unplanned_peak_bytes=peak)
