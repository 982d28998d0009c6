"""Arenas: the buffers a graph's kernels write and nothing outside the call sees, packed by the
memory planner at offsets in one allocation per device, made once per call.

The builder (`plan.build(..., arena=True)`) hands `plan_arenas` one `ArenaBuffer` per storage the
wrapper would otherwise allocate itself (a kernel's store of static size that is no graph output,
with the lifetime of every in-place scatter that takes its storage over); each device's buffers
become `coil.memory_planner.Block`s, `greedy_by_size` packs them (deterministic, and at the
live-set bound on the planner's real training graphs) and `validate_packing` checks the result.
The wrapper then allocates the arena before its first buffer's step, binds each buffer as a typed
view at its offset (Place lines), and frees the arena after its last buffer's last step.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import torch
from coil.memory_planner import Block, greedy_by_size, validate_packing

__all__ = ["ALIGNMENT", "ArenaBuffer", "ArenaPlan", "peak_of_spans", "plan_arenas"]

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


def plan_arenas(buffers: Sequence[ArenaBuffer], prefix: str = "arena") -> list[ArenaPlan]:
    """One ArenaPlan per device of `buffers` (named `<prefix><k>`, in order of first appearance):
    two buffers whose lifetimes share a step never share a byte; offsets are ALIGNMENT-aligned.
    Raises ValueError (naming the buffers) if the packing were invalid."""
    by_device: dict[str, list[ArenaBuffer]] = {}
    for b in buffers:
        by_device.setdefault(str(b.device), []).append(b)
    plans: list[ArenaPlan] = []
    for k, group in enumerate(by_device.values()):
        blocks = [Block(b.name, b.first, b.last + 1, b.nbytes, ALIGNMENT) for b in group]
        packing = greedy_by_size(blocks)
        validate_packing(blocks, packing.offsets)
        dtypes = tuple(dict.fromkeys(b.dtype for b in group))
        plans.append(ArenaPlan(f"{prefix}{k}", group[0].device, max(ALIGNMENT, _align(packing.arena_size)),
                               dict(packing.offsets), packing.lower_bound, min(b.first for b in group),
                               max(b.last for b in group), dtypes))
    return plans


def peak_of_spans(spans: Iterable[tuple[int, int, int]]) -> int:
    """The largest sum of bytes live at one step over `(first, last, nbytes)` spans (inclusive)."""
    delta: dict[int, int] = {}
    for first, last, nbytes in spans:
        delta[first] = delta.get(first, 0) + nbytes
        delta[last + 1] = delta.get(last + 1, 0) - nbytes
    live = peak = 0
    for t in sorted(delta):
        live += delta[t]
        peak = max(peak, live)
    return peak
