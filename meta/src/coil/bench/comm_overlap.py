"""How much of a step's collective time the GPU hides behind compute, from a profile.

`hidden_fraction(comm, compute)`: of the time some collective kernel runs (the union of the
`comm` intervals), the share during which some compute kernel runs too (intersected with the
union of `compute`); None without collective time. `kernel_intervals(events)` splits a torch
profiler's device kernel events (`profile.events()`, those on a CUDA device) into collective
kernels (NCCL's: the name contains "nccl") and compute kernels (every other kernel; memory
copies and sets are neither). Intervals are (start, end) in any one unit.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

__all__ = ["hidden_fraction", "kernel_intervals", "length", "union"]

Interval = tuple[float, float]


def union(intervals: Iterable[Interval]) -> list[Interval]:
    """The intervals merged: sorted, disjoint, empty ones dropped."""
    out: list[Interval] = []
    for s, e in sorted(i for i in intervals if i[1] > i[0]):
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return out


def length(intervals: Sequence[Interval]) -> float:
    """Total length of disjoint intervals."""
    return sum(e - s for s, e in intervals)


def _intersection(a: Sequence[Interval], b: Sequence[Interval]) -> float:
    """Length of the intersection of two sorted disjoint interval lists."""
    i = j = 0
    total = 0.0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if hi > lo:
            total += hi - lo
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def hidden_fraction(comm: Iterable[Interval], compute: Iterable[Interval]) -> float | None:
    """The share of collective time overlapped by compute (see the module docstring)."""
    c = union(comm)
    busy = length(c)
    if busy <= 0:
        return None
    return _intersection(c, union(compute)) / busy


def kernel_intervals(events: Iterable[Any]) -> tuple[list[Interval], list[Interval]]:
    """(collective, compute) intervals of the device kernels among profiler `events`."""
    comm: list[Interval] = []
    compute: list[Interval] = []
    for e in events:
        if str(getattr(e, "device_type", "")).split(".")[-1] != "CUDA":
            continue
        name = str(e.name)
        if name.startswith(("Memcpy", "Memset", "cudaMemcpy", "cudaMemset")):
            continue
        span = (float(e.time_range.start), float(e.time_range.end))
        (comm if "nccl" in name.lower() else compute).append(span)
    return comm, compute
