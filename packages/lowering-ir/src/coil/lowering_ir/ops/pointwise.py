"""Pointwise lowerings: unary, binary and ternary math, comparisons, casts, constants."""

from __future__ import annotations

import math
from typing import Any

import sympy
import torch
import torch.fx
from coil.lowering_ir.errors import Unsupported
from coil.lowering_ir.layout import as_expr
from coil.lowering_ir.lowerer import Lowerer as LowererLike
from coil.lowering_ir.nodes import TensorRef
from coil.lowering_ir.ops.common import cast, float_valued, is_tensor, promoted, value_of
from coil.lowering_ir.registry import register, register_by_name
from coil.lowering_ir.values import Constant, IndexValue, Op, Value

aten = torch.ops.aten
prims = torch.ops.prims

# aten op -> value op; the result has the node's dtype and inputs are cast to it
UNARY: dict[Any, str] = {
    aten.neg: "neg", aten.abs: "abs", aten.exp: "exp", aten.exp2: "exp2", aten.expm1: "expm1",
    aten.log: "log", aten.log2: "log2", aten.log10: "log10", aten.log1p: "log1p",
    aten.sqrt: "sqrt", aten.rsqrt: "rsqrt", aten.sin: "sin", aten.cos: "cos", aten.tan: "tan",
    aten.tanh: "tanh", aten.sigmoid: "sigmoid", aten.erf: "erf", aten.erfc: "erfc",
    aten.asin: "asin", aten.acos: "acos", aten.atan: "atan", aten.sinh: "sinh", aten.cosh: "cosh",
    aten.asinh: "asinh", aten.acosh: "acosh", aten.atanh: "atanh", aten.floor: "floor",
    aten.ceil: "ceil", aten.round: "round", aten.trunc: "trunc", aten.frac: "frac",
    aten.reciprocal: "reciprocal", aten.sign: "sign", aten.bitwise_not: "bitwise_not",
}
BINARY: dict[Any, str] = {
    aten.mul: "mul", aten.maximum: "maximum", aten.minimum: "minimum", aten.pow: "pow",
    aten.remainder: "remainder", aten.fmod: "fmod", aten.atan2: "atan2",
    aten.bitwise_and: "bitwise_and", aten.bitwise_or: "bitwise_or", aten.bitwise_xor: "bitwise_xor",
    aten.bitwise_left_shift: "lshift", aten.bitwise_right_shift: "rshift",
    aten.floor_divide: "floordiv",
}
COMPARE: dict[Any, str] = {
    aten.eq: "eq", aten.ne: "ne", aten.lt: "lt", aten.le: "le", aten.gt: "gt", aten.ge: "ge",
}
LOGICAL: dict[Any, str] = {
    aten.logical_and: "logical_and", aten.logical_or: "logical_or", aten.logical_xor: "logical_xor",
}
BOOL_UNARY: dict[Any, str] = {aten.isnan: "isnan", aten.isinf: "isinf", aten.logical_not: "logical_not"}


def out_dtype(lw: LowererLike) -> torch.dtype:
    val = lw.out_val()
    assert isinstance(val, torch.Tensor)
    return val.dtype


def _unary(name: str) -> Any:
    def lowering(lw: LowererLike, node: torch.fx.Node, x: Any, *rest: Any, **kw: Any) -> TensorRef:
        if rest or kw:
            raise Unsupported("extra arguments")
        dt = out_dtype(lw)
        if name in ("floor", "ceil", "round", "trunc") and not dt.is_floating_point:
            return lw.pointwise(lambda p: value_of(x, p, dt))
        return lw.pointwise(lambda p: Op(name, (value_of(x, p, dt),), dt))

    return lowering


def _binary(name: str) -> Any:
    def lowering(lw: LowererLike, node: torch.fx.Node, a: Any, b: Any, **kw: Any) -> TensorRef:
        if kw:
            raise Unsupported("extra arguments")
        dt = out_dtype(lw)
        if name == "pow" and isinstance(b, int | float) and is_tensor(a):
            return lw.pointwise(lambda p: _pow_scalar(value_of(a, p, dt), b, dt))
        if name == "pow" and not dt.is_floating_point:
            if dt != torch.bool and type(a) is int and is_tensor(b) and _int_pow_base_ok(a):
                return lw.pointwise(lambda p: _int_pow_of_scalar(a, value_of(b, p, dt), dt))
            raise Unsupported("integer pow other than of a scalar base 0, 1, -1 or a power of two")
        return lw.pointwise(lambda p: Op(name, (value_of(a, p, dt), value_of(b, p, dt)), dt))

    return lowering


