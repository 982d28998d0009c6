"""The constants of the split-reduction rule (`coil.lowering_ir.ops.reductions`); its threshold,
`split_reduction_min`, is a knob of coil's registry (`coil.knobs`, COIL_SPLIT_REDUCTION_MIN)."""

from __future__ import annotations

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
SPLIT_MIN_TOTAL_FACTOR = 8                  # split only reductions reading >= 8 x split_reduction_min
# Outputs one program reduces, as the split rule estimates it: an "outer" reduction (the input's
# contiguous dim is kept, the reduced dims are strided) is tiled OUTER_XBLOCK outputs wide by
# triton-codegen (`coil.triton_codegen.config.OUTER_XBLOCK`, which must equal this; a codegen
# test checks it); a reduction over the contiguous dim gets one long row per program.
SPLIT_OUTER_ROWS = 64
