"""Index-remap lowerings: each output element reads one input element at a remapped position.

- `flip`: reversed index along the flipped dims (a load through `size - 1 - p`).
- `slice_scatter`, `diagonal_scatter`: `where(p in the slice/diagonal, src[remapped p], self[p])`,
  with a masked load of `src`, so nothing outside the slice is read from it.
(`select_scatter` decomposes to `where(arange == index, ...)` in coil's table.)

All are one Pointwise over the output; inputs are read through their own layouts, so
non-contiguous inputs and views need no copy. Sizes along the remapped dims must be static.
"""

from __future__ import annotations

from typing import Any

import sympy
import torch
import torch.fx
from coil.lowering_ir.errors import Unsupported
from coil.lowering_ir.layout import Expr
from coil.lowering_ir.lowerer import Lowerer
from coil.lowering_ir.nodes import TensorRef, load
from coil.lowering_ir.ops.common import cast, is_tensor
from coil.lowering_ir.registry import register
from coil.lowering_ir.values import Constant, IndexValue, Load, Op, Value

aten = torch.ops.aten


def _static(n: Expr, what: str) -> int:
    if not isinstance(n, sympy.Integer):
        raise Unsupported(f"{what} along a symbolic size")
    return int(n)


def _all(conds: list[Value]) -> Value | None:
    out: Value | None = None
    for c in conds:
        out = c if out is None else Op("logical_and", (out, c), torch.bool)
    return out


def _masked_load(x: TensorRef, idx: list[Expr], mask: Value | None, dtype: torch.dtype) -> Value:
    ld = load(x, idx)
    return cast(Load(ld.buffer, ld.index, ld.dtype, mask), dtype)


@register(aten.flip.default)
def flip(lw: Lowerer, node: torch.fx.Node, x: Any, dims: Any) -> TensorRef:
    """out[p] = x[p'] with p'[d] = size[d] - 1 - p[d] for each flipped dim d."""
    if not is_tensor(x):
        raise Unsupported("flip of a non-tensor")
    size = x.layout.size
    rank = len(size)
    flipped = {d % rank for d in dims} if rank else set()
    dt = lw.out_val().dtype

    def body(p: list[sympy.Symbol]) -> Value:
        idx: list[Expr] = [size[d] - 1 - p[d] if d in flipped else p[d] for d in range(rank)]
        return cast(load(x, idx), dt)

    return lw.pointwise(body)


def _slice_bounds(size: int, start: Any, end: Any, step: Any) -> tuple[int, int, int]:
    """PyTorch's normalisation of slice bounds: None -> full, negatives from the end, clamped."""
    if not all(v is None or isinstance(v, int) for v in (start, end)) or not isinstance(step, int):
        raise Unsupported("symbolic slice bounds")
    lo = 0 if start is None else start
    hi = size if end is None else end
    lo = lo + size if lo < 0 else lo
    hi = hi + size if hi < 0 else hi
    lo = min(max(lo, 0), size)
    hi = min(max(hi, lo), size)
    return lo, hi, step


@register(aten.slice_scatter.default)
def slice_scatter(lw: Lowerer, node: torch.fx.Node, x: Any, src: Any, dim: int = 0, start: Any = None,
                  end: Any = None, step: Any = 1) -> TensorRef:
    """out = x with out[..., start:end:step, ...] = src along `dim` (src's shape is the slice's)."""
    if not (is_tensor(x) and is_tensor(src)):
        raise Unsupported("slice_scatter operands")
    rank = len(x.layout.size)
    if rank == 0:
        raise Unsupported("slice_scatter of a 0-d tensor")
    d = dim % rank
    lo, hi, st = _slice_bounds(_static(x.layout.size[d], "slice_scatter"), start, end, step)
    dt = lw.out_val().dtype

    def body(p: list[sympy.Symbol]) -> Value:
        i = IndexValue(p[d], torch.int64)
        conds: list[Value] = [Op("lt", (i, Constant(hi, torch.int64)), torch.bool)]
        if lo > 0:
            conds.append(Op("ge", (i, Constant(lo, torch.int64)), torch.bool))
        if st != 1:
            rem = IndexValue(sympy.Mod(p[d] + (st - lo % st) % st, st), torch.int64)
            conds.append(Op("eq", (rem, Constant(0, torch.int64)), torch.bool))
        inside = _all(conds)
        assert inside is not None
        sidx: list[Expr] = list(p)
        sidx[d] = sympy.floor((p[d] - lo) / sympy.Integer(st)) if st != 1 else p[d] - lo
        got = _masked_load(src, sidx, inside, dt)
        return Op("where", (inside, got, cast(load(x, list(p)), dt)), dt)

    return lw.pointwise(body)


@register(aten.diagonal_scatter.default)
def diagonal_scatter(lw: Lowerer, node: torch.fx.Node, x: Any, src: Any, offset: int = 0, dim1: int = 0,
                     dim2: int = 1) -> TensorRef:
    """out = x with its (offset, dim1, dim2) diagonal replaced by src, whose last dim runs
    along the diagonal and whose other dims are x's other dims in order."""
    if not (is_tensor(x) and is_tensor(src)):
        raise Unsupported("diagonal_scatter operands")
    rank = len(x.layout.size)
    if rank < 2:
        raise Unsupported("diagonal_scatter of fewer than 2 dims")
    d1, d2 = dim1 % rank, dim2 % rank
    if d1 == d2:
        raise Unsupported("diagonal_scatter with equal dims")
    dt = lw.out_val().dtype

    def body(p: list[sympy.Symbol]) -> Value:
        on = Op("eq", (IndexValue(p[d2] - p[d1], torch.int64), Constant(int(offset), torch.int64)), torch.bool)
        i = p[d1] if offset >= 0 else p[d2]
        sidx: list[Expr] = [p[k] for k in range(rank) if k not in (d1, d2)] + [i]
        got = _masked_load(src, sidx, on, dt)
        return Op("where", (on, got, cast(load(x, list(p)), dt)), dt)

    return lw.pointwise(body)
