"""Accumulating scatters (index_put with accumulate, scatter_add, index_add, put) in float16 or
bfloat16: the accumulation runs in a float32 twin of the output, rounded once at the end.

Triton has no half-precision atomic add coil can rely on on every target, and a sum rounded to
half precision at every add drifts from the exact sum by far more than one rounding at the end;
eager's CUDA kernels add in the half type, so the result is at least as close to the exact sum
as eager's. `accumulation_target(lw, base, val)` gives the buffer a Scatter accumulates into and
the base it starts from (float32 copies when `val`, the node's output, is half precision), and
`finish(lw, out, val)` the node's result (a cast back when the target was widened).
"""

from __future__ import annotations

from typing import Any

import torch
from coil.lowering_ir.lowerer import Lowerer, TensorMeta
from coil.lowering_ir.nodes import ComputedBuffer, TensorRef, load
from coil.lowering_ir.ops.common import HALF, cast

__all__ = ["accumulation_target", "finish", "widened"]


def widened(val: Any, accumulate: bool) -> bool:
    """Does an accumulating scatter producing `val` accumulate in float32?"""
    return accumulate and val.dtype in HALF


def accumulation_target(lw: Lowerer, base: TensorRef | None, val: Any,
                        accumulate: bool) -> tuple[ComputedBuffer, TensorRef | None]:
    """(the Scatter's output buffer, its base): `val`'s own layout and `base` itself, or, when
    `widened`, a float32 buffer of `val`'s sizes and strides and a float32 copy of `base`."""
    if not widened(val, accumulate):
        return lw.new_buffer(val), base
    meta = TensorMeta(tuple(val.shape), tuple(val.stride()), torch.float32, val.device)
    wide_base = None
    if base is not None:
        wide_base = lw.pointwise(lambda p: cast(load(base, list(p)), torch.float32), meta)
    return lw.new_buffer(meta), wide_base


def finish(lw: Lowerer, out: ComputedBuffer, val: Any) -> TensorRef:
    """The node's result from the Scatter's output `out`: itself, or cast back to `val`'s type."""
    if out.layout.dtype == val.dtype:
        return out
    return lw.pointwise(lambda p: cast(load(out, list(p)), val.dtype))
