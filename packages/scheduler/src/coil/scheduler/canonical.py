"""Canonical loop nests: drop size-1 loops and merge loops that index memory as one.

`canonicalize(op)` rewrites a Pointwise/Reduction over fresh symbols so that two nodes computing
the same elements in the same order get the same loop structure (e.g. a [B, S, H] contiguous
pointwise and a [B*S, H] one both become one loop of B*S*H).

`canonicalize` is memoised per operation object (fusion asks for the same op's nest at every
attempt that involves it): operations are not mutated after lowering, and the cache holds them
weakly, so it lives as long as the lowered graph.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Sequence
from dataclasses import dataclass

import sympy
from coil.lowering_ir import Expr, Pointwise, Reduction, Value, loads, map_indices
from coil.lowering_ir.values import IndexValue, Load, children


@dataclass(frozen=True)
class LoopNest:
    """A node's body over canonical loops: `x` symbols index `x_sizes`, `r` ones `r_sizes`."""

    x_sizes: tuple[Expr, ...]
    r_sizes: tuple[Expr, ...]
    x_syms: tuple[sympy.Symbol, ...]
    r_syms: tuple[sympy.Symbol, ...]
    body: Value
    store_index: Expr

    @functools.cached_property
    def body_loads(self) -> tuple[Load, ...]:
        """The loads of `body` (as `lowering_ir.loads`), computed once per nest."""
        return tuple(loads(self.body))

    @property
    def x_numel(self) -> Expr:
        return sympy.Mul(*self.x_sizes) if self.x_sizes else sympy.Integer(1)

    @property
    def r_numel(self) -> Expr:
        return sympy.Mul(*self.r_sizes) if self.r_sizes else sympy.Integer(1)


def syms(prefix: str, n: int) -> tuple[sympy.Symbol, ...]:
    return tuple(sympy.Symbol(f"{prefix}{i}", integer=True, nonnegative=True) for i in range(n))


def index_exprs(body: Value) -> list[Expr]:
    """Every index expression in a body (loads and index values)."""
    out: list[Expr] = []
    stack: list[Value] = [body]
    seen: set[int] = set()
    while stack:
        v = stack.pop()
        if id(v) in seen:
            continue
        seen.add(id(v))
        if isinstance(v, Load | IndexValue):
            out.append(v.index)
        stack.extend(children(v))
    return out


def _linear_coeff(e: Expr, v: sympy.Symbol) -> Expr | None:
    """Coefficient of `v` if `e` (expanded) is affine in `v` with no other occurrence, else None.

    Reads the terms of the sum directly: each term holding `v` must be `v` or a product with one
    factor `v` and no other factor holding `v` (what `expand(e).coeff(v, 1)` and a check that
    nothing else holds `v` computed before, without re-expanding)."""
    if not e.has(v):
        return sympy.Integer(0)
    coeffs: list[Expr] = []
    for t in e.args if e.is_Add else (e,):
        if not t.has(v):
            continue
        if t == v:
            coeffs.append(sympy.Integer(1))
            continue
        if t.is_Mul:
            rest = [f for f in t.args if f != v]
            if len(rest) == len(t.args) - 1 and not any(f.has(v) for f in rest):
                coeffs.append(sympy.Mul(*rest))
                continue
        return None
    return sympy.Add(*coeffs)


def simplify_loops(sizes: Sequence[Expr], syms_in: Sequence[sympy.Symbol], exprs: Sequence[Expr]
                   ) -> tuple[list[Expr], dict[sympy.Symbol, Expr], list[sympy.Symbol]]:
    """Drop size-1 loops and merge adjacent loops where every expression allows it.

    Returns (new sizes, substitution old symbol -> expression of kept symbols, kept symbols).
    Loop j-1 and j merge when each expression is affine in both with coeff(j-1) = coeff(j) *
    size(j): then v_{j-1}*a + v_j*b == q*b for the merged variable q.
    """
    sizes = list(sizes)
    vars_ = list(syms_in)
    subst: dict[sympy.Symbol, Expr] = {}
    keep_s: list[Expr] = []
    keep_v: list[sympy.Symbol] = []
    for s, v in zip(sizes, vars_, strict=True):
        if s == 1:
            subst[v] = sympy.Integer(0)
        else:
            keep_s.append(s)
            keep_v.append(v)
    cur = [sympy.expand(e.xreplace(subst)) for e in exprs]
    j = len(keep_v) - 1
    while j >= 1:
        a, b = keep_v[j - 1], keep_v[j]
        ok = True
        for e in cur:
            ca, cb = _linear_coeff(e, a), _linear_coeff(e, b)
            if ca is None or cb is None or (ca != cb * keep_s[j] and sympy.expand(ca - cb * keep_s[j]) != 0):
                ok = False
                break
        if ok:
            # merged loop keeps symbol b; a's contribution folds into b
            cur = [sympy.expand(e.xreplace({a: sympy.Integer(0)})) for e in cur]
            subst[a] = sympy.Integer(0)  # placeholder: a no longer exists on its own
            merged = keep_s[j - 1] * keep_s[j]
            keep_s[j - 1 : j + 1] = [merged]
            keep_v[j - 1 : j + 1] = [b]
        j -= 1
    return keep_s, subst, keep_v


_NESTS: weakref.WeakKeyDictionary[Pointwise | Reduction, LoopNest] = weakref.WeakKeyDictionary()


def canonicalize(op: Pointwise | Reduction) -> LoopNest:
    """The canonical loop nest of one operation (see module docstring); memoised per `op`."""
    nest = _NESTS.get(op)
    if nest is None:
        nest = _NESTS[op] = _canonicalize(op)
    return nest


def _canonicalize(op: Pointwise | Reduction) -> LoopNest:
    if isinstance(op, Reduction):
        p_in = [sympy.Symbol(f"p{i}", integer=True, nonnegative=True) for i in range(len(op.ranges))]
        r_in = [sympy.Symbol(f"r{i}", integer=True, nonnegative=True) for i in range(len(op.reduction_ranges))]
        exprs = [*index_exprs(op.body), op.store_index]
        xs, xsub, xv = simplify_loops(op.ranges, p_in, exprs)
        exprs = [sympy.expand(e.xreplace(xsub)) for e in exprs]
        rs, rsub, rv = simplify_loops(op.reduction_ranges, r_in, exprs)
        sub = {**xsub, **rsub}
        return _rename(op.body, op.store_index, sub, xs, xv, rs, rv)
    p_in = [sympy.Symbol(f"p{i}", integer=True, nonnegative=True) for i in range(len(op.ranges))]
    exprs = [*index_exprs(op.body), op.store_index]
    xs, xsub, xv = simplify_loops(op.ranges, p_in, exprs)
    return _rename(op.body, op.store_index, xsub, xs, xv, [], [])


def _rename(body: Value, store: Expr, sub: dict[sympy.Symbol, Expr], xs: list[Expr], xv: list[sympy.Symbol],
            rs: list[Expr], rv: list[sympy.Symbol]) -> LoopNest:
    xn, rn = syms("p", len(xs)), syms("r", len(rs))
    tmp = {v: sympy.Symbol(f"_t{v.name}", integer=True, nonnegative=True) for v in (*xv, *rv)}
    final = {tmp[v]: n for v, n in zip([*xv, *rv], [*xn, *rn], strict=True)}

    def f(e: Expr) -> Expr:
        return sympy.expand(sympy.expand(e.xreplace(sub)).xreplace(tmp).xreplace(final))

    return LoopNest(tuple(xs), tuple(rs), xn, rn, map_indices(body, f), f(store))
