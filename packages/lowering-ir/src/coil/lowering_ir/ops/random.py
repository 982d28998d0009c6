"""Random ops with a counter-based in-kernel generator (Philox, through tl.rand/tl.randn).

Each compiled call draws one seed from torch's default generator (an extern `randint`), so
`torch.manual_seed(s)` makes coil's random ops reproducible run after run. Op k of a graph uses
stream seed + k and offset = the element's row-major position, so ops are independent and the
result does not depend on block sizes. The numbers differ from eager PyTorch's (another
generator); tests compare distributions and reproducibility, not values.
"""

from __future__ import annotations

from typing import Any

import sympy
import torch
import torch.fx
from coil.lowering_ir.errors import Unsupported
from coil.lowering_ir.layout import contiguous_strides
from coil.lowering_ir.lowerer import Lowerer
from coil.lowering_ir.nodes import TensorRef, load
from coil.lowering_ir.ops.common import cast, is_tensor, value_of
from coil.lowering_ir.registry import register
from coil.lowering_ir.values import Constant, IndexValue, Op, Value

aten = torch.ops.aten


def _random(lw: Lowerer, kind: str) -> tuple[Any, Any]:
    """(val, body maker): body(p) is a float32 random Value at output position p."""
    val = lw.out_val()
    if not isinstance(val, torch.Tensor):
        raise Unsupported("random op without a tensor result")
    seed, stream = lw.random_seed(val.device)
    strides = contiguous_strides([sympy.sympify(s) for s in val.shape])

    def rnd(p: list[sympy.Symbol]) -> Value:
        flat = sum((pi * st for pi, st in zip(p, strides, strict=True)), sympy.Integer(0))
        s = Op("add", (load(seed, [sympy.Integer(0)]), Constant(stream, torch.int64)), torch.int64)
        return Op(kind, (s, IndexValue(flat, torch.int64)), torch.float32)

    return val, rnd


@register(aten.rand.default, aten.rand_like.default)
def rand(lw: Lowerer, node: torch.fx.Node, *args: Any, **kwargs: Any) -> TensorRef:
    val, rnd = _random(lw, "rand")
    if not val.dtype.is_floating_point:
        raise Unsupported("rand of a non-float dtype")
    return lw.pointwise(lambda p: cast(rnd(p), val.dtype))


@register(aten.randn.default, aten.randn_like.default)
def randn(lw: Lowerer, node: torch.fx.Node, *args: Any, **kwargs: Any) -> TensorRef:
    val, rnd = _random(lw, "randn")
    if not val.dtype.is_floating_point:
        raise Unsupported("randn of a non-float dtype")
    return lw.pointwise(lambda p: cast(rnd(p), val.dtype))


@register(aten.bernoulli.default, aten.bernoulli.p)
def bernoulli(lw: Lowerer, node: torch.fx.Node, x: Any, p: Any = None, **kwargs: Any) -> TensorRef:
    """1 with probability p (a float, or x itself for bernoulli(x)), else 0."""
    if kwargs.get("generator") is not None:
        raise Unsupported("bernoulli with an explicit generator")
    val, rnd = _random(lw, "rand")
    prob = x if node.target is aten.bernoulli.default else p
    if not (is_tensor(prob) or isinstance(prob, float | int)):
        raise Unsupported("bernoulli probability")

    def body(q: list[sympy.Symbol]) -> Value:
        hit = Op("lt", (rnd(q), value_of(prob, q, torch.float32)), torch.bool)
        return cast(hit, val.dtype)

    return lw.pointwise(body)
