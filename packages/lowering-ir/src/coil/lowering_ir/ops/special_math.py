"""A tiny builder for float formulas over Values, used by the special-function lowerings
(special.py, bessel.py), and `unary_lowering`, which lowers one such formula pointwise.

`F` wraps a float Value; Python operators build `Op`s in that Value's dtype (numbers become
Constants of it). A formula is a DAG: bind a shared subexpression to a Python name and reuse
the object, so every walker (which memoises by identity) visits it once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import sympy
import torch
from coil.lowering_ir.errors import Unsupported
from coil.lowering_ir.lowerer import Lowerer
from coil.lowering_ir.nodes import TensorRef
from coil.lowering_ir.ops.common import cast, is_tensor, upcast_compute, value_of
from coil.lowering_ir.values import Constant, Op, Value


class F:
    """A float Value under construction."""

    __slots__ = ("v",)

    def __init__(self, v: Value) -> None:
        self.v = v

    @property
    def dtype(self) -> torch.dtype:
        return self.v.dtype

    def _val(self, x: F | float) -> Value:
        return x.v if isinstance(x, F) else Constant(float(x), self.v.dtype)

    def _bin(self, name: str, a: Value, b: Value) -> F:
        return F(Op(name, (a, b), self.v.dtype))

    def __add__(self, x: F | float) -> F:
        return self._bin("add", self.v, self._val(x))

    def __radd__(self, x: float) -> F:
        return self._bin("add", self._val(x), self.v)

    def __sub__(self, x: F | float) -> F:
        return self._bin("sub", self.v, self._val(x))

    def __rsub__(self, x: float) -> F:
        return self._bin("sub", self._val(x), self.v)

    def __mul__(self, x: F | float) -> F:
        return self._bin("mul", self.v, self._val(x))

    def __rmul__(self, x: float) -> F:
        return self._bin("mul", self._val(x), self.v)

    def __truediv__(self, x: F | float) -> F:
        return self._bin("truediv", self.v, self._val(x))

    def __rtruediv__(self, x: float) -> F:
        return self._bin("truediv", self._val(x), self.v)

    def __neg__(self) -> F:
        return F(Op("neg", (self.v,), self.v.dtype))

    def _cmp(self, name: str, x: F | float) -> Value:
        return Op(name, (self.v, self._val(x)), torch.bool)

    def lt(self, x: F | float) -> Value:
        return self._cmp("lt", x)

    def le(self, x: F | float) -> Value:
        return self._cmp("le", x)

    def gt(self, x: F | float) -> Value:
        return self._cmp("gt", x)

    def ge(self, x: F | float) -> Value:
        return self._cmp("ge", x)

    def eq(self, x: F | float) -> Value:
        return self._cmp("eq", x)

    def ne(self, x: F | float) -> Value:
        return self._cmp("ne", x)

    def to(self, dtype: torch.dtype) -> F:
        return F(cast(self.v, dtype))


def fn(name: str, x: F) -> F:
    """A unary value op (exp, log, sqrt, sin, floor, abs, ...) in x's dtype."""
    return F(Op(name, (x.v,), x.dtype))


def pow_(x: F, y: F | float) -> F:
    return F(Op("pow", (x.v, x._val(y)), x.dtype))


def where(cond: Value, a: F | float, b: F | float) -> F:
    """cond ? a : b (at least one branch an F, which gives the dtype)."""
    dt = a.dtype if isinstance(a, F) else b.dtype if isinstance(b, F) else torch.float64
    av = a.v if isinstance(a, F) else Constant(float(a), dt)
    bv = b.v if isinstance(b, F) else Constant(float(b), dt)
    return F(Op("where", (cond, av, bv), dt))


def both(a: Value, b: Value) -> Value:
    return Op("logical_and", (a, b), torch.bool)


def either(a: Value, b: Value) -> Value:
    return Op("logical_or", (a, b), torch.bool)


def isnan(x: F) -> Value:
    return Op("isnan", (x.v,), torch.bool)


def isinf(x: F) -> Value:
    return Op("isinf", (x.v,), torch.bool)


def polevl(x: F, coeffs: Sequence[float]) -> F:
    """coeffs[0] * x^N + ... + coeffs[N] (Horner; Cephes' polevl)."""
    acc: F | float = coeffs[0]
    for c in coeffs[1:]:
        acc = (acc * x if isinstance(acc, F) else x * acc) + c
    return acc if isinstance(acc, F) else x * 0.0 + acc


def p1evl(x: F, coeffs: Sequence[float]) -> F:
    """x^N + coeffs[0] * x^(N-1) + ... (Cephes' p1evl: leading coefficient 1)."""
    return polevl(x, [1.0, *coeffs])


def chbevl(x: F, coeffs: Sequence[float]) -> F:
    """Cephes' chbevl: the Chebyshev series sum' coeffs[i] T_i(x / 2) by Clenshaw's recurrence
    (coefficients highest order first). The recurrence shares b1 and b2: a DAG."""
    b0: F | float = coeffs[0]
    b1: F | float = 0.0
    b2: F | float = 0.0
    for c in coeffs[1:]:
        b2 = b1
        b1 = b0
        b0 = x * b1 - b2 + c
    assert isinstance(b0, F)
    return 0.5 * (b0 - b2)


def unary_lowering(lw: Lowerer, x: Any, body: Callable[[F], F], compute: torch.dtype | None = None) -> TensorRef:
    """Lower `out = body(x)` pointwise: x (a tensor) cast to the compute dtype (`compute`, else
    float32 for half/float32/integer results' inputs and float64 for float64), the result
    rounded to the node's float dtype. Non-float results raise Unsupported (fallback)."""
    if not is_tensor(x):
        raise Unsupported("special function of a non-tensor")
    dt = lw.out_val().dtype
    if not dt.is_floating_point:
        raise Unsupported("special function with a non-float result")
    ct = compute or upcast_compute(dt)

    def point(p: list[sympy.Symbol]) -> Value:
        return cast(body(F(value_of(x, p, ct))).v, dt)

    return lw.pointwise(point)
