"""Kernel groups: operations fused into one Triton kernel, and the legality of a fusion.

A group iterates `x_dims` (one program handles a block of x) and, for reductions, `r_dims`.
Every member's loops are expressed as linear combinations of the group's dims (a common
refinement of the members' loop sizes). A member is one of:
  - "x": a pointwise op over the x dims only (a pure pointwise kernel has only these);
  - "r": a pointwise op over x and r dims (prologue or epilogue of a reduction);
  - "reduce": a reduction over r, producing one value per x;
  - "scan": a cumulative reduction along r, one value per (x, r); always alone in its group.
Legality (`plan`): a member that reads a buffer written inside the group must read it at exactly
the index it was written (so the value stays in registers); "x"/"reduce" values may be read
from "r" members (broadcast over r), never the reverse.
Each member's loops are in the order `plan` is given for it (`orders`, default: the memory order
of its store; see `coil.scheduler.canonical`); the group's dims follow the members' nests.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import sympy
from coil.lowering_ir import Expr, Pointwise, Reduction, Scatter
from coil.scheduler.canonical import LoopNest, LoopOrder, SharedLoops, canonicalize, syms


class FusionIllegal(Exception):
    """The proposed group cannot run as one kernel; the message says why."""


@dataclass(eq=False)
class Member:
    """One operation inside a group, its loops mapped to the group's dims. `op` is a Scatter
    only in a Scatter's own scatter group (`coil.scheduler.scatter`)."""

    op: Pointwise | Reduction | Scatter
    kind: str  # "x", "r", "reduce" or "scan"
    nest: LoopNest
    # node symbol -> linear expression of group dim symbols
    mapping: dict[sympy.Symbol, Expr]
    order: LoopOrder = "store"  # how `nest`'s x loops were ordered (canonicalize's `order`)

    def kernel_expr(self, e: Expr) -> Expr:
        return _substituted(e, tuple(self.mapping.items()))


@dataclass(eq=False)
class KernelGroup:
    """Operations that run as one kernel. See the module docstring."""

    name: str
    members: list[Member]
    x_dims: list[Expr]
    r_dims: list[Expr]
    stores: list[str] = field(default_factory=list)      # buffers written to memory
    internal: list[str] = field(default_factory=list)    # buffers that live only in registers

    @property
    def is_reduction(self) -> bool:
        return any(m.kind in ("reduce", "scan") for m in self.members)

    @property
    def xnumel(self) -> Expr:
        return sympy.Mul(*self.x_dims) if self.x_dims else sympy.Integer(1)

    @property
    def rnumel(self) -> Expr:
        return sympy.Mul(*self.r_dims) if self.r_dims else sympy.Integer(1)

    @property
    def ops(self) -> list[Pointwise | Reduction | Scatter]:
        return [m.op for m in self.members]

    def origins(self) -> list[str]:
        return [o for m in self.members for o in m.op.origins]


X_PREFIX, R_PREFIX = "x", "r"


@functools.lru_cache(maxsize=1 << 16)
def _substituted(e: Expr, mapping: tuple[tuple[sympy.Symbol, Expr], ...]) -> Expr:
    """`expand(e.xreplace(mapping))`, memoised: fusion asks again at every attempt that involves
    the same member (sympy expressions are immutable and hashable)."""
    return sympy.expand(e.xreplace(dict(mapping)))


@functools.lru_cache(maxsize=1 << 14)
def _text(e: Expr) -> str:
    """`str(e)`, memoised (printing sympy is slow; fusion logs the same indices repeatedly)."""
    return str(e)


def _same(a: Expr, b: Expr) -> bool:
    """`expand(a - b) == 0`, with the structural test first (most equal pairs are identical)."""
    return bool(a == b or sympy.expand(a - b) == 0)


