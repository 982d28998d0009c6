"""Typed knobs of coil.lowering_ir (environment variables `COIL_*`, read when used), and the
constants of the split-reduction rule (`coil.lowering_ir.ops.reductions`)."""

from __future__ import annotations

import os


def split_reduction_min() -> int:
    """COIL_SPLIT_REDUCTION_MIN (default 4096): the least work (elements) one program of an
    unsplit reduction must have for the reduction to be split: its length times the outputs one
    program reduces (1 over a contiguous dim, SPLIT_OUTER_ROWS over a strided one). A reduction
    with that much work per program whose outputs occupy fewer than SPLIT_MIN_PROGRAMS programs
    is split into two kernels (partials per chunk, then their reduction); each chunk keeps at
    least half this much work. The full rule: coil.lowering_ir.ops.reductions. Tests lower it to
    exercise the split path on small tensors."""
    raw = os.environ.get("COIL_SPLIT_REDUCTION_MIN", "4096")
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"COIL_SPLIT_REDUCTION_MIN={raw!r}: expected an integer") from None


def inline_enabled() -> bool:
    """COIL_INLINE (default 1): substitute cheap Pointwise results read at another index
    (gathers, shifted or masked reads) into their readers instead of materialising them
    (coil.lowering_ir.inline). 0 turns it off."""
    raw = os.environ.get("COIL_INLINE", "1").strip().lower()
    if raw in ("1", "true", "yes", "on"):
        return True
    if raw in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"COIL_INLINE={raw!r}: expected one of 1/0, true/false, yes/no, on/off")


# The split rule counts programs, not bytes: a reduction kernel gives one program per block of
# outputs, and a GPU with fewer programs than about two per SM leaves SMs idle while a few
# programs each stream a long row. Lowering runs before (and without) a device, so the SM count
# is a constant: the H200's 132 SMs (the machine coil is measured on). On a smaller GPU the rule
# splits a little less often than it could; on the interpreter splitting only costs a launch.
SPLIT_SM_COUNT = 132
SPLIT_MIN_PROGRAMS = 2 * SPLIT_SM_COUNT     # fewer output programs than this: split (if long)
SPLIT_TARGET_PROGRAMS = 8 * SPLIT_SM_COUNT  # aim the partial kernel at about this many programs
SPLIT_MIN_CHUNKS = 4                        # fewer chunks than this do not pay for a second kernel
SPLIT_MAX_CHUNKS = 1024                     # at most this many partials per output
SPLIT_MIN_TOTAL_FACTOR = 8                  # split only reductions reading >= 8 x split_reduction_min()
# Outputs one program reduces, as the split rule estimates it: an "outer" reduction (the input's
# contiguous dim is kept, the reduced dims are strided) is tiled OUTER_XBLOCK outputs wide by
# triton-codegen (`coil.triton_codegen.config.OUTER_XBLOCK`, which must equal this; a codegen
# test checks it); a reduction over the contiguous dim gets one long row per program.
SPLIT_OUTER_ROWS = 64
