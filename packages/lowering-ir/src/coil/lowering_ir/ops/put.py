"""put: a copy of `input` whose elements at flat (row-major) positions `index` get `source`.

`out = input.clone(); out.view(-1)[index.view(-1)] = source.view(-1)` (or `+=` with
`accumulate`, duplicates adding up): `index` and `source` have the same number of elements, in
any shapes; a negative index counts from the end. Lowered as one `Scatter` over the k-th element
of `index` and `source` (each read at k's row-major position in its own shape), writing flat
position `index[k]` of the output; the output must be contiguous so a flat position is its
storage index. Without `accumulate`, which of several writes to one position stays is
unspecified (eager's CPU loop keeps the last). Accumulating in float16/bfloat16 runs in float32
(coil.lowering_ir.ops.wide_accumulate).
"""

from __future__ import annotations

from typing import Any

import sympy
import torch
import torch.fx
from coil.lowering_ir.errors import Unsupported
from coil.lowering_ir.layout import Expr
from coil.lowering_ir.lowerer import Lowerer, index_symbols
from coil.lowering_ir.nodes import Scatter, TensorRef, load
from coil.lowering_ir.ops.common import cast, is_tensor
from coil.lowering_ir.ops.wide_accumulate import accumulation_target, finish
from coil.lowering_ir.registry import register
from coil.lowering_ir.values import Constant, Load, Op, Value, indirect_symbol

aten = torch.ops.aten


def _unravel(flat: Expr, shape: tuple[Expr, ...]) -> list[Expr]:
    """The position of row-major element number `flat` in a tensor of `shape`."""
    idx: list[Expr] = []
    for n in reversed(shape):
        idx.append(sympy.Mod(flat, n) if n != 1 else sympy.Integer(0))
        flat = sympy.floor(flat / n)
    return list(reversed(idx))


@register(aten.put.default)
def put(lw: Lowerer, node: torch.fx.Node, x: Any, index: Any, source: Any, accumulate: bool = False) -> TensorRef:
    val = lw.out_val()
    assert isinstance(val, torch.Tensor)
    if not (is_tensor(x) and is_tensor(index) and is_tensor(source)):
        raise Unsupported("put of non-tensors")
    sizes = (*val.shape, *index.layout.size, *source.layout.size)
    if not all(isinstance(s, int) or (isinstance(s, sympy.Expr) and s.is_Integer) for s in sizes):
        raise Unsupported("put with symbolic sizes")
    if not val.is_contiguous() or int(val.storage_offset()) != 0:
        raise Unsupported("put into a non-contiguous output")
    numel = int(val.numel())
    count = 1
    for s in index.layout.size:
        count *= int(s)
    if numel == 0 or count == 0:
        raise Unsupported("put with no elements")

    out, base = accumulation_target(lw, x, val, bool(accumulate))
    (k,) = index_symbols("p", 1)
    i: Value = cast(load(index, _unravel(k, index.layout.size)), torch.int64)
    wrapped = Op("where", (Op("lt", (i, Constant(0, torch.int64)), torch.bool),
                           Op("add", (i, Constant(numel, torch.int64)), torch.int64), i), torch.int64)
    target_sym = indirect_symbol(sympy.Integer(numel))
    target = Load(out.name, target_sym, out.layout.dtype, None, ((target_sym, wrapped),))
    value = cast(cast(load(source, _unravel(k, source.layout.size)), val.dtype), out.layout.dtype)
    lw.operations.append(Scatter(lw.fresh("op"), lw.origins(), out, base, (sympy.Integer(count),), target, value,
                                 bool(accumulate)))
    return finish(lw, out, val)
