"""The split-reduction rule's inputs: the machine facts lowering cannot know, and its constants.

The rule (`coil.lowering_ir.ops.reductions`) counts programs, not bytes: a reduction kernel gives
one program per block of outputs, and a GPU with fewer programs than about two per SM leaves SMs
idle while a few programs each stream a long row. So it needs two facts lowering has no way to
find itself, since it runs before and without a device: the device's SM count, and how many
outputs one program of codegen's "outer" reduction kernel reduces (triton-codegen's
`OUTER_XBLOCK`). Its caller passes them as a `SplitRule` (`lower(gm, name, split=...)`).

Callers without a device (the interpreter, the CPU, tests) take the default, `SplitRule()`: the
H200's 132 SMs, the GPU coil is tuned on, and codegen's 64 outputs per outer program. On the
interpreter a split only costs one more launch.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_SM_COUNT = 132  # the H200's, for callers without a device
DEFAULT_OUTER_ROWS = 64  # triton-codegen's OUTER_XBLOCK (its tests check the two agree)
MIN_CHUNKS = 4  # fewer chunks than this do not pay for a second kernel
MAX_CHUNKS = 1024  # at most this many partials per output
MIN_TOTAL_FACTOR = 8  # split only reductions reading >= 8 x split_reduction_min elements


@dataclass(frozen=True)
class SplitRule:
    """The machine facts of the split rule.

    Args:
        sm_count: the device's streaming multiprocessors
            (`torch.cuda.get_device_properties(dev).multi_processor_count`).
        outer_rows: the outputs one program of an "outer" reduction kernel reduces (the input's
            contiguous dim kept, the reduced dims strided): codegen's `OUTER_XBLOCK`. A reduction
            over the contiguous dim gets one row per program.

    A reduction whose outputs occupy fewer than `min_programs` programs may be split; the
    partial kernel aims at about `target_programs`. ValueError for a count below 1.
    """

    sm_count: int = DEFAULT_SM_COUNT
    outer_rows: int = DEFAULT_OUTER_ROWS

    def __post_init__(self) -> None:
        for name in ("sm_count", "outer_rows"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"SplitRule.{name} must be an int >= 1, got {value!r}")

    @property
    def min_programs(self) -> int:
        """Fewer output programs than this (two per SM): split, if the rows are long."""
        return 2 * self.sm_count

    @property
    def target_programs(self) -> int:
        """The program count the partial kernel aims at (eight per SM)."""
        return 8 * self.sm_count


DEFAULT_SPLIT_RULE = SplitRule()
# The default machine's program threshold, for grid rules that have no SplitRule of their own
# (triton-codegen's reduction tiling).
SPLIT_MIN_PROGRAMS = DEFAULT_SPLIT_RULE.min_programs