def refine(a: Sequence[Expr], b: Sequence[Expr]) -> list[Expr] | None:
    """The coarsest dims list refining both `a` and `b` (same product), or None."""
    if list(a) == list(b):
        return list(a)
    if not all(isinstance(s, sympy.Integer) for s in (*a, *b)) or any(s == 0 for s in (*a, *b)):
        return None  # symbolic or empty: only identical loops fuse
    cuts: set[int] = set()
    for lst in (a, b):
        acc = 1
        for s in lst:
            acc *= int(s)
            cuts.add(acc)
    ordered = sorted(cuts)
    out: list[Expr] = []
    prev = 1
    for c in ordered:
        if c % prev:
            return None
        out.append(sympy.Integer(c // prev))
        prev = c
    return out


def split_sizes(sizes: Sequence[Expr], head: Expr) -> tuple[list[Expr], list[Expr], int] | None:
    """Split `sizes` into a prefix with product `head` and the rest, cutting one dim if needed.

    Returns (prefix, suffix, index of a cut dim or -1) or None when impossible.
    """
    acc: Expr = sympy.Integer(1)
    for i, s in enumerate(sizes):
        if acc == head:
            return list(sizes[:i]), list(sizes[i:]), -1
        nxt = acc * s
        if isinstance(head, sympy.Integer) and isinstance(nxt, sympy.Integer) and int(nxt) > int(head):
            if not isinstance(acc, sympy.Integer) or int(head) % int(acc):
                return None
            left = sympy.Integer(int(head) // int(acc))
            if int(s) % int(left):
                return None
            return [*sizes[:i], left], [sympy.Integer(int(s) // int(left)), *sizes[i + 1 :]], i
        acc = nxt
    if acc == head:
        return list(sizes), [], -1
    return None


_NEST_FOR: weakref.WeakKeyDictionary[Pointwise | Reduction,
                                      dict[tuple[Expr, Expr, LoopOrder], tuple[str, LoopNest] | str]] = (
    weakref.WeakKeyDictionary())


def _nest_for(op: Pointwise | Reduction, x_numel: Expr, r_numel: Expr, order: LoopOrder = "store"
              ) -> tuple[str, LoopNest]:
    """Classify `op` inside a group of (x_numel, r_numel) and give its nest with an x/r split.

    Memoised per (op, x_numel, r_numel, order), the FusionIllegal outcome included (fusion asks
    again at every attempt that involves `op`; operations are not mutated after lowering)."""
    memo = _NEST_FOR.setdefault(op, {})
    key = (x_numel, r_numel, order)
    got = memo.get(key)
    if got is None:
        try:
            got = _classify(op, x_numel, r_numel, order)
        except FusionIllegal as e:
            got = str(e)
        memo[key] = got
    if isinstance(got, str):
        raise FusionIllegal(got)
    return got


def _classify(op: Pointwise | Reduction, x_numel: Expr, r_numel: Expr, order: LoopOrder) -> tuple[str, LoopNest]:
    nest = canonicalize(op, order)
    if isinstance(op, Reduction):
        if not _same(nest.x_numel, x_numel) or not _same(nest.r_numel, r_numel):
            raise FusionIllegal(f"{op.name}: reduction of ({nest.x_numel}, {nest.r_numel}) in ({x_numel}, {r_numel})")
        return ("scan" if op.reduction_type in ("cumsum", "cumprod") else "reduce"), nest
    numel = nest.x_numel
    if _same(numel, x_numel):
        return "x", nest
    if r_numel != 1 and _same(numel, x_numel * r_numel):
        split = _split(nest.x_sizes, nest.x_syms, x_numel)
        if split is None:
            raise FusionIllegal(f"{op.name}: loops {nest.x_sizes} do not split at {x_numel}")
        return "r", split.nest(nest.body, nest.store_index, nest.reordered)
    raise FusionIllegal(f"{op.name}: {numel} elements do not fit a group of ({x_numel}, {r_numel})")


@functools.lru_cache(maxsize=1 << 12)
def _split(sizes: tuple[Expr, ...], loop_syms: tuple[sympy.Symbol, ...], x_numel: Expr) -> SharedLoops | None:
    """Loops `sizes` (over `loop_syms`) as x loops of `x_numel` elements and r loops after them,
    a loop cut in two where the boundary falls inside it; None when they do not split there.
    A function of these alone, shared by every op with these loops (each layer's)."""
    cut = split_sizes(sizes, x_numel)
    if cut is None:
        return None
    xs, rs, at = cut
    old = list(loop_syms)
    if at >= 0:
        # the loop at `at` is cut in two: v = hi * size(lo part) + lo
        hi, lo = sympy.Symbol("_hi", integer=True), sympy.Symbol("_lo", integer=True)
        sub: dict[sympy.Symbol, Expr] = {old[at]: hi * rs[0] + lo}
        new_x = [*old[:at], hi]
        new_r = [lo, *old[at + 1 :]]
    else:
        sub = {}
        new_x, new_r = old[: len(xs)], old[len(xs) :]
    ren = dict(zip([*new_x, *new_r], [*syms("p", len(xs)), *syms("r", len(rs))], strict=True))
    return SharedLoops(xs, rs, sub, ren)


def loop_mapping(sizes: Sequence[Expr], node_syms: Sequence[sympy.Symbol], dims: Sequence[Expr],
                 dim_syms: Sequence[sympy.Symbol]) -> dict[sympy.Symbol, Expr]:
    """Each node loop variable (`node_syms`, over `sizes`) as a linear combination of the group
    dim symbols `dim_syms` (over `dims`, a refinement of `sizes`); FusionIllegal when `dims` do
    not refine `sizes`."""
    got = _mapping_memo(tuple(sizes), tuple(node_syms), tuple(dims), tuple(dim_syms))
    if isinstance(got, str):
        raise FusionIllegal(got)
    return dict(got)


@functools.lru_cache(maxsize=1 << 14)
def _mapping_memo(sizes: tuple[Expr, ...], node_syms: tuple[sympy.Symbol, ...], dims: tuple[Expr, ...],
                  dim_syms: tuple[sympy.Symbol, ...]) -> tuple[tuple[sympy.Symbol, Expr], ...] | str:
    """`loop_mapping` memoised (the FusionIllegal message as a str): every fusion attempt re-plans
    its members, mostly over the same loops and dims."""
    try:
        return tuple(_compute_mapping(sizes, node_syms, dims, dim_syms).items())
    except FusionIllegal as e:
        return str(e)


def _compute_mapping(sizes: Sequence[Expr], node_syms: Sequence[sympy.Symbol], dims: Sequence[Expr],
                     dim_syms: Sequence[sympy.Symbol]) -> dict[sympy.Symbol, Expr]:
    out: dict[sympy.Symbol, Expr] = {}
    j = 0
    for s, v in zip(sizes, node_syms, strict=True):
        block: list[int] = []
        acc: Expr = sympy.Integer(1)
        while not _same(acc, s):
            if j >= len(dims):
                raise FusionIllegal("dims do not refine the node loops")
            block.append(j)
            acc = acc * dims[j]
            j += 1
        expr: Expr = sympy.Integer(0)
        mult: Expr = sympy.Integer(1)
        for k in reversed(block):
            expr = expr + dim_syms[k] * mult
            mult = mult * dims[k]
        out[v] = expr
    return out


def plan(name: str, ops: Sequence[Pointwise | Reduction], outside_readers: set[str], graph_outputs: set[str],
         orders: Mapping[int, LoopOrder] | None = None) -> KernelGroup:
    """Build the group for `ops` (in execution order) or raise FusionIllegal (also when they
    write buffers of different devices: the scheduler never fuses across devices).

    `outside_readers`: buffers read by something outside these ops; with `graph_outputs` they
    decide which results must be stored; the rest stay in registers. `orders`: the loop order of
    an op (by `id(op)`; default "store", the memory order of its output).
    """
    devices = sorted({str(op.output.layout.device) for op in ops})
    if len(devices) > 1:  # one kernel runs on one device: it cannot reach another's memory
        raise FusionIllegal(f"members write buffers on different devices ({', '.join(devices)})")
    order_of = {id(op): (orders or {}).get(id(op), "store") for op in ops}
    reductions = [op for op in ops if isinstance(op, Reduction)]
    if reductions:
        first = canonicalize(reductions[0], order_of[id(reductions[0])])
        x_numel, r_numel = first.x_numel, first.r_numel
    else:
        x_numel, r_numel = canonicalize(ops[0], order_of[id(ops[0])]).x_numel, sympy.Integer(1)
    classified = [(op, *_nest_for(op, x_numel, r_numel, order_of[id(op)])) for op in ops]
    x_dims: list[Expr] | None = None
    r_dims: list[Expr] | None = None
    for _, kind, nest in classified:
        x_dims = list(nest.x_sizes) if x_dims is None else refine(x_dims, nest.x_sizes)
        if x_dims is None:
            raise FusionIllegal("x loops have no common refinement")
        if kind != "x":
            r_dims = list(nest.r_sizes) if r_dims is None else refine(r_dims, nest.r_sizes)
            if r_dims is None:
                raise FusionIllegal("r loops have no common refinement")
    assert x_dims is not None
    r_dims = r_dims or []
    xs, rs = syms(X_PREFIX, len(x_dims)), syms(R_PREFIX + "d", len(r_dims))
    members: list[Member] = []
    for op, kind, nest in classified:
        mapping = loop_mapping(nest.x_sizes, nest.x_syms, x_dims, xs)
        if kind != "x":
            mapping.update(loop_mapping(nest.r_sizes, nest.r_syms, r_dims, rs))
        members.append(Member(op, kind, nest, mapping, order_of[id(op)]))
    group = KernelGroup(name, members, x_dims, r_dims)
    _check_dependencies(group, set(rs))
    written = list(dict.fromkeys(m.op.output.name for m in members))  # member order: the same in every process
    group.stores = [b for b in written if b in outside_readers or b in graph_outputs]
    group.internal = [b for b in written if b not in group.stores]
    return group


def _check_dependencies(group: KernelGroup, r_syms: set[sympy.Symbol]) -> None:
    writer: dict[str, Member] = {}
    for m in group.members:
        for ld in m.nest.body_loads:
            w = writer.get(ld.buffer)
            if w is None:
                continue
            got = m.kernel_expr(ld.index)
            want = w.kernel_expr(w.nest.store_index)
            if not _same(got, want):
                raise FusionIllegal(f"{m.op.name} reads {ld.buffer} at {_text(got)}, written at {_text(want)}")
            if w.kind == "r" and m.kind != "r" and m.kind != "reduce":
                raise FusionIllegal(f"{m.op.name} (per x) reads per-(x, r) values of {ld.buffer}")
        writer[m.op.output.name] = m
