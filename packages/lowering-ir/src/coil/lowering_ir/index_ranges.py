"""Index arithmetic that knows the ranges of its symbols.

`Ranges` maps symbols (loop variables, data-dependent indices) to inclusive bounds (lo, hi),
sympy expressions; any other symbol (a size) stands for itself. With them:

- `bounds(e)` bounds an index expression (interval arithmetic; None when it cannot);
- `floor_div(e, d)` and `mod(e, d)` split `e` into the terms that are multiples of `d` and the
  rest R; when R provably lies in [k d, (k + 1) d) the result has no floor/mod at all (so
  `floor((50257 a + g) / 50257)` with g in [0, 50257) is `a`), otherwise, when R >= 0 and d is
  a number, `q + floor(R / d)` and `Mod(R, d)`; else None;
- `decompose(i, layout)` recovers the logical position of storage index `i` in a dense,
  non-overlapping layout (dims by stride: p = floor(i / stride) mod size, the outermost without
  the mod; size-1 dims 0);
- `printable(e)` says whether every floor/mod left in `e` has a provably non-negative
  numerator and a numeric divisor: then Python's floor semantics (sympy) and C's truncation
  (`//`, `%` in Triton, as `printing.texpr` writes them) agree.

Only facts that hold for every value in the ranges are used, so a result equals the input
expression wherever the symbols are in their ranges.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping

import sympy
from coil.lowering_ir.layout import Expr, Layout

Bounds = tuple[Expr, Expr]
Ranges = Mapping[sympy.Symbol, Bounds]


def _nonneg(e: Expr) -> bool:
    """e >= 0 provably (sizes are positive integers)."""
    e = sympy.expand(e)
    return bool(e.is_nonnegative) if not e.is_Number else bool(e >= 0)


def le(a: Expr, b: Expr) -> bool:
    """a <= b provably."""
    return _nonneg(b - a)


def _positive(e: Expr) -> bool:
    e = sympy.expand(e)
    return bool(e.is_positive) if not e.is_Number else bool(e > 0)


def bounds(e: Expr, ranges: Ranges) -> Bounds | None:
    """Inclusive bounds of `e` over `ranges`, or None. Symbols not in `ranges` are sizes
    (constants); a symbol named like a loop variable or a data-dependent index but missing
    from `ranges` has no bounds."""
    if e.is_Number:
        return (e, e)
    if isinstance(e, sympy.Symbol):
        got = ranges.get(e)
        if got is not None:
            return got
        if (e.name[:1] in ("p", "r") and e.name[1:].isdigit()) or e.name.startswith("ind"):
            return None
        return (e, e)
    if isinstance(e, sympy.Add):
        lo: Expr = sympy.Integer(0)
        hi: Expr = sympy.Integer(0)
        for a in e.args:
            b = bounds(a, ranges)
            if b is None:
                return None
            lo, hi = lo + b[0], hi + b[1]
        return (lo, hi)
    if isinstance(e, sympy.Mul):
        coeff, rest = e.as_coeff_Mul()
        if coeff != 1:
            b = bounds(rest, ranges)
            if b is None:
                return None
            return (coeff * b[0], coeff * b[1]) if coeff > 0 else (coeff * b[1], coeff * b[0])
        parts = [bounds(a, ranges) for a in e.args]
        if any(p is None or not _nonneg(p[0]) for p in parts):
            return None
        return (sympy.Mul(*[p[0] for p in parts if p]), sympy.Mul(*[p[1] for p in parts if p]))
    if isinstance(e, sympy.floor):
        num, den = sympy.fraction(sympy.together(e.args[0]))
        b = bounds(sympy.expand(num), ranges)
        if b is None or not _positive(den):
            return None
        return (sympy.floor(b[0] / den), sympy.floor(b[1] / den))
    if isinstance(e, sympy.Mod):
        a, d = e.args
        b = bounds(a, ranges)
        if not _positive(d):
            return None
        if b is not None and _nonneg(b[0]) and _positive(d - b[1]):
            return b
        return (sympy.Integer(0), d - 1)
    return None


def _divided(t: Expr, d: Expr) -> Expr | None:
    """t / d when that is a product with an integer coefficient (t's coefficient a multiple of
    d's, d's other factors among t's with no larger exponents), else None. No polynomial
    arithmetic: this runs for every term of every decomposed index."""
    tc, trest = t.as_coeff_Mul()
    dc, drest = d.as_coeff_Mul()
    if not (tc.is_Integer and dc.is_Integer) or int(tc) % int(dc) != 0:
        return None
    tp = trest.as_powers_dict()
    for base, exp in drest.as_powers_dict().items():
        if base == 1:
            continue
        have = sympy.sympify(tp.get(base, 0))
        if not (exp.is_Integer and have.is_Integer and 0 < exp <= have):
            return None
        tp[base] = have - exp
    return sympy.Integer(int(tc) // int(dc)) * sympy.Mul(*[b**e for b, e in tp.items() if e != 0 and b != 1])


def _split(e: Expr, d: Expr) -> tuple[Expr, Expr]:
    """(q, r) with e = q d + r, q holding the terms of `e` that are multiples of `d`."""
    q: list[Expr] = []
    r: list[Expr] = []
    for t in sympy.Add.make_args(sympy.expand(e)):
        got = _divided(t, d)
        if got is None:
            r.append(t)
        else:
            q.append(got)
    return sympy.Add(*q), sympy.Add(*r)


def _quotient(lo: Expr, hi: Expr, d: Expr) -> Expr | None:
    """The integer k with k d <= lo and hi < (k + 1) d, when provable."""
    k = sympy.floor(lo / d)
    if not k.is_Integer:
        k = sympy.Integer(0)
    if _nonneg(lo - k * d) and _positive((k + 1) * d - hi):
        return k
    return None


def floor_div(e: Expr, d: Expr, ranges: Ranges) -> Expr | None:
    """floor(e / d) for a positive divisor `d`, simplified over `ranges`, or None (see the
    module docstring)."""
    if d == 1:
        return sympy.expand(e)
    if not _positive(d):
        return None
    q, r = _split(e, d)
    if r == 0:
        return q
    b = bounds(r, ranges)
    if b is None:
        return None
    k = _quotient(b[0], b[1], d)
    if k is not None:
        return sympy.expand(q + k)
    if d.is_Integer and _nonneg(b[0]):
        return q + sympy.floor(r / d)
    return None


def mod(e: Expr, d: Expr, ranges: Ranges) -> Expr | None:
    """e mod d (Python semantics) for a positive divisor `d`, simplified over `ranges`, or None."""
    if d == 1:
        return sympy.Integer(0)
    if not _positive(d):
        return None
    _, r = _split(e, d)
    b = bounds(r, ranges)
    if b is None:
        return None
    k = _quotient(b[0], b[1], d)
    if k is not None:
        return sympy.expand(r - k * d)
    if d.is_Integer and _nonneg(b[0]):
        return sympy.Mod(r, d)
    return None


def dense_order(layout: Layout) -> list[int] | None:
    """The dims of size > 1 from the innermost (stride 1) outwards, when the layout is dense and
    non-overlapping (each stride the product of the inner sizes); else None. Empty layouts: None."""
    dims = [d for d, n in enumerate(layout.size) if n != 1]
    if any(n == 0 for n in layout.size):
        return None
    order: list[int] = []
    cur: Expr = sympy.Integer(1)
    while dims:
        match = [d for d in dims if sympy.expand(layout.stride[d] - cur) == 0]
        if len(match) != 1:
            return None
        order.append(match[0])
        dims.remove(match[0])
        cur = cur * layout.size[match[0]]
    return order


def decompose(index: Expr, layout: Layout, ranges: Ranges) -> list[Expr] | None:
    """The logical position (one expression per dim) of the element at storage index `index`
    of a dense layout, simplified over `ranges`; None when the layout is not dense or an
    expression cannot be written without a floor or mod that `printable` would reject.
    Memoised by value (every layer of a model asks the same)."""
    got = _decompose(index, layout, tuple(ranges.items()))
    return None if got is None else list(got)


@functools.lru_cache(maxsize=1 << 14)
def _decompose(index: Expr, layout: Layout, ranges_items: tuple[tuple[sympy.Symbol, Bounds], ...]
               ) -> tuple[Expr, ...] | None:
    ranges = dict(ranges_items)
    order = dense_order(layout)
    if order is None:
        return None
    flat = sympy.expand(index - layout.offset)
    coords: list[Expr] = [sympy.Integer(0)] * len(layout.size)
    for j, d in enumerate(order):
        q = floor_div(flat, layout.stride[d], ranges)
        if q is not None and j < len(order) - 1:
            q = mod(q, layout.size[d], ranges)
        if q is None:
            return None
        coords[d] = q
    return tuple(coords)


def printable(e: Expr, ranges: Ranges) -> bool:
    """Every floor and mod in `e` has a numeric divisor and a numerator >= 0 over `ranges`, and
    `e` holds no other integer function (see the module docstring)."""
    for node in sympy.preorder_traversal(e):
        if isinstance(node, sympy.floor):
            num, den = sympy.fraction(sympy.together(node.args[0]))
            b = bounds(sympy.expand(num), ranges)
            if not den.is_Integer or b is None or not _nonneg(b[0]):
                return False
        elif isinstance(node, sympy.Mod):
            b = bounds(node.args[0], ranges)
            if not node.args[1].is_Integer or b is None or not _nonneg(b[0]):
                return False
        elif isinstance(node, sympy.Function):
            return False
    return True
