"""Helpers shared by the lowerings: broadcasting loads, casts and type promotion."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sympy
import torch
from coil.lowering_ir.errors import Unsupported
from coil.lowering_ir.nodes import Buffer, ReinterpretView, load
from coil.lowering_ir.printing import FLOAT_FUNCTIONS
from coil.lowering_ir.values import Constant, IndexValue, Op, Value
from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND, elementwise_dtypes


def is_tensor(x: Any) -> bool:
    return isinstance(x, Buffer | ReinterpretView)


HALF = (torch.float16, torch.bfloat16)


def cast(v: Value, dtype: torch.dtype) -> Value:
    """`v` converted to `dtype` (folded for constants). Bool and float64 values reach a half
    type through float32 (exact for bool; what eager's float32 compute does for float64), as
    Triton's CPU interpreter mis-converts them to half types directly."""
    if v.dtype == dtype:
        return v
    if isinstance(v, Constant):
        if dtype == torch.bool:
            return Constant(bool(v.value), dtype)
        if dtype.is_floating_point:
            return Constant(float(v.value), dtype)
        if not dtype.is_complex:
            return Constant(int(v.value), dtype)
    if dtype in HALF and v.dtype in (torch.bool, torch.float64):
        return Op("cast", (Op("cast", (v,), torch.float32),), dtype)
    return Op("cast", (v,), dtype)


def scalar_dtype(x: Any) -> torch.dtype:
    if isinstance(x, bool):
        return torch.bool
    if isinstance(x, int):
        return torch.int64
    if isinstance(x, float):
        return torch.float32
    raise Unsupported(f"scalar of type {type(x).__name__}")


def value_of(x: Any, p: Sequence[sympy.Expr], dtype: torch.dtype | None = None) -> Value:
    """The Value of argument `x` (tensor or scalar) at output position `p`, broadcasting.

    Tensor dims align with the trailing dims of `p`; a dim of size 1 is read at index 0.
    With `dtype`, the value is cast to it.
    """
    v: Value
    if is_tensor(x):
        size = x.layout.size
        if len(size) > len(p):
            raise Unsupported("input of higher rank than the output")
        tail = list(p[len(p) - len(size):])
        idx = [sympy.Integer(0) if s == 1 else i for s, i in zip(size, tail, strict=True)]
        v = load(x, idx)
    elif isinstance(x, bool | int | float):
        v = Constant(x, dtype if dtype is not None else scalar_dtype(x))
    elif isinstance(x, sympy.Expr):
        if type(x).__name__ == "ToFloat":  # float(size expression)
            v = cast(IndexValue(x.args[0], torch.int64), torch.float64)
        elif float_valued(x):  # a SymFloat (1 / numel, an unbacked float): never truncated
            v = IndexValue(x, torch.float64)
        else:
            v = IndexValue(x, torch.int64)  # a size symbol used as a number
    else:
        raise Unsupported(f"operand of type {type(x).__name__}")
    return cast(v, dtype) if dtype is not None else v


def float_valued(e: sympy.Expr) -> bool:
    """Whether a scalar expression has a float value (a SymFloat's): a true division or float
    conversion of torch's (`IntTrueDiv`, `FloatTrueDiv`, `ToFloat`), a float number, or a
    symbol not known to be an integer (an unbacked float scalar)."""
    for a in sympy.preorder_traversal(e):
        if type(a).__name__ in FLOAT_FUNCTIONS or isinstance(a, sympy.Float):
            return True
        if isinstance(a, sympy.Symbol) and a.is_integer is not True:
            return True
    return False


def _meta(x: Any) -> Any:
    """A tensor operand as a meta tensor of its dtype and rank (sizes 1), scalars as they are:
    enough for PyTorch's promotion rules, which look at dtype and 0-d-ness only."""
    if is_tensor(x):
        shape = [1] * len(x.layout.size)
        return torch.empty(shape, dtype=x.layout.dtype, device="meta")
    return x


def promoted(*args: Any) -> torch.dtype:
    """PyTorch's default elementwise type promotion of tensors and scalars (0-dim rules kept)."""
    metas: list[Any] = [_meta(a) for a in args if is_tensor(a) or isinstance(a, bool | int | float)]
    _, result = elementwise_dtypes(*metas, type_promotion_kind=ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT)
    return result


def upcast_compute(dtype: torch.dtype) -> torch.dtype:
    """The type arithmetic runs in for values of `dtype` (half types compute in float32)."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype

