"""Loop orders that make pointwise members follow the order a reduction of their group visits memory.

A reduction's kernel runs its x loops (outer, in the reduction's own order) and then its r loops
(inner, logical order). A pointwise member of the same group must run its loops in that order
too, or its elements do not line up with the reduction's (`group.plan` refuses the fusion). The
default orders agree when the reduced dim is the innermost one (softmax over the last dim), but
not over an outer dim: `x.softmax(0)` writes exp(x - max) in its own memory order (rows outer,
columns inner) while the sum over dim 0 visits it columns outer, rows inner, so the exp stayed a
kernel of its own, written out and read back, and so did the division after it.

`visit_orders(members, base)` gives each pointwise member that accesses a buffer some reduction
member reads (its own output first, then its loads) an index expression over its loops
(a `LoopOrder`) whose strides rank the loops as that reduction visits the buffer: each loop is
matched to the reduction loop holding its stride in the buffer (the one with the largest stride
that divides it and is at most it), and loops are ranked by that reduction loop's position in the
reduction's nest, then by their own stride. None when nothing changes or a stride is not an
integer (symbolic sizes) or a loop finds no reduction loop.
"""

from __future__ import annotations

from collections.abc import Sequence

import sympy
from coil.lowering_ir import Expr, Pointwise, Reduction, loads
from coil.scheduler.canonical import LoopOrder, linear_coeff, loop_permutation, syms

# A reduction's body indexes its x loops with p0.. and its r loops with r0.. (lowering-ir).
_Visit = tuple[list[sympy.Symbol], Expr]  # the reduction's loop symbols outermost first, its index


def _visits(reductions: Sequence[Reduction], base: dict[int, LoopOrder]) -> dict[str, _Visit]:
    """Per buffer a reduction member reads: its loop symbols in nest order and its read index."""
    out: dict[str, _Visit] = {}
    for r in reductions:
        ps = syms("p", len(r.ranges))
        rs = [sympy.Symbol(f"r{j}", integer=True, nonnegative=True) for j in range(len(r.reduction_ranges))]
        nest = [ps[i] for i in loop_permutation(r, base.get(id(r), "store"))] + rs
        for ld in loads(r.body):
            out.setdefault(ld.buffer, (nest, sympy.expand(ld.index)))
    return out


def _coeff(e: Expr, v: sympy.Symbol) -> int | None:
    """The integer coefficient of `v` in the affine `e` (0 if absent), else None."""
    c = linear_coeff(e, v)
    return int(c) if isinstance(c, sympy.Integer) else None


def _following(op: Pointwise, index: Expr, visit: _Visit) -> Expr | None:
    """An index expression over `op`'s loops (p0..) ranking them as `visit` reaches `index`."""
    nest, read = visit
    strides: list[tuple[int, int]] = []  # (stride in the buffer, position in the reduction's nest)
    for k, v in enumerate(nest):
        c = _coeff(read, v)
        if c is None:
            return None
        if c > 0:
            strides.append((c, k))
    keys: list[tuple[int, int, int]] = []  # (reduction loop position, -own stride, loop)
    ex = sympy.expand(index)
    for i, (size, p) in enumerate(zip(op.ranges, syms("p", len(op.ranges)), strict=True)):
        if size == 1:
            continue
        c = _coeff(ex, p)
        if c is None or c <= 0:
            return None
        held = [(s, k) for s, k in strides if s <= c and c % s == 0]
        if not held:
            return None
        keys.append((max(held)[1], -c, i))
    keys.sort()
    ps = syms("p", len(op.ranges))
    return sympy.Add(*(ps[i] * (1 << (len(keys) - 1 - n)) for n, (_, _, i) in enumerate(keys)))


def visit_orders(members: Sequence[Pointwise | Reduction], base: dict[int, LoopOrder]
                 ) -> dict[int, LoopOrder] | None:
    """`base` with each pointwise member that accesses a buffer read by a reduction member
    ordered as that reduction visits it, and then, in turn, each pointwise member that
    accesses a buffer an ordered member accesses (a chain such as x - max, then exp, then the
    sum) ordered as that member visits it (module docstring); None when no member changes."""
    visits = _visits([m for m in members if isinstance(m, Reduction)], base)
    if not visits:
        return None
    out = dict(base)
    changed = False
    todo = [m for m in members if isinstance(m, Pointwise)]
    progress = True
    while todo and progress:
        progress = False
        for m in list(todo):
            accesses = [(m.output.name, m.store_index), *((ld.buffer, ld.index) for ld in loads(m.body))]
            for buffer, index in accesses:
                visit = visits.get(buffer)
                order = None if visit is None else _following(m, index, visit)
                if order is None:
                    continue
                perm = loop_permutation(m, order)
                if perm != loop_permutation(m, base.get(id(m), "store")):
                    out[id(m)] = order
                    changed = True
                ps = syms("p", len(m.ranges))
                nest = [ps[i] for i in perm]
                for b, i in accesses:
                    visits.setdefault(b, (nest, sympy.expand(i)))
                todo.remove(m)
                progress = True
                break
    return out if changed else None
