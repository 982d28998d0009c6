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
reduction's nest, then by their own stride. Members that access a buffer an ordered member
accesses follow in turn. A member is left as it is when a stride is not an integer (symbolic
sizes), an access is not affine, or a loop finds no reduction loop.

Fusion asks for these orders at every attempt whose other orders fail, so the strides of each
operation's accesses are computed once per operation (memoised weakly, as canonical.py does).
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Sequence

import sympy
from coil.lowering_ir import Pointwise, Reduction, loads
from coil.scheduler.canonical import LoopOrder, linear_coeff, loop_permutation, syms

# (buffer, the access's stride per loop: x loops p0.. then, for a reduction, r loops r0..; None
# when some stride is not an integer or the access is not affine)
_Access = tuple[str, tuple[int, ...] | None]
_ACCESSES: weakref.WeakKeyDictionary[Pointwise | Reduction, tuple[_Access, ...]] = weakref.WeakKeyDictionary()
# a reduction's or an ordered member's walk over a buffer: (stride, position of its loop in the nest)
_Visit = list[tuple[int, int]]


def _accesses(op: Pointwise | Reduction) -> tuple[_Access, ...]:
    """`op`'s accesses, its store first (a pointwise op), then its loads, with their strides."""
    got = _ACCESSES.get(op)
    if got is None:
        loops = list(syms("p", len(op.ranges)))
        if isinstance(op, Reduction):  # lowering-ir's symbols for a reduction's r loops
            loops += syms("r", len(op.reduction_ranges))
        items = [(op.output.name, op.store_index)] if isinstance(op, Pointwise) else []
        items += [(ld.buffer, ld.index) for ld in loads(op.body)]
        got = _ACCESSES[op] = tuple((b, _strides(sympy.expand(i), loops)) for b, i in items)
    return got


def _strides(index: sympy.Expr, loops: Sequence[sympy.Symbol]) -> tuple[int, ...] | None:
    """`index`'s integer coefficient per loop (0 where unused); None if one is not an integer
    (a symbolic stride) or `index` is not affine in a loop."""
    out: list[int] = []
    for v in loops:
        c = linear_coeff(index, v)
        if not isinstance(c, sympy.Integer):
            return None
        out.append(int(c))
    return tuple(out)


def _walk(strides: tuple[int, ...], nest: Sequence[int]) -> _Visit:
    """The (stride, nest position) of each loop an access moves along; `nest[k]` is the loop at
    position k (outermost first)."""
    return [(strides[loop], k) for k, loop in enumerate(nest) if strides[loop] > 0]


def _ranking(op: Pointwise, strides: tuple[int, ...], visit: _Visit) -> tuple[int, ...] | None:
    """`op`'s loops (of size > 1), outermost first, as `visit` reaches the buffer `op` accesses
    with `strides`; None when a loop has no stride there or no visiting loop holds it."""
    keys: list[tuple[int, int, int]] = []  # (visiting loop position, -own stride, loop)
    for i, size in enumerate(op.ranges):
        if size == 1:
            continue
        c = strides[i]
        held = [(s, k) for s, k in visit if s <= c and c % s == 0] if c > 0 else []
        if not held:
            return None
        keys.append((max(held)[1], -c, i))
    return tuple(i for _, _, i in sorted(keys))


@functools.lru_cache(maxsize=1 << 12)
def _order_expr(n: int, ranking: tuple[int, ...]) -> sympy.Expr:
    """An index over loops p0..p{n-1} whose strides put `ranking`'s loops outermost first."""
    ps = syms("p", n)
    return sympy.Add(*(ps[i] * (1 << (len(ranking) - 1 - k)) for k, i in enumerate(ranking)))


def visit_orders(members: Sequence[Pointwise | Reduction], base: dict[int, LoopOrder]
                 ) -> dict[int, LoopOrder] | None:
    """`base` with each pointwise member that accesses a buffer read by a reduction member
    ordered as that reduction visits it, and then, in turn, each pointwise member that
    accesses a buffer an ordered member accesses (a chain such as x - max, then exp, then the
    sum) ordered as that member visits it (module docstring); None when no member changes."""
    visits: dict[str, _Visit] = {}
    for r in members:
        if isinstance(r, Reduction):
            nest = [*loop_permutation(r, base.get(id(r), "store")),
                    *range(len(r.ranges), len(r.ranges) + len(r.reduction_ranges))]
            for buffer, strides in _accesses(r):
                if strides is not None and buffer not in visits:
                    visits[buffer] = _walk(strides, nest)
    if not visits:
        return None
    out = dict(base)
    changed = False
    todo = [m for m in members if isinstance(m, Pointwise)]
    progress = True
    while todo and progress:
        progress = False
        for m in list(todo):
            accesses = _accesses(m)
            for buffer, strides in accesses:
                visit = visits.get(buffer)
                ranking = None if visit is None or strides is None else _ranking(m, strides, visit)
                if ranking is None:
                    continue
                order = _order_expr(len(m.ranges), ranking)
                perm = loop_permutation(m, order)
                if perm != loop_permutation(m, base.get(id(m), "store")):
                    out[id(m)] = order
                    changed = True
                for b, s in accesses:
                    if s is not None:
                        visits.setdefault(b, _walk(s, perm))
                todo.remove(m)
                progress = True
                break
    return out if changed else None
