"""Triton source for rounding values to float16/bfloat16, the same on both targets.

Half-precision values live in float32 registers (`optable.register_dtype`); a value becomes a
half type in two places: a `cast` op (rounded, then held in float32 again) and a store into a
half buffer. Both follow eager PyTorch's rule: the value goes to float32 first (c10's Half and
BFloat16 are built from a float, so an int64 or float64 source is rounded twice, as in eager),
then rounds to nearest, ties to even.

On CUDA, Triton's `.to(tl.bfloat16)` from float32 rounds to nearest even. Triton's CPU
interpreter (3.x) does not: it truncates float32 -> bfloat16 and reinterprets the bits of any
other source type. For the "interpret" target the rounding is done here with integer ops on the
float32 bits (`_coil_round_bf16`), after which the interpreter's truncation is exact. float16
conversions are exact in the interpreter (numpy rounds to nearest even) and need no helper.
On CUDA the helper also rounds a bfloat16 cast from a non-float32 register (an int: lowering
casts float64 to float32 by an op of its own first): there Triton's compiler turned
`.to(tl.float32).to(tl.bfloat16)` into a single rounding (a float16 cast from an int may round
once too; not handled, and whether float64 -> float32 -> bfloat16 is merged was not checked).
"""

from __future__ import annotations

import torch
from coil.triton_codegen.optable import register_dtype, tl_dtype

HALF = (torch.float16, torch.bfloat16)

# RNE float32 -> bfloat16 on float32 bits: add 0x7FFF plus the lowest kept bit, clear the low
# half; NaNs kept as they are (their payload could carry into the exponent)
INTERPRET_BF16_HELPER = """
@triton.jit
def _coil_round_bf16(x):
    x = x.to(tl.float32)  # a value already held as bfloat16 (a scalar argument) is exact here
    u = x.to(tl.uint32, bitcast=True)
    r = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return tl.where(x != x, x, r.to(tl.float32, bitcast=True))

"""


def _float32(expr: str, src: torch.dtype) -> str:
    return expr if register_dtype(src) == torch.float32 else f"{expr}.to(tl.float32)"


def round_to_half(expr: str, src: torch.dtype, dst: torch.dtype, target: str) -> str:
    """`expr` (held in `src`'s register type) rounded to the half type `dst`, held in float32."""
    assert dst in HALF, dst
    x = _float32(expr, src)
    if dst == torch.bfloat16 and (target != "cuda" or register_dtype(src) != torch.float32):
        # on CUDA too from an int register: Triton's compiler merges the two
        # conversions `.to(tl.float32).to(tl.bfloat16)` into one rounding (16842753 becomes
        # 16908288 on the GPU, eager gives 16777216); the rounding on the float32 bits keeps both
        return f"_coil_round_bf16({x})"
    return f"{x}.to({tl_dtype(dst)}).to(tl.float32)"


def to_storage(expr: str, dst: torch.dtype, target: str) -> str:
    """`expr` (a register value) converted to `dst` for a store into a `dst` buffer. A half
    buffer's values are already rounded to it except where the store itself narrows them."""
    if dst == torch.bfloat16 and target != "cuda":
        return f"_coil_round_bf16({expr}.to(tl.float32)).to(tl.bfloat16)"
    return f"{expr}.to({tl_dtype(dst)})"


def cast_helpers(source: str) -> str:
    """The helper definitions a kernel `source` needs for its casts (on either target: the
    bfloat16 rounding helper serves the interpreter and CUDA's casts from ints)."""
    return INTERPRET_BF16_HELPER if "_coil_round_bf16" in source else ""
