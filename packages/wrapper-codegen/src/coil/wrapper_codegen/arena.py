"""Arenas: the buffers a graph's kernels write and nothing outside the call sees, packed by the
memory planner at offsets in one allocation per device, made once per call.

The builder (`plan.build(..., arena=True)`) hands `plan_arenas` one `ArenaBuffer` per storage the
wrapper would otherwise allocate itself (a kernel's store of static size that is no graph output,
with the lifetime of every in-place scatter that takes its storage over). An arena is held whole
from its first buffer's step to its last one's, so one arena over a whole graph would hold a
backward's largest scratch buffer (the LM head's gradient of the logits, at its start) while the
gradients it returns are allocated: each device's timeline is cut into windows instead, at the
step boundaries few bytes cross (`_windows`), the few buffers crossing a cut are left to reuse
mode, and each window's buffers become one arena. Its buffers become `coil.memory_planner.Block`s,
`greedy_by_size` packs them (deterministic, and at the live-set bound on the planner's real
training graphs) and `validate_packing` checks the result. The wrapper allocates each arena before
its first buffer's step, binds each buffer as a typed view at its offset (Place lines), and frees
the arena after its last buffer's last step.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from coil.memory_planner import Block, greedy_by_size, validate_packing

__all__ = ["ALIGNMENT", "ArenaBuffer", "ArenaPlan", "plan_arenas"]

# every offset and the arena size are multiples of this: any dtype's item size, the 16 bytes
# Triton's kernels are specialised for, and the 256 that cuBLAS and cuDNN pick their fastest
# kernels by
ALIGNMENT = 256


@dataclass(frozen=True)
class ArenaBuffer:
    """A buffer to place: written at step `first`, last read at step `last` (inclusive)."""

    name: str
    nbytes: int
    first: int
    last: int
    device: torch.device
    dtype: torch.dtype


@dataclass(frozen=True)
class ArenaPlan:
    """One device's arena: `nbytes` (a multiple of ALIGNMENT), each buffer's byte `offsets`, the
    live-set `lower_bound` of its buffers, and the steps it is live over, `first` to `last`
    inclusive (the first buffer's writer to the last buffer's last reader)."""

    name: str
    device: torch.device
    nbytes: int
    offsets: dict[str, int]
    lower_bound: int
    first: int
    last: int
    dtypes: tuple[torch.dtype, ...]


def _align(x: int) -> int:
    return -(-x // ALIGNMENT) * ALIGNMENT


# a step boundary is a cut when the bytes of the buffers live across it are at most this share of
# the largest live bytes of its window so far (the buffers crossing it are then not placed)
CUT_SHARE = 1 / 8


def _windows(buffers: Sequence[ArenaBuffer]) -> list[list[ArenaBuffer]]:
    """`buffers` (one device's) in windows of steps. Sweeping the step boundaries in order, the
    boundary between steps t - 1 and t is a cut when the buffers live across it (first < t <=
    last) hold at most CUT_SHARE of the most bytes live at one step since the last cut: a window
    then ends where its own peak has passed, not where everything has died. Buffers live across a
    cut are dropped, the rest grouped by the window they live in."""
    end = max(b.last for b in buffers)
    live = [0] * (end + 2)  # live[t]: bytes of buffers live at step t
    crossing = [0] * (end + 2)  # crossing[t]: bytes live across boundary t
    for b in buffers:
        live[b.first] += b.nbytes
        live[b.last + 1] -= b.nbytes
        crossing[b.first + 1] += b.nbytes
        crossing[b.last + 1] -= b.nbytes
    for t in range(1, end + 2):
        live[t] += live[t - 1]
        crossing[t] += crossing[t - 1]
    cuts: list[int] = []
    window_peak = live[0]
    for t in range(1, end + 1):
        if crossing[t] <= window_peak * CUT_SHARE:
            cuts.append(t)
            window_peak = 0
        window_peak = max(window_peak, live[t])
    windows: dict[int, list[ArenaBuffer]] = {}
    for b in buffers:
        k = bisect.bisect_right(cuts, b.first)  # cuts at or before its first step
        if k < len(cuts) and cuts[k] <= b.last:
            continue  # a cut lies in (first, last]: b crosses it
        windows.setdefault(k, []).append(b)
    return [windows[k] for k in sorted(windows)]


def plan_arenas(buffers: Sequence[ArenaBuffer], prefix: str = "arena") -> list[ArenaPlan]:
    """ArenaPlans for `buffers`: per device, one per window of its timeline (`_windows`), named
    `<prefix><k>` in order; the buffers live across a window's edge are in none. Two buffers of an
    arena whose lifetimes share a step never share a byte; offsets are ALIGNMENT-aligned. Raises
    ValueError (naming the buffers) if a packing were invalid."""
    by_device: dict[str, list[ArenaBuffer]] = {}
    for b in buffers:
        by_device.setdefault(str(b.device), []).append(b)
    plans: list[ArenaPlan] = []
    for group in (w for device in by_device.values() for w in _windows(device)):
        blocks = [Block(b.name, b.first, b.last + 1, b.nbytes, ALIGNMENT) for b in group]
        packing = greedy_by_size(blocks)
        validate_packing(blocks, packing.offsets)
        dtypes = tuple(dict.fromkeys(b.dtype for b in group))
        plans.append(ArenaPlan(f"{prefix}{len(plans)}", group[0].device, max(ALIGNMENT, _align(packing.arena_size)),
                               dict(packing.offsets), packing.lower_bound, min(b.first for b in group),
                               max(b.last for b in group), dtypes))
    return plans
