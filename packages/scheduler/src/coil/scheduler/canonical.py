"""Canonical loop nests: drop size-1 loops, order loops by memory, merge loops that index memory as one.

`canonicalize(op)` rewrites a Pointwise/Reduction over fresh symbols so that two nodes computing
the same elements in the same order get the same loop structure (e.g. a [B, S, H] contiguous
pointwise and a [B*S, H] one both become one loop of B*S*H).

Loop order (`order`): by default an op's x loops run in the memory order of what it writes:
sorted by the store index's stride, largest outermost, so the smallest stride is innermost and
consecutive lanes of a block touch consecutive addresses (a pointwise op writing a channels-last
[N, C, H, W] buffer iterates c fastest and, once sorted, its loops merge into one). Two ops over
the same elements in the same memory order therefore get the same nest whatever their logical
shapes. r loops (reductions) keep their logical order and stay innermost: argmax/argmin
positions and the summation order depend on it. Other orders, used by fusion when the default
ones do not fuse (`LoopOrder`): `"logical"` (the op's logical dimension order) or an index
expression of the op's own loops (typically a load's index: the loops run in the memory order of
that read). The order is left logical when strides cannot be compared (symbolic strides of
unknown sign difference, a store that is not affine in a loop, a loop the store does not use).

`canonicalize` is memoised per operation object (fusion asks for the same op's nest at every
attempt that involves it): operations are not mutated after lowering, and the cache holds them
weakly, so it lives as long as the lowered graph. The loops themselves, and the rewrite of each
index expression onto them, are memoised by value (the op's loops, index expressions and
permutation): the ops of every layer of a model share them.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

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
    # the x loops are not in the op's logical order (they were sorted by memory order)
    reordered: bool = False

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

    @property
    def shape_key(self) -> tuple[tuple[Expr, ...], tuple[Expr, ...], Expr]:
        """Identifies the nest of one op: the store index is injective over the x loops, so two
        nests of the same op with the same sizes and store index run the same iterations in the
        same order."""
        return self.x_sizes, self.r_sizes, self.store_index


# How an op's x loops are ordered: "store" (the memory order of its output, the default),
# "logical" (its dimension order) or an index expression over the op's loop symbols p0.. (the
# memory order of that index, e.g. one of its loads).
LoopOrder = Literal["store", "logical"] | Expr


@functools.cache
def syms(prefix: str, n: int) -> tuple[sympy.Symbol, ...]:
    """`prefix0 .. prefix{n-1}`: nonnegative integer symbols (memoised: making a sympy Symbol
    is slow, and fusion asks for the same few at every attempt)."""
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


def linear_coeff(e: Expr, v: sympy.Symbol) -> Expr | None:
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
            ca, cb = linear_coeff(e, a), linear_coeff(e, b)
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


def _at_least(a: Expr, b: Expr) -> bool | None:
    """a >= b (True/False), or None when sympy cannot tell (symbolic strides).

    Symbolic strides are products of positive size symbols: `s0*s1*s2 - s0*s1` is undecided as
    a sum, but `a / b = s2` is a positive integer, so a = s2 * b >= b."""
    if isinstance(a, sympy.Integer) and isinstance(b, sympy.Integer):
        return int(a) >= int(b)
    d = sympy.expand(a - b)
    if d.is_nonnegative is not None:
        return bool(d.is_nonnegative)
    if b.is_positive:
        q = sympy.cancel(a / b)
        if q.is_integer and q.is_positive:
            return True
    return None


def memory_order(sizes: Sequence[Expr], vars_: Sequence[sympy.Symbol], index: Expr) -> list[int] | None:
    """Positions of the loops sorted by their stride in `index`, largest first (stable).

    Size-1 loops keep their place (they are dropped anyway). None when the order cannot be
    decided: `index` not affine in a loop, a loop of size > 1 it does not use (stride 0), or
    strides sympy cannot compare."""
    ex = sympy.expand(index)
    strides: list[Expr | None] = []
    for s, v in zip(sizes, vars_, strict=True):
        if s == 1:
            strides.append(None)
            continue
        c = linear_coeff(ex, v)
        if c is None or c == 0:
            return None
        strides.append(c)
    pos = [i for i, c in enumerate(strides) if c is not None]
    out: list[int] = []
    for i in pos:  # insertion sort: a comparison sympy cannot decide aborts (no total order)
        k = len(out)
        while k > 0:
            ci, ck = strides[i], strides[out[k - 1]]
            assert ci is not None and ck is not None
            ge = _at_least(ck, ci)
            if ge is None:  # e.g. 1 vs s0: s0 >= 1 decides it (equal strides only for size-1 loops)
                le = _at_least(ci, ck)
                if not le:
                    return None
                ge = False
            if ge:
                break
            k -= 1
        out.insert(k, i)
    # size-1 loops go back to their own positions
    order = iter(out)
    return [i if strides[i] is None else next(order) for i in range(len(strides))]


_PERMS: weakref.WeakKeyDictionary[Pointwise | Reduction, dict[LoopOrder, tuple[int, ...]]] = (
    weakref.WeakKeyDictionary())
_NESTS: weakref.WeakKeyDictionary[Pointwise | Reduction, dict[tuple[int, ...], LoopNest]] = weakref.WeakKeyDictionary()


def _p_syms(n: int) -> list[sympy.Symbol]:
    return list(syms("p", n))


def loop_permutation(op: Pointwise | Reduction, order: LoopOrder = "store") -> tuple[int, ...]:
    """The positions of `op`'s x loops (`op.ranges`), outermost first, under `order`: the
    identity for "logical" and wherever `memory_order` cannot decide. Memoised per (op, order);
    two orders with the same permutation give the same nest."""
    memo = _PERMS.get(op)
    if memo is None:
        memo = _PERMS[op] = {}
    got = memo.get(order)
    if got is None:
        index = None if order == "logical" else op.store_index if order == "store" else order
        got = memo[order] = _permutation(tuple(op.ranges), index)
    return got


@functools.lru_cache(maxsize=1 << 12)
def _permutation(ranges: tuple[Expr, ...], index: Expr | None) -> tuple[int, ...]:
    """`loop_permutation` by value: the loops `ranges` in the memory order of `index` (None:
    logical), the identity where `memory_order` cannot decide."""
    perm = None if index is None else memory_order(ranges, _p_syms(len(ranges)), index)
    return tuple(perm) if perm is not None else tuple(range(len(ranges)))


def canonicalize(op: Pointwise | Reduction, order: LoopOrder = "store") -> LoopNest:
    """The canonical loop nest of one operation with its x loops in `order` (see the module
    docstring); memoised per (`op`, loop permutation)."""
    perm = loop_permutation(op, order)
    memo = _NESTS.get(op)
    if memo is None:
        memo = _NESTS[op] = {}
    nest = memo.get(perm)
    if nest is None:
        nest = memo[perm] = _canonicalize(op, perm)
    return nest


def _canonicalize(op: Pointwise | Reduction, perm: tuple[int, ...]) -> LoopNest:
    exprs = (*index_exprs(op.body), op.store_index)
    r_ranges = tuple(op.reduction_ranges) if isinstance(op, Reduction) else None
    return _canonical_loops(tuple(op.ranges), r_ranges, exprs, perm).nest(op.body, op.store_index,
                                                                           list(perm) != sorted(perm))


class SharedLoops:
    """Loops shared by every op with the same loops and index expressions (each layer of a model
    repeats its ops): the x and r sizes, their canonical symbols, and the rewrite of an index
    expression onto them, memoised per expression: `subs` applied in turn, the result expanded
    after the first and at the end."""

    def __init__(self, xs: Sequence[Expr], rs: Sequence[Expr], *subs: Mapping[sympy.Symbol, Expr]) -> None:
        self.xs, self.rs = tuple(xs), tuple(rs)
        self.xn, self.rn = syms("p", len(xs)), syms("r", len(rs))
        self._first, *self._then = subs
        self._done: dict[Expr, Expr] = {}

    def rewrite(self, e: Expr) -> Expr:
        """`e` (over the op's loop symbols) over the canonical symbols."""
        got = self._done.get(e)
        if got is None:
            got = sympy.expand(e.xreplace(self._first))
            for sub in self._then:
                got = got.xreplace(sub)
            got = self._done[e] = sympy.expand(got)
        return got

    def nest(self, body: Value, store: Expr, reordered: bool) -> LoopNest:
        """The loop nest of an op with `body` and `store` index over these loops."""
        return LoopNest(self.xs, self.rs, self.xn, self.rn, map_indices(body, self.rewrite), self.rewrite(store),
                        reordered)


@functools.lru_cache(maxsize=1 << 12)
def _canonical_loops(ranges: tuple[Expr, ...], r_ranges: tuple[Expr, ...] | None, exprs: tuple[Expr, ...],
                     perm: tuple[int, ...]) -> SharedLoops:
    """The canonical loops of an op with x loops `ranges` in order `perm`, reduction loops
    `r_ranges` (None for a pointwise op) and index expressions `exprs` (its loads', index
    values' and store's): a function of these alone, so shared by every op that has them."""
    p_in = _p_syms(len(ranges))
    reordered = list(perm) != sorted(perm)
    sizes = [ranges[i] for i in perm] if reordered else list(ranges)
    if reordered:
        p_in = [p_in[i] for i in perm]
    xs, sub, xv = simplify_loops(sizes, p_in, exprs)
    rs: list[Expr] = []
    rv: list[sympy.Symbol] = []
    if r_ranges is not None:
        r_in = list(syms("r", len(r_ranges)))
        rs, rsub, rv = simplify_loops(r_ranges, r_in, [sympy.expand(e.xreplace(sub)) for e in exprs])
        sub = {**sub, **rsub}
    tmp = {v: sympy.Symbol(f"_t{v.name}", integer=True, nonnegative=True) for v in (*xv, *rv)}
    final = {tmp[v]: n for v, n in zip([*xv, *rv], [*syms("p", len(xs)), *syms("r", len(rs))], strict=True)}
    return SharedLoops(xs, rs, sub, tmp, final)
