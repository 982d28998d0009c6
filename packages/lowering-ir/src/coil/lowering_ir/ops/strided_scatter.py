"""as_strided_scatter: a copy of `input` whose storage, seen through (size, stride, offset), is
overwritten by `src`.

Eager clones `input` (the clone keeps `input`'s strides when they are dense) and copies `src` into
`clone.as_strided(size, stride, storage_offset)`: the view addresses the clone's *storage*, not its
logical order. Lowered as one `Scatter`: a copy of `input`, then, for each position p of `src`,
storage element `storage_offset + sum(p_k * stride_k)` of the output gets `src[p]`. The output
buffer is laid out exactly as the node's FakeTensor, so storage indices mean the same as in
eager. A view that maps two positions to one element (a zero stride) leaves one of the writes,
unspecified which; eager's CPU loop keeps the last.
"""

from __future__ import annotations

from typing import Any

import sympy
import torch
import torch.fx
from coil.lowering_ir.errors import Unsupported
from coil.lowering_ir.lowerer import Lowerer, index_symbols
from coil.lowering_ir.nodes import Scatter, TensorRef, load
from coil.lowering_ir.ops.common import cast, is_tensor
from coil.lowering_ir.registry import register
from coil.lowering_ir.values import Load

aten = torch.ops.aten


def _dense(val: torch.Tensor) -> bool:
    """Does `val` cover its storage exactly once from offset 0 (each element one position)?"""
    if int(val.storage_offset()) != 0:
        return False
    dims = sorted((int(st), int(sz)) for st, sz in zip(val.stride(), val.shape, strict=True) if int(sz) != 1)
    expected = 1
    for st, sz in dims:
        if st != expected:
            return False
        expected *= sz
    return True


@register(aten.as_strided_scatter.default)
def as_strided_scatter(lw: Lowerer, node: torch.fx.Node, x: Any, src: Any, size: Any, stride: Any,
                       storage_offset: Any = None) -> TensorRef:
    val = lw.out_val()
    assert isinstance(val, torch.Tensor)
    if not (is_tensor(x) and is_tensor(src)):
        raise Unsupported("as_strided_scatter of non-tensors")
    shapes = [*size, *stride, 0 if storage_offset is None else storage_offset]
    if not all(isinstance(v, int) for v in shapes) or not all(isinstance(v, int) for v in val.shape):
        raise Unsupported("as_strided_scatter with symbolic sizes, strides or offset")
    if not _dense(val):
        raise Unsupported("as_strided_scatter into a non-dense output layout")
    if tuple(int(s) for s in src.layout.size) != tuple(size):
        raise Unsupported("as_strided_scatter whose src is not shaped like the view")
    offset = 0 if storage_offset is None else int(storage_offset)

    out = lw.new_buffer(val)
    p = index_symbols("p", len(size))
    position = sympy.Integer(offset) + sum((sympy.Integer(st) * pk for st, pk in zip(stride, p, strict=True)),
                                           sympy.Integer(0))
    target = Load(out.name, sympy.expand(position), out.layout.dtype)
    value = cast(load(src, list(p)), val.dtype)
    lw.operations.append(Scatter(lw.fresh("op"), lw.origins(), out, x, tuple(sympy.Integer(s) for s in size),
                                 target, value, False))
    return out
