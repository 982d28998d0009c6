"""Window geometry and index helpers shared by the pooling lowerings (pooling.py: max,
avg_pooling.py: average).

A pooling output position o (along one axis) covers input positions `o*s - pad + j*d` for
j < k. Forward lowerings unroll j (`axis`: each position and the condition that it is in
bounds); backward lowerings gather, asking for each input position i and window position j
which output holds i there (`candidate`). Conditions are bool Values, None meaning "always
true", so statically true tests (no padding on that side, windows that never reach the edge)
cost nothing. Index arithmetic never divides a negative number (Triton's `//` truncates).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import sympy
import torch
from coil.lowering_ir.errors import Unsupported
from coil.lowering_ir.layout import Expr
from coil.lowering_ir.nodes import TensorRef, load
from coil.lowering_ir.ops.common import is_tensor
from coil.lowering_ir.values import Constant, IndexValue, Load, Op, Value

MAX_WINDOW = 64  # window elements one output unrolls (kH * kW); above this: ATen fallback


def pair(v: Any, default: tuple[int, int] | None, what: str) -> tuple[int, int]:
    """ATen's int[2] argument conventions: an int, [] (the default), [a] (both) or [a, b]."""
    if isinstance(v, int):
        return (v, v)
    vals = list(v)
    if not vals and default is not None:
        return default
    if not all(isinstance(a, int) for a in vals) or len(vals) not in (1, 2):
        raise Unsupported(f"pooling {what} {v!r}")
    return (vals[0], vals[0]) if len(vals) == 1 else (vals[0], vals[1])


@dataclass(frozen=True)
class Pool2d:
    """A 2-d pooling window: kernel (kH, kW), stride, padding, dilation, each (h, w)."""

    kernel: tuple[int, int]
    stride: tuple[int, int]
    padding: tuple[int, int]
    dilation: tuple[int, int]

    @staticmethod
    def of(kernel_size: Any, stride: Any = (), padding: Any = 0, dilation: Any = 1) -> Pool2d:
        """From ATen's arguments (an empty stride means the kernel size)."""
        k = pair(kernel_size, None, "kernel_size")
        return Pool2d(k, pair(stride, k, "stride"), pair(padding, None, "padding"), pair(dilation, None, "dilation"))

    @property
    def window(self) -> int:
        return self.kernel[0] * self.kernel[1]

    def args(self) -> tuple[list[int], list[int], list[int], list[int]]:
        return list(self.kernel), list(self.stride), list(self.padding), list(self.dilation)

    def valid(self) -> bool:
        """Positive kernel, stride and dilation, non-negative padding, at most MAX_WINDOW."""
        return (min(self.kernel + self.stride + self.dilation) >= 1 and min(self.padding) >= 0
                and self.window <= MAX_WINDOW)


def real_dtype(dtype: torch.dtype) -> bool:
    """Floating or integer, not bool or complex: the dtypes pooling lowers."""
    return dtype.is_floating_point or not (dtype.is_complex or dtype == torch.bool)


def checked(x: Any, geo: Pool2d, what: str) -> Pool2d:
    """`geo` when a tensor of rank 3 or 4 of a real dtype pooled with it lowers natively; else
    Unsupported."""
    if not is_tensor(x):
        raise Unsupported(f"{what} of a non-tensor")
    if not (real_dtype(x.layout.dtype) and len(x.layout.size) in (3, 4) and geo.valid()):
        raise Unsupported(f"{what} of {x.layout.dtype}, rank {len(x.layout.size)}, {geo}")
    return geo


# -- bool Values over index expressions ---------------------------------------------------------


def iv(e: Expr) -> Value:
    """An index expression as an int64 Value."""
    return IndexValue(sympy.sympify(e), torch.int64)


def _bound(e: Expr) -> Value:
    """A comparison's right side: a Constant when static (the form mask analyses recognise)."""
    b = sympy.sympify(e)
    return i64(int(b)) if isinstance(b, sympy.Integer) else iv(b)


def ge(e: Expr, bound: Expr) -> Value:
    return Op("ge", (iv(e), _bound(bound)), torch.bool)


def lt(e: Expr, bound: Expr) -> Value:
    return Op("lt", (iv(e), _bound(bound)), torch.bool)


def and_(a: Value | None, b: Value | None) -> Value | None:
    """a and b, where None stands for "always true"."""
    if a is None or b is None:
        return a if b is None else b
    return Op("logical_and", (a, b), torch.bool)


def guard(cond: Value | None, v: Value) -> Value:
    """cond and v (v alone when cond is None)."""
    return v if cond is None else Op("logical_and", (cond, v), torch.bool)


def may_reach(largest: Expr, bound: Expr) -> bool:
    """Can a position whose largest value is `largest` reach `bound`? Unknown (symbolic): yes."""
    diff = sympy.sympify(largest - bound)
    return not (isinstance(diff, sympy.Integer) and int(diff) < 0)


def masked(ref: TensorRef, idx: list[Expr], mask: Value | None) -> Value:
    """ref[idx], read only where `mask` (None: always); 0 elsewhere."""
    ld = load(ref, idx)
    return ld if mask is None else Load(ld.buffer, ld.index, ld.dtype, mask)


def i64(v: int) -> Value:
    return Constant(v, torch.int64)


# -- window positions ------------------------------------------------------------------------------


def axis(o: Expr, n_out: Expr, size: Expr, k: int, s: int, pad: int, d: int) -> list[tuple[Expr, Value | None]]:
    """Per window position j < k along one axis: the input position o*s - pad + j*d and the
    condition (None: always) that it lies in [0, size), for outputs o < n_out."""
    out: list[tuple[Expr, Value | None]] = []
    for j in range(k):
        pos = o * s - pad + j * d
        cond: Value | None = ge(pos, 0) if pad > j * d else None
        if may_reach((n_out - 1) * s - pad + j * d, size):
            cond = and_(cond, lt(pos, size))
        out.append((pos, cond))
    return out


def candidate(i: Expr, n_out: Expr, size: Expr, j: int, s: int, pad: int, d: int) -> tuple[Expr, Value | None]:
    """The output position o whose window holds input position i (< size) at window position
    j, o = (i + pad - j*d) / s, and the condition (None: always) that this is an integer in
    [0, n_out). The division is written over a numerator shifted by m*s to be non-negative."""
    shift = max(j * d - pad, 0)
    m = -(-shift // s)
    num = i + pad - j * d + m * s
    o = sympy.floor(num / sympy.Integer(s)) - m if s > 1 else num - m
    cond: Value | None = ge(i, shift) if shift > 0 else None
    if s > 1:
        cond = and_(cond, Op("eq", (iv(sympy.Mod(num, s)), i64(0)), torch.bool))
    largest = (size - 1 + pad - j * d) // s if isinstance(size, sympy.Integer) else size  # o at i = size - 1
    if may_reach(largest, n_out):
        cond = and_(cond, lt(o, n_out))
    return o, cond
