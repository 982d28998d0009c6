"""View lowerings: every view op becomes a ReinterpretView with the layout of its meta["val"].

Because each buffer is laid out exactly as its FakeTensor, the FakeTensor of a view tells its
sizes, strides and offset into the same storage: one rule covers view, reshape-as-view, permute,
transpose, expand, squeeze, unsqueeze, slice, select, diagonal, unfold, as_strided and alias.
"""

from __future__ import annotations

from typing import Any

import sympy
import torch
import torch.fx
from coil.lowering_ir.errors import Unsupported
from coil.lowering_ir.lowerer import Lowerer
from coil.lowering_ir.nodes import TensorRef, load
from coil.lowering_ir.ops.common import is_tensor
from coil.lowering_ir.registry import register

aten = torch.ops.aten
prims = torch.ops.prims

VIEW_OPS = [
    aten.view, aten._unsafe_view, aten.permute, aten.transpose, aten.t, aten.expand,
    aten.squeeze, aten.unsqueeze, aten.slice, aten.select, aten.diagonal, aten.unfold,
    aten.as_strided, aten.alias, aten.detach, aten.view_as, aten.expand_as,
    aten.reshape, prims.broadcast_in_dim, prims.squeeze, prims.view_of,
]


@register(*VIEW_OPS)
def view(lw: Lowerer, node: torch.fx.Node, x: Any, *args: Any, **kw: Any) -> TensorRef:
    if not is_tensor(x):
        raise Unsupported("view of a non-tensor")
    val = lw.out_val()
    assert isinstance(val, torch.Tensor)
    src = node.args[0].meta.get("val") if isinstance(node.args[0], torch.fx.Node) else None
    if src is None or val.untyped_storage()._cdata != src.untyped_storage()._cdata:
        # reshape that had to copy: materialise it as a pointwise copy in the new shape
        if node.target in (aten.reshape.default, aten._unsafe_view.default):
            return _copy_reshape(lw, x, val)
        raise Unsupported("view whose result does not share storage with its input")
    return lw.view(x, val)


def _copy_reshape(lw: Lowerer, x: TensorRef, val: torch.Tensor) -> TensorRef:
    """A reshape that had to copy: each output position's row-major number, re-read in x."""
    in_size = x.layout.size

    def body(p: list[sympy.Symbol]) -> Any:
        flat: sympy.Expr = sympy.Integer(0)
        for pi, n in zip(p, val.shape, strict=True):
            flat = flat * n + pi
        idx: list[sympy.Expr] = []
        for n in reversed(in_size):
            idx.append(sympy.Mod(flat, n))
            flat = sympy.floor(flat / n)
        return load(x, list(reversed(idx)))

    return lw.pointwise(body)


@register(aten.split, aten.split_with_sizes, aten.unbind, aten.chunk, aten.tensor_split)
def split(lw: Lowerer, node: torch.fx.Node, x: Any, *args: Any, **kw: Any) -> list[TensorRef]:
    """Multi-output views: each piece is a ReinterpretView of the input's storage."""
    if not is_tensor(x):
        raise Unsupported("split of a non-tensor")
    vals = lw.out_val()
    if not isinstance(vals, list | tuple) or not all(isinstance(v, torch.Tensor) for v in vals):
        raise Unsupported("split without tensor results")
    return [lw.view(x, v) for v in vals]
