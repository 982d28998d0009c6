"""Pointwise ops defined by IEEE-754 details: signed zeros, NaN handling, powers of two.

| op | eager's definition, as lowered here |
|---|---|
| `signbit` | the sign bit, read from the bits (value op "signbit"): set for negative numbers, `-0.0` and negative NaNs; integers `x < 0`, bool false |
| `copysign` (Tensor, Scalar) | `|a|` with the sign bit of `b` (`b = -0.0` or a negative NaN gives a negative result); integer operands promote to float |
| `fmax` / `fmin` | max/min ignoring NaN (NaN only when both are NaN); integers plain max/min, bool or/and |
| `hypot` | `sqrt(a² + b²)` without overflow: `m · sqrt(1 + (n / m)²)`, m = max(|a|, |b|), n = min; inf wins over NaN |
| `ldexp` | `x · 2^e`, as eager's `x * pow(2, e)` (a power of two is exact; computed with `exp2`) |
| `round.decimals` | d ≥ 0: `nearbyint(x · 10^d) / 10^d`; d < 0: `nearbyint(x / 10^-d) · 10^-d`, round half to even, the division correctly rounded (value op "div_rn"); half types in float32 (eager's CPU opmath), on CUDA with the first product or quotient rounded to the half type (eager's CUDA kernel) |
| `angle` (real inputs) | `π` where `x < 0`, NaN where x is NaN, else 0, in the float result dtype |

The sign bit is read from the value's bits (triton-codegen: the register reinterpreted as a
signed integer of its width), as eager does: a comparison cannot tell -0.0 from 0.0, and the
earlier `x == 0 and 1 / x < 0` could not read a NaN's sign.
Half types are held in float32 registers; widening keeps the sign bit. One difference remains:
the sign of a NaN computed in a half type (`signbit(x * 2)` for a bfloat16 NaN x). Eager rounds
the product to bfloat16, which makes every NaN the canonical positive one; coil reads the float32
intermediate, whose NaN keeps the sign of x.
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
    """The sign bit of `v` as a bool Value: negative numbers, -0.0 and negative NaNs."""
    if v.dtype == torch.bool:
        return Constant(False, torch.bool)
    return _bool("signbit", v)


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
    # eager's CUDA kernel computes in the half type itself: its first product (or quotient) is
    # rounded to it (1250 * 100 overflows float16 to inf there); its CPU kernel computes in float32
    device = lw.out_val().device
    half_steps = ct != dt and device.type == "cuda"

    def step(v: Value) -> Value:
        return cast(cast(v, dt), ct) if half_steps else v

    def body(p: list[sympy.Symbol]) -> Value:
        v = value_of(x, p, ct)
        if decimals == 0:
            return cast(_op("round", ct, v), dt)
        # eager divides with IEEE rounding (CUDA's default too): "truediv" may be 1 ulp off there
        if decimals > 0:
            return cast(_op("div_rn", ct, _op("round", ct, step(_op("mul", ct, v, scale))), scale), dt)
        return cast(_op("mul", ct, _op("round", ct, step(_op("div_rn", ct, v, scale))), scale), dt)

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
