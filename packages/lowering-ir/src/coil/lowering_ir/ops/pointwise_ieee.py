"""Pointwise ops defined by IEEE-754 details: signed zeros, NaN handling, powers of two.

| op | eager's definition, as lowered here |
|---|---|
| `signbit` | the sign bit: `x < 0`, or `x == 0` with `1 / x < 0` (so `-0.0` is negative); integers `x < 0`, bool false |
| `copysign` (Tensor, Scalar) | `|a|` with the sign bit of `b` (`b = -0.0` gives a negative result); integer operands promote to float |
| `fmax` / `fmin` | max/min ignoring NaN (NaN only when both are NaN); integers plain max/min, bool or/and |
| `hypot` | `sqrt(a² + b²)` without overflow: `m · sqrt(1 + (n / m)²)`, m = max(|a|, |b|), n = min; inf wins over NaN |
| `ldexp` | `x · 2^e`, as eager's `x * pow(2, e)` (a power of two is exact; computed with `exp2`) |
| `round.decimals` | d ≥ 0: `nearbyint(x · 10^d) / 10^d`; d < 0: `nearbyint(x / 10^-d) · 10^-d`, in float32 for half types (eager's opmath), round half to even |
| `angle` (real inputs) | `π` where `x < 0`, NaN where x is NaN, else 0, in the float result dtype |

Limitation (documented, not hidden): without a bit-level reinterpretation in the value language
the sign of a NaN cannot be read, so `signbit(NaN)` is false (and `copysign(a, NaN)` positive)
whatever the NaN's sign bit. Eager reads the bit: a NaN made by an invalid operation on x86 (e.g.
`inf - inf`) carries a set sign bit there.
"""

from __future__ import annotations

import math
from typing import Any

import sympy
import torch
import torch.fx
from coil.lowering_ir.errors import Unsupported
from coil.lowering_ir.lowerer import Lowerer
from coil.lowering_ir.nodes import TensorRef
from coil.lowering_ir.ops.common import cast, is_tensor, upcast_compute, value_of
from coil.lowering_ir.registry import register
from coil.lowering_ir.values import Constant, Op, Value

aten = torch.ops.aten


def _out_dtype(lw: Lowerer) -> torch.dtype:
    val = lw.out_val()
    assert isinstance(val, torch.Tensor)
    return val.dtype


def _op(name: str, dt: torch.dtype, *args: Value) -> Value:
    return Op(name, tuple(args), dt)


def _bool(name: str, *args: Value) -> Value:
    return Op(name, tuple(args), torch.bool)


def sign_bit(v: Value) -> Value:
    """The sign bit of `v` as a bool Value: negative numbers and -0.0 (NaN: false, see above)."""
    zero = Constant(0, v.dtype)
    if v.dtype == torch.bool:
        return Constant(False, torch.bool)
    negative = _bool("lt", v, zero)
    if not v.dtype.is_floating_point:
        return negative
    negative_zero = _bool("logical_and", _bool("eq", v, zero),
                          _bool("lt", _op("reciprocal", v.dtype, v), zero))
    return _bool("logical_or", negative, negative_zero)


@register(aten.signbit.default)
def signbit(lw: Lowerer, node: torch.fx.Node, x: Any) -> TensorRef:
    if not is_tensor(x):
        raise Unsupported("signbit of a non-tensor")
    return lw.pointwise(lambda p: sign_bit(value_of(x, p)))


@register(aten.copysign.Tensor, aten.copysign.Scalar)
def copysign(lw: Lowerer, node: torch.fx.Node, a: Any, b: Any) -> TensorRef:
    dt = _out_dtype(lw)
    if not dt.is_floating_point:
        raise Unsupported("copysign with a non-float result")

    def body(p: list[sympy.Symbol]) -> Value:
        mag = _op("abs", dt, value_of(a, p, dt))
        if isinstance(b, bool | int | float):
            return _op("neg", dt, mag) if math.copysign(1.0, float(b)) < 0 else mag
        return _op("where", dt, sign_bit(value_of(b, p, dt)), _op("neg", dt, mag), mag)

    return lw.pointwise(body)


