"""Combo kernels: independent small kernel groups launched as one kernel.

A training step casts every parameter to the compute dtype in its forward (and again in its
backward) and every gradient back to the parameters' dtype at its end: one small pointwise
kernel per tensor, each over a space of its own, so no fusion that needs one iteration space
can join them, and each costs a launch. A `ComboGroup` runs such groups (its `parts`, each a
planned `KernelGroup` over its own space) in one launch: the programs of part 0 first, then
those of part 1, and so on (triton-codegen's combo kernels).

Which groups (`_Fusion.combos` in fusion.py; tried after every other fusion): groups over static
sizes (every part's programs are counted at compile time) of pointwise operations and of
reductions over at most `COMBO_MAX_REDUCED` elements (the finishing sums of split reductions: a
bias gradient's; a larger reduction keeps its own kernel and autotuning), no scan, that read
only the graph's inputs and write at most `COMBO_MAX_EARLY_BYTES` (the casts of parameters:
they can all run first), or whose outputs are
only graph outputs that nothing in the graph reads (the gradients' casts and finishing sums:
they can all run last, and the peak bound models them there). Pairs of consecutive ones of each
kind merge while the combo has at most `COMBO_MAX_PARTS` parts, with the cycle check and the
peak bound of every fusion, and never two groups of which one reads what the other writes
(parts run side by side, not in order).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import sympy
from coil.scheduler.group import KernelGroup

# Parts of one combo kernel: each is a branch of its source, and a long kernel takes Triton
# long to compile for launches that cost a few microseconds each.
COMBO_MAX_PARTS = 16
# A reduction reading more elements than this is no combo's part: it is large enough for its
# launch to matter little, and for the autotuner to time its configurations.
COMBO_MAX_REDUCED = 1 << 20
# A group that reads only inputs but writes more than this joins no combo: run ahead of its
# place, its buffer would live across the allocations in between and split the caching
# allocator's segments (a backward's pads of its saved keys and values: Swin-T's reserved
# memory grew by 9 % on the GPU, allocated by 1 %).
COMBO_MAX_EARLY_BYTES = 8 << 20


@dataclass(eq=False)
class ComboGroup(KernelGroup):
    """Independent kernel groups (`parts`: pointwise, or small reductions) run as one kernel,
    in that order of programs. `members`, `stores` and `internal` are the parts' together;
    `x_dims` is the parts' outputs in all (one dim, for reports); `r_dims` is empty."""

    parts: list[KernelGroup] = field(default_factory=list)


def combine(name: str, parts: Sequence[KernelGroup]) -> ComboGroup:
    """The combo of `parts` (combos among them flattened into their parts), named `name`.

    ValueError for fewer than two parts, a part with a scan or a run-time size, or one that
    reads a buffer another part writes."""
    flat: list[KernelGroup] = []
    for p in parts:
        flat.extend(p.parts if isinstance(p, ComboGroup) else [p])
    if len(flat) < 2:
        raise ValueError(f"combo {name}: needs two parts or more, got {len(flat)}")
    for p in flat:
        scan = any(m.kind == "scan" for m in p.members)
        if scan or not all(sympy.sympify(d).is_Integer for d in (*p.x_dims, *p.r_dims)):
            raise ValueError(f"combo {name}: part {p.name} is a scan or has run-time sizes")
    written = {b.name: p.name for p in flat for m in p.members for b in m.op.outputs}
    for p in flat:
        for m in p.members:
            for r in m.op.reads():
                if r in written and written[r] != p.name:
                    raise ValueError(f"combo {name}: part {p.name} reads {r}, which part {written[r]} writes")
    return ComboGroup(
        name=name,
        members=[m for p in flat for m in p.members],
        x_dims=[sympy.Integer(sum(int(p.xnumel) for p in flat))],
        r_dims=[],
        stores=[s for p in flat for s in p.stores],
        internal=[s for p in flat for s in p.internal],
        parts=flat,
    )


def name_parts(group: ComboGroup) -> None:
    """Name each part after the combo: `<combo>_p<i>`."""
    for i, p in enumerate(group.parts):
        p.name = f"{group.name}_p{i}"