def _pow_scalar(x: Value, e: float, dt: torch.dtype) -> Value:
    """x ** e, with multiplications for small integer exponents and sqrt/rsqrt for +-0.5."""
    if e == 0:
        return Constant(1, dt)
    if float(e).is_integer() and 1 <= abs(e) <= 4:
        acc = x
        for _ in range(int(abs(e)) - 1):
            acc = Op("mul", (acc, x), dt)
        return acc if e > 0 else Op("reciprocal", (acc,), dt)
    if e == 0.5:
        return Op("sqrt", (x,), dt)
    if e == -0.5:
        return Op("rsqrt", (x,), dt)
    return Op("pow", (x, Constant(float(e), dt)), dt)


def _int_pow_base_ok(base: int) -> bool:
    return base in (0, 1, -1) or (base > 0 and base & (base - 1) == 0)


def _int_pow_of_scalar(base: int, e: Value, dt: torch.dtype) -> Value:
    """`base ** e` for an integer tensor `e` and a scalar base 0, 1, -1 or 2^k, in the integer
    dtype `dt`, as eager's integer pow: a negative exponent gives 0 (1 for base 1, +-1 for base
    -1), and results wrap modulo 2^bits (2^k to a power of bits / k or more is 0). torch 2.11's
    derivative of ldexp is `grad * pow(2, e)` in int64."""
    one, zero = Constant(1, dt), Constant(0, dt)
    if base == 1:
        return one
    if base == -1:
        odd = Op("ne", (Op("bitwise_and", (e, one), dt), zero), torch.bool)
        return Op("where", (odd, Constant(-1, dt), one), dt)
    if base == 0:
        return Op("where", (Op("eq", (e, zero), torch.bool), one, zero), dt)
    k = base.bit_length() - 1
    bits = dt.itemsize * 8
    shifted = Op("lshift", (one, Op("mul", (e, Constant(k, dt)), dt)), dt)
    in_range = Op("logical_and", (Op("ge", (e, zero), torch.bool),
                                  Op("lt", (e, Constant(-(-bits // k), dt)), torch.bool)), torch.bool)
    return Op("where", (in_range, shifted, zero), dt)


def _compare(name: str) -> Any:
    def lowering(lw: LowererLike, node: torch.fx.Node, a: Any, b: Any) -> TensorRef:
        ct = promoted(a, b)
        return lw.pointwise(lambda p: Op(name, (value_of(a, p, ct), value_of(b, p, ct)), torch.bool))

    return lowering


def _logical(name: str) -> Any:
    def lowering(lw: LowererLike, node: torch.fx.Node, a: Any, b: Any) -> TensorRef:
        dt = out_dtype(lw)
        def body(p: list[sympy.Symbol]) -> Value:
            both = (value_of(a, p, torch.bool), value_of(b, p, torch.bool))
            return cast(Op(name, both, torch.bool), dt)

        return lw.pointwise(body)

    return lowering


def _bool_unary(name: str) -> Any:
    def lowering(lw: LowererLike, node: torch.fx.Node, x: Any) -> TensorRef:
        dt = out_dtype(lw)
        src = x.layout.dtype if is_tensor(x) else torch.float32
        if name == "logical_not":
            src = torch.bool
        return lw.pointwise(lambda p: cast(Op(name, (value_of(x, p, src),), torch.bool), dt))

    return lowering


for _op, _name in UNARY.items():
    register(_op)(_unary(_name))
for _op, _name in BINARY.items():
    register(_op)(_binary(_name))
for _op, _name in COMPARE.items():
    register(_op)(_compare(_name))
for _op, _name in LOGICAL.items():
    register(_op)(_logical(_name))
for _op, _name in BOOL_UNARY.items():
    register(_op)(_bool_unary(_name))


@register(aten.add, aten.sub)
def add_sub(lw: LowererLike, node: torch.fx.Node, a: Any, b: Any, alpha: Any = 1) -> TensorRef:
    dt = out_dtype(lw)
    name = "add" if node.target in (aten.add.Tensor, aten.add.Scalar) else "sub"
    if dt == torch.bool:  # True + True is True: a logical or, not a 1-bit sum that wraps
        if name != "add" or alpha != 1:
            raise Unsupported("bool sub or alpha")
        return lw.pointwise(lambda p: Op("logical_or", (value_of(a, p, torch.bool), value_of(b, p, torch.bool)), torch.bool))

    def body(p: list[sympy.Symbol]) -> Value:
        vb = value_of(b, p, dt)
        if alpha != 1:
            vb = Op("mul", (vb, Constant(alpha, dt)), dt)
        return Op(name, (value_of(a, p, dt), vb), dt)

    return lw.pointwise(body)


@register_by_name("prims::fma")
def fma(lw: LowererLike, node: torch.fx.Node, a: Any, b: Any, c: Any) -> TensorRef:
    """Inductor's prim `fma(a, b, c) = a * b + c` (Dynamo's form of `addcmul_(t1, t2, value=v)`):
    computed in registers, rounded once to the node's dtype."""
    dt = out_dtype(lw)
    return lw.pointwise(lambda p: Op("add", (Op("mul", (value_of(a, p, dt), value_of(b, p, dt)), dt),
                                             value_of(c, p, dt)), dt))


@register(aten.rsub)
def rsub(lw: LowererLike, node: torch.fx.Node, a: Any, b: Any, alpha: Any = 1) -> TensorRef:
    dt = out_dtype(lw)

    def body(p: list[sympy.Symbol]) -> Value:
        va = value_of(a, p, dt)
        if alpha != 1:
            va = Op("mul", (va, Constant(alpha, dt)), dt)
        return Op("sub", (value_of(b, p, dt), va), dt)

    return lw.pointwise(body)


@register(aten.div, aten.true_divide, prims.div)
def div(lw: LowererLike, node: torch.fx.Node, a: Any, b: Any, rounding_mode: str | None = None) -> TensorRef:
    dt = out_dtype(lw)
    if node.target is prims.div.default and not dt.is_floating_point:
        rounding_mode = "trunc"
    name = {None: "truediv", "trunc": "truncdiv", "floor": "floordiv"}[rounding_mode]
    return lw.pointwise(lambda p: Op(name, (value_of(a, p, dt), value_of(b, p, dt)), dt))


@register(aten.where)
def where(lw: LowererLike, node: torch.fx.Node, cond: Any, a: Any, b: Any) -> TensorRef:
    dt = out_dtype(lw)
    return lw.pointwise(lambda p: Op("where", (value_of(cond, p, torch.bool), value_of(a, p, dt), value_of(b, p, dt)), dt))


@register(aten.clamp)
def clamp(lw: LowererLike, node: torch.fx.Node, x: Any, lo: Any = None, hi: Any = None) -> TensorRef:
    dt = out_dtype(lw)

    def body(p: list[sympy.Symbol]) -> Value:
        v = value_of(x, p, dt)
        if lo is not None:
            v = Op("maximum", (v, value_of(lo, p, dt)), dt)
        if hi is not None:
            v = Op("minimum", (v, value_of(hi, p, dt)), dt)
        return v

    return lw.pointwise(body)


@register(aten._to_copy, aten.clone, aten.copy, prims.convert_element_type, aten.lift_fresh_copy)
def copy_cast(lw: LowererLike, node: torch.fx.Node, x: Any, *args: Any, **kw: Any) -> TensorRef:
    val = lw.out_val()
    src = args[0] if node.target is aten.copy.default else x
    if is_tensor(src) and src.layout.device != val.device:
        raise Unsupported("copy across devices")
    return lw.pointwise(lambda p: value_of(src, p, val.dtype))


@register(aten.scalar_tensor)
def scalar_tensor(lw: LowererLike, node: torch.fx.Node, value: Any, **kw: Any) -> TensorRef:
    return _fill(lw, value)


@register(aten.full)
def full(lw: LowererLike, node: torch.fx.Node, size: Any, value: Any, **kw: Any) -> TensorRef:
    return _fill(lw, value)


@register(prims.iota)
def iota(lw: LowererLike, node: torch.fx.Node, length: Any, *, start: Any = 0, step: Any = 1, **kw: Any) -> TensorRef:
    dt = out_dtype(lw)
    if not all(isinstance(v, int) for v in (start, step)):
        raise Unsupported("symbolic iota")
    return lw.pointwise(lambda p: cast(IndexValue(start + step * p[0], torch.int64), dt))


@register(aten.arange)
def arange(lw: LowererLike, node: torch.fx.Node, *args: Any, **kw: Any) -> TensorRef:
    """start + step * i. Integer start and step: exact index arithmetic; float ones: computed in
    float64 and rounded to the output dtype, as eager's CPU kernel does."""
    start, step = 0, 1
    if node.target is aten.arange.start_step:
        start = args[0]
        step = args[2] if len(args) > 2 else kw.get("step", 1)
    elif node.target is aten.arange.start:
        start = args[0]
    elif node.target is not aten.arange.default:
        raise Unsupported("arange overload")
    if not all(isinstance(v, int | float) for v in (start, step)):
        raise Unsupported("symbolic arange")
    dt = out_dtype(lw)
    if isinstance(start, int) and isinstance(step, int):
        return lw.pointwise(lambda p: cast(IndexValue(start + step * p[0], torch.int64), dt))

    def body(p: list[sympy.Symbol]) -> Value:
        i = cast(IndexValue(p[0], torch.int64), torch.float64)
        v = Op("add", (Constant(float(start), torch.float64),
                       Op("mul", (Constant(float(step), torch.float64), i), torch.float64)), torch.float64)
        return cast(v, dt)

    return lw.pointwise(body)


def _fill(lw: LowererLike, value: Any) -> TensorRef:
    """Every element = `value` (a Python number, or a size expression: a SymInt, SymFloat or
    sympy expression, whose symbols become kernel arguments), in the node's dtype."""
    dt = out_dtype(lw)
    if isinstance(value, torch.SymInt | torch.SymFloat | sympy.Expr) and not isinstance(value, sympy.Number):
        e = as_expr(value)
        if float_valued(e):
            return lw.pointwise(lambda p: cast(IndexValue(e, torch.float64), dt))
        if not e.is_integer:
            raise Unsupported(f"fill value {e} is neither an integer nor a float expression")
        return lw.pointwise(lambda p: cast(IndexValue(e, torch.int64), dt))
    if isinstance(value, sympy.Number):
        value = int(value) if value.is_integer else float(value)
    if not isinstance(value, bool | int | float):
        raise Unsupported("non-constant fill value")
    if isinstance(value, float) and not math.isfinite(value) and not (dt.is_floating_point or dt == torch.bool):
        # an integer tensor of inf or NaN (eager's torch.full raises): torch's decompositions pad
        # an amax over an empty dim with full(-inf) (log_softmax of an empty integer tensor), an
        # identity of max, so +-inf saturate to the dtype's extremes. NaN: 0 where nothing is
        # written (a statically empty tensor), else an ATen fallback that raises as eager
        if math.isinf(value):
            value = torch.iinfo(dt).max if value > 0 else torch.iinfo(dt).min
        elif any(isinstance(s, int) and s == 0 for s in lw.out_val().shape):
            value = 0
        else:
            raise Unsupported(f"fill value {value} cannot be converted to {dt}")
    return lw.pointwise(lambda p: cast(Constant(value, torch.float64 if isinstance(value, float) else torch.int64), dt))


@register(aten.full_like, aten.new_full)
def full_like(lw: LowererLike, node: torch.fx.Node, x: Any, *args: Any, **kw: Any) -> TensorRef:
    value = args[-1] if node.target is aten.new_full.default else args[0]
    return _fill(lw, value)


@register(aten.zeros_like, aten.new_zeros, aten.zeros)
def zeros_like(lw: LowererLike, node: torch.fx.Node, *args: Any, **kw: Any) -> TensorRef:
    return _fill(lw, 0)


@register(aten.ones_like, aten.new_ones, aten.ones)
def ones_like(lw: LowererLike, node: torch.fx.Node, *args: Any, **kw: Any) -> TensorRef:
    return _fill(lw, 1)


@register(aten.empty.memory_format, aten.empty_strided.default, aten.new_empty_strided.default,
          aten.empty_permuted.default, aten.new_empty.default, aten.empty_like.default)
def empty(lw: LowererLike, node: torch.fx.Node, *args: Any, **kw: Any) -> TensorRef:
    """An uninitialised allocation with the FakeTensor's sizes and strides. Any content is
    allowed; coil writes zeros (one cheap kernel, and no stale data can leak through it). A
    buffer nobody reads (an empty only used for its shape) is dropped after lowering."""
    return _fill(lw, 0)