def _nan_ignoring(name: str) -> Any:
    """fmax (name "maximum") or fmin ("minimum"): the other operand where one is NaN."""

    def lowering(lw: Lowerer, node: torch.fx.Node, a: Any, b: Any) -> TensorRef:
        dt = _out_dtype(lw)

        def body(p: list[sympy.Symbol]) -> Value:
            va, vb = value_of(a, p, dt), value_of(b, p, dt)
            if dt == torch.bool:
                return _bool("logical_or" if name == "maximum" else "logical_and", va, vb)
            if not dt.is_floating_point:
                return _op(name, dt, va, vb)
            both = _op(name, dt, va, vb)  # NaN when either is NaN
            return _op("where", dt, _bool("isnan", va), vb, _op("where", dt, _bool("isnan", vb), va, both))

        return lw.pointwise(body)

    return lowering


register(aten.fmax.default)(_nan_ignoring("maximum"))
register(aten.fmin.default)(_nan_ignoring("minimum"))


@register(aten.hypot.default)
def hypot(lw: Lowerer, node: torch.fx.Node, a: Any, b: Any) -> TensorRef:
    dt = _out_dtype(lw)
    if not dt.is_floating_point:
        raise Unsupported("hypot with a non-float result")
    ct = upcast_compute(dt)

    def body(p: list[sympy.Symbol]) -> Value:
        va, vb = value_of(a, p, ct), value_of(b, p, ct)
        x, y = _op("abs", ct, va), _op("abs", ct, vb)
        big, small = _op("maximum", ct, x, y), _op("minimum", ct, x, y)
        one, zero = Constant(1.0, ct), Constant(0.0, ct)
        q = _op("truediv", ct, small, big)
        scaled = _op("mul", ct, big, _op("sqrt", ct, _op("add", ct, one, _op("mul", ct, q, q))))
        finite = _op("where", ct, _bool("eq", big, zero), zero, scaled)
        inf = _bool("logical_or", _bool("isinf", va), _bool("isinf", vb))
        return cast(_op("where", ct, inf, Constant(math.inf, ct), finite), dt)

    return lw.pointwise(body)


@register(aten.ldexp.Tensor)
def ldexp(lw: Lowerer, node: torch.fx.Node, x: Any, e: Any) -> TensorRef:
    dt = _out_dtype(lw)
    if not dt.is_floating_point:
        raise Unsupported("ldexp with a non-float result")
    return lw.pointwise(lambda p: _op("mul", dt, value_of(x, p, dt), _op("exp2", dt, value_of(e, p, dt))))


@register(aten.round.decimals)
def round_decimals(lw: Lowerer, node: torch.fx.Node, x: Any, *, decimals: int = 0) -> TensorRef:
    dt = _out_dtype(lw)
    if not dt.is_floating_point or not is_tensor(x) or not isinstance(decimals, int):
        raise Unsupported("round(decimals) of a non-float tensor")
    ct = upcast_compute(dt)
    scale = Constant(float(10 ** abs(decimals)), ct)

    def body(p: list[sympy.Symbol]) -> Value:
        v = value_of(x, p, ct)
        if decimals == 0:
            return cast(_op("round", ct, v), dt)
        if decimals > 0:
            return cast(_op("truediv", ct, _op("round", ct, _op("mul", ct, v, scale)), scale), dt)
        return cast(_op("mul", ct, _op("round", ct, _op("truediv", ct, v, scale)), scale), dt)

    return lw.pointwise(body)


@register(aten.angle.default)
def angle(lw: Lowerer, node: torch.fx.Node, x: Any) -> TensorRef:
    """The argument of a real number (complex inputs never reach lowerings)."""
    dt = _out_dtype(lw)
    if not is_tensor(x) or not dt.is_floating_point:
        raise Unsupported("angle of a non-tensor")

    def body(p: list[sympy.Symbol]) -> Value:
        v = value_of(x, p)
        if v.dtype == torch.bool:
            return Constant(0.0, dt)
        zero = Constant(0, v.dtype)
        pi_or_zero = _op("where", dt, _bool("lt", v, zero), Constant(math.pi, dt), Constant(0.0, dt))
        if not v.dtype.is_floating_point:
            return pi_or_zero
        return _op("where", dt, _bool("isnan", v), cast(v, dt), pi_or_zero)

    return lw.pointwise(body)
