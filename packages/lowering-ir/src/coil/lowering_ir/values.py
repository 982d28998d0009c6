"""The value language of loop bodies: a small expression DAG over loads and constants.

A Pointwise or Reduction node computes, for each point of its iteration space, one `Value`.
Index symbols inside `Load.index` and `IndexValue.index` are the node's own loop variables
(`p0, p1, ...` for the iteration ranges, `r0, r1, ...` for reduction ranges).
`OPS` lists every operator name codegen must implement; `Op.__post_init__` rejects others.
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy
import torch

# operator name -> arity (None: variadic)
OPS: dict[str, int] = {
    # arithmetic
    "add": 2, "sub": 2, "mul": 2, "truediv": 2, "floordiv": 2, "truncdiv": 2, "remainder": 2,
    "fmod": 2, "neg": 1, "abs": 1, "pow": 2, "maximum": 2, "minimum": 2, "reciprocal": 1,
    "sign": 1,
    # division rounded to nearest as IEEE-754 defines it, for floats; "truediv" may be approximate
    # (Triton compiles a float32 `/` to CUDA's div.full.f32: up to 2 ulp off eager's quotient)
    "div_rn": 2,
    # transcendental
    "exp": 1, "exp2": 1, "expm1": 1, "log": 1, "log2": 1, "log10": 1, "log1p": 1, "sqrt": 1,
    "rsqrt": 1, "sin": 1, "cos": 1, "tan": 1, "tanh": 1, "sigmoid": 1, "erf": 1, "erfc": 1,
    "asin": 1, "acos": 1, "atan": 1, "sinh": 1, "cosh": 1, "asinh": 1, "acosh": 1, "atanh": 1,
    "atan2": 2, "floor": 1, "ceil": 1, "round": 1, "trunc": 1, "frac": 1,
    # comparison and logic (result bool)
    "eq": 2, "ne": 2, "lt": 2, "le": 2, "gt": 2, "ge": 2, "isnan": 1, "isinf": 1,
    "logical_not": 1, "logical_and": 2, "logical_or": 2, "logical_xor": 2,
    # the sign bit of a number (result bool): set for negative numbers, -0.0 and negative NaNs
    "signbit": 1,
    # bitwise
    "bitwise_and": 2, "bitwise_or": 2, "bitwise_xor": 2, "bitwise_not": 1,
    "lshift": 2, "rshift": 2,
    # selection and conversion
    "where": 3, "cast": 1,
    # counter-based random numbers: (seed, offset) -> uniform [0, 1) / standard normal, float32
    "rand": 2, "randn": 2,
}


@dataclass(frozen=True)
class Load:
    """Element `index` of buffer `buffer` (storage index in elements).

    `mask`: a bool Value; where false nothing is read and the value is 0. `indirect` binds
    symbols that appear in `index` to integer Values computed first (gather, index_select,
    embedding): their values are data, not loop variables, so no analysis treats them as loops.
    """

    buffer: str
    index: sympy.Expr
    dtype: torch.dtype
    mask: Value | None = None
    indirect: tuple[tuple[sympy.Symbol, Value], ...] = ()


@dataclass(frozen=True)
class Constant:
    """A scalar constant of `dtype`."""

    value: float | int | bool
    dtype: torch.dtype


@dataclass(frozen=True)
class IndexValue:
    """An index expression used as a value (iota, masks from positions)."""

    index: sympy.Expr
    dtype: torch.dtype


@dataclass(frozen=True)
class Op:
    """`name(*args)` producing a value of `dtype`. For "cast", dtype is the target."""

    name: str
    args: tuple[Value, ...]
    dtype: torch.dtype

    def __post_init__(self) -> None:
        arity = OPS.get(self.name, -1)
        if arity == -1:
            raise ValueError(f"unknown value op {self.name!r}")
        if arity is not None and arity != len(self.args):
            raise ValueError(f"op {self.name!r} takes {arity} args, got {len(self.args)}")


Value = Load | Constant | IndexValue | Op


def loads(value: Value) -> list[Load]:
    """Every Load inside `value`, each once, in first-visit order."""
    seen: dict[int, Load] = {}
    stack: list[Value] = [value]
    visited: set[int] = set()
    while stack:
        v = stack.pop()
        if id(v) in visited:
            continue
        visited.add(id(v))
        if isinstance(v, Load):
            seen.setdefault(id(v), v)
            stack.extend(children(v))
        elif isinstance(v, Op):
            stack.extend(reversed(v.args))
    return list(seen.values())


def children(v: Value) -> list[Value]:
    """The Values `v` depends on directly (op arguments; a load's mask and indirect indices)."""
    if isinstance(v, Op):
        return list(v.args)
    if isinstance(v, Load):
        out = [val for _, val in v.indirect]
        if v.mask is not None:
            out.append(v.mask)
        return out
    return []


_indirect_count = [0]
_indirect_bounds: dict[sympy.Symbol, sympy.Expr] = {}


def indirect_symbol(bound: sympy.Expr | None = None) -> sympy.Symbol:
    """A fresh symbol for a data-dependent index (named ind<N>, unique in the process).

    `bound`: the op's contract puts the value in [0, bound) (gather, index_select, embedding:
    an index out of range is an error in eager PyTorch and undefined in coil), so index
    arithmetic may rely on it (`indirect_bound`)."""
    _indirect_count[0] += 1
    sym = sympy.Symbol(f"ind{_indirect_count[0]}", integer=True)
    if bound is not None:
        _indirect_bounds[sym] = bound
    return sym


def indirect_bound(sym: sympy.Symbol) -> sympy.Expr | None:
    """The bound `indirect_symbol(bound)` recorded for `sym` (values lie in [0, bound)), if any."""
    return _indirect_bounds.get(sym)


def map_indices(value: Value, fn: object) -> Value:
    """Rebuild `value` with every index expression e replaced by fn(e) (fn: Expr -> Expr)."""
    memo: dict[int, Value] = {}
    f = fn  # typed loosely to accept lambdas over sympy

    def go(v: Value) -> Value:
        got = memo.get(id(v))
        if got is not None:
            return got
        out: Value
        if isinstance(v, Load):
            out = Load(
                v.buffer, f(v.index), v.dtype,  # type: ignore[operator]
                go(v.mask) if v.mask is not None else None,
                tuple((s, go(val)) for s, val in v.indirect),
            )
        elif isinstance(v, IndexValue):
            out = IndexValue(f(v.index), v.dtype)  # type: ignore[operator]
        elif isinstance(v, Op):
            out = Op(v.name, tuple(go(a) for a in v.args), v.dtype)
        else:
            out = v
        memo[id(v)] = out
        return out

    return go(value)
