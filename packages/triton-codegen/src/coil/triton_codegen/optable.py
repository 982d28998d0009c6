"""Triton source for each value op (coil.lowering_ir.OPS), per target.

Targets: "cuda" (libdevice for what triton.language lacks) and "interpret" (Triton's CPU
interpreter, which has no libdevice: those ops are written with core functions). Floating-point
values of half types live in float32 registers; every template receives already-computed
argument expressions in the compute type.
"""

from __future__ import annotations

import torch

TL_DTYPE: dict[torch.dtype, str] = {
    torch.float32: "tl.float32", torch.float16: "tl.float16", torch.bfloat16: "tl.bfloat16",
    torch.float64: "tl.float64", torch.int8: "tl.int8", torch.int16: "tl.int16",
    torch.int32: "tl.int32", torch.int64: "tl.int64", torch.uint8: "tl.uint8", torch.bool: "tl.int1",
}


def tl_dtype(dtype: torch.dtype) -> str:
    try:
        return TL_DTYPE[dtype]
    except KeyError:
        raise NotImplementedError(f"dtype {dtype} has no Triton equivalent") from None


def register_dtype(dtype: torch.dtype) -> torch.dtype:
    """The type a value of `dtype` has in registers."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


COMMON: dict[str, str] = {
    "add": "({0} + {1})", "sub": "({0} - {1})", "mul": "({0} * {1})", "neg": "(-{0})",
    "truediv": "({0} / {1})", "div_rn": "tl.math.div_rn({0}, {1})", "abs": "tl.abs({0})", "maximum": "tl.maximum({0}, {1})",
    "minimum": "tl.minimum({0}, {1})", "reciprocal": "(1.0 / {0})", "exp": "tl.exp({0})",
    "exp2": "tl.exp2({0})", "log": "tl.log({0})", "log2": "tl.log2({0})", "sqrt": "tl.sqrt({0})",
    "rsqrt": "tl.rsqrt({0})", "sin": "tl.sin({0})", "cos": "tl.cos({0})", "erf": "tl.erf({0})",
    "sigmoid": "tl.sigmoid({0})", "floor": "tl.floor({0})", "ceil": "tl.ceil({0})",
    "eq": "({0} == {1})", "ne": "({0} != {1})", "lt": "({0} < {1})", "le": "({0} <= {1})",
    "gt": "({0} > {1})", "ge": "({0} >= {1})", "isnan": "({0} != {0})",
    "isinf": "(tl.abs({0}) == float('inf'))",
    "logical_not": "({0} == 0)", "logical_and": "(({0} != 0) & ({1} != 0))",
    "logical_or": "(({0} != 0) | ({1} != 0))", "logical_xor": "(({0} != 0) ^ ({1} != 0))",
    "bitwise_and": "({0} & {1})", "bitwise_or": "({0} | {1})", "bitwise_xor": "({0} ^ {1})",
    "bitwise_not": "(~{0})", "lshift": "({0} << {1})", "rshift": "({0} >> {1})",
    "where": "tl.where({0}, {1}, {2})",
    "rand": "tl.rand({0}, {1})", "randn": "tl.randn({0}, {1})", "log10": "(tl.log({0}) * 0.4342944819032518)",
    "log1p": "tl.log(1.0 + {0})", "expm1": "(tl.exp({0}) - 1.0)", "trunc": "tl.where({0} < 0, tl.ceil({0}), tl.floor({0}))",
    "frac": "({0} - tl.where({0} < 0, tl.ceil({0}), tl.floor({0})))",
    "sign": "(({0} > 0).to({T}) - ({0} < 0).to({T}))",
    "erfc": "(1.0 - tl.erf({0}))",
}
CUDA: dict[str, str] = {
    "tanh": "libdevice.tanh({0})", "tan": "libdevice.tan({0})", "asin": "libdevice.asin({0})",
    "acos": "libdevice.acos({0})", "atan": "libdevice.atan({0})", "sinh": "libdevice.sinh({0})",
    "cosh": "libdevice.cosh({0})", "asinh": "libdevice.asinh({0})", "acosh": "libdevice.acosh({0})",
    "atanh": "libdevice.atanh({0})", "atan2": "libdevice.atan2({0}, {1})", "pow": "libdevice.pow({0}, {1})",
    "log1p": "libdevice.log1p({0})", "expm1": "libdevice.expm1({0})", "round": "libdevice.nearbyint({0})",
    "fmod": "libdevice.fmod({0}, {1})", "erfc": "libdevice.erfc({0})",
}
INTERPRET: dict[str, str] = {
    "atan": "_coil_atan({0})",
    "asin": "_coil_atan({0} / tl.sqrt(1.0 - {0} * {0}))",
    "acos": "(1.5707963267948966 - _coil_atan({0} / tl.sqrt(1.0 - {0} * {0})))",
    "atan2": "_coil_atan2({0}, {1})",
    "tanh": "(1.0 - 2.0 / (tl.exp(2.0 * {0}) + 1.0))",
    "tan": "(tl.sin({0}) / tl.cos({0}))",
    "sinh": "((tl.exp({0}) - tl.exp(-{0})) * 0.5)", "cosh": "((tl.exp({0}) + tl.exp(-{0})) * 0.5)",
    "asinh": "tl.log({0} + tl.sqrt({0} * {0} + 1.0))", "acosh": "tl.log({0} + tl.sqrt({0} * {0} - 1.0))",
    "atanh": "(0.5 * tl.log((1.0 + {0}) / (1.0 - {0})))",
    "pow": "tl.where({0} == 0, tl.where({1} == 0, 1.0, tl.where({1} < 0, float('inf'), 0.0)), "
           "tl.where(({0} < 0) & (tl.floor({1}) != {1}), float('nan'), "
           "tl.exp({1} * tl.log(tl.abs({0}))) * tl.where(({0} < 0) & (({1} - 2.0 * tl.floor({1} * 0.5)) == 1.0), -1.0, 1.0)))",
    # half to even; a zero result takes the sign of the input (-0.3 rounds to -0.0, as nearbyint)
    "round": "tl.where(tl.abs({0}) <= 0.5, {0} * 0.0, (tl.floor({0} + 0.5) - ((({0} + 0.5) == tl.floor({0} + 0.5)) & ((tl.floor({0} + 0.5) % 2.0) != 0)).to({T})))",
    "fmod": "({0} - {1} * tl.where({0} / {1} < 0, tl.ceil({0} / {1}), tl.floor({0} / {1})))",
}
INT: dict[str, str] = {
    "truediv": "({0} / {1})",
    "floordiv": "(({0} // {1}) - ((({0} % {1}) != 0) & (({0} < 0) != ({1} < 0))).to({T}))",
    "truncdiv": "({0} // {1})",
    "remainder": "({0} % {1} + tl.where((({0} % {1}) != 0) & (({0} % {1} < 0) != ({1} < 0)), {1}, 0))",
    "fmod": "({0} % {1})",
    "abs": "tl.where({0} < 0, -{0}, {0})",
    "signbit": "({0} < 0)",
}
FLOAT: dict[str, str] = {
    # a product, not Triton's unary minus: before Triton 3.9 that is `0 - x`, which makes -(0.0)
    # +0.0 where eager gives -0.0 (x * -1.0 is exact, and LLVM turns it into a negation; the sign
    # of a negated NaN is the hardware's)
    "neg": "({0} * -1.0)",
    # NaN propagates, as in eager (tl.maximum/minimum alone return the other operand)
    "maximum": "tl.where(({0} != {0}) | ({1} != {1}), {0} + {1}, tl.maximum({0}, {1}))",
    "minimum": "tl.where(({0} != {0}) | ({1} != {1}), {0} + {1}, tl.minimum({0}, {1}))",
    "floordiv": "tl.floor({0} / {1})",
    "truncdiv": "tl.where({0} / {1} < 0, tl.ceil({0} / {1}), tl.floor({0} / {1}))",
    "remainder": "({0} - {1} * tl.floor({0} / {1}))",
    # the bits read as a signed integer of the register's width ({I}): negative exactly when the
    # sign bit is set, -0.0 and NaNs included (a comparison sees neither: -0.0 == 0, NaN < 0 is
    # false)
    "signbit": "({0}.to({I}, bitcast=True) < 0)",
}


# float64 overrides: Triton's `/` is correctly rounded for float64 (div.rn.f64 on CUDA), and its
# tl.math.div_rn takes float32 only
FLOAT64: dict[str, str] = {"div_rn": "({0} / {1})"}


def same_width_int(dtype: torch.dtype) -> str:
    """The signed Triton integer type as wide as a register of `dtype` (`{I}` in templates)."""
    return {torch.float64: "tl.int64", torch.float32: "tl.int32"}.get(register_dtype(dtype), tl_dtype(dtype))


def template(name: str, dtype: torch.dtype, target: str) -> str:
    """The format string for op `name` computing in `dtype` on `target`: `{0}`, `{1}`, ... are the
    arguments, `{T}` the Triton type of `dtype` and `{I}` the signed integer type of its width."""
    is_int = not dtype.is_floating_point
    if is_int and name in INT:
        return INT[name]
    if dtype == torch.float64 and name in FLOAT64:
        return FLOAT64[name]
    if not is_int and name in FLOAT:
        return FLOAT[name]
    if target == "cuda" and name in CUDA:
        return CUDA[name]
    if target != "cuda" and name in INTERPRET:
        return INTERPRET[name]
    if name in COMMON:
        return COMMON[name]
    raise NotImplementedError(f"no Triton template for op {name!r} in {dtype} on {target}")
