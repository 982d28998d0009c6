"""index_reduce and scatter_reduce as dense reductions: no atomics, deterministic.

`out[p]` reduces, over the K source slices along `dim`, the source values whose index equals
`p[dim]` (a masked reduction: other slices contribute the identity), then combines the result
with `self[p]`:

    red[p]   = reduce_{r < K} (index[.., r, ..] == p[dim] ? src[.., r, ..] : identity)
    count[p] = sum_{r < K}    (index[.., r, ..] == p[dim])           (mean, include_self=False)
    out[p]   = include_self ? combine(self[p], red[p]) : (count[p] > 0 ? red[p] : self[p])

and for "mean" the sum is divided by the number of terms (floor division for integers, as
eager). For bool, sum and amax reduce with "any" (or), prod and amin with "all" (and). Each output element reads all K index entries, so the work is numel(out) * K: the
lowering declines (ATen fallback) when K exceeds DENSE_MAX_K.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sympy
import torch
import torch.fx
from coil.lowering_ir.errors import Unsupported
from coil.lowering_ir.layout import Expr
from coil.lowering_ir.lowerer import Lowerer, TensorMeta
from coil.lowering_ir.nodes import TensorRef, load
from coil.lowering_ir.ops.common import cast, is_tensor, upcast_compute
from coil.lowering_ir.registry import register
from coil.lowering_ir.values import Constant, IndexValue, Load, Op, Value

aten = torch.ops.aten

DENSE_MAX_K = 4096
RTYPE = {"sum": "sum", "mean": "sum", "prod": "prod", "amax": "max", "amin": "min"}
BOOL_RTYPE = {"sum": "any", "amax": "any", "prod": "all", "amin": "all"}  # bool + is or, * is and

# match(p, r) -> (does source slice r land on output position p, index of src to read)
Match = Callable[[list[sympy.Symbol], list[sympy.Symbol]], tuple[Value, list[Expr]]]


def _identity(rtype: str, dtype: torch.dtype) -> float | int | bool:
    if rtype in ("sum", "any"):
        return 0 if rtype == "sum" else False
    if rtype in ("prod", "all"):
        return 1 if rtype == "prod" else True
    if dtype.is_floating_point:
        return float("-inf") if rtype == "max" else float("inf")
    info = torch.iinfo(dtype)
    return info.min if rtype == "max" else info.max


def _dense(lw: Lowerer, x: TensorRef, src: TensorRef, k: Expr, match: Match, reduce: str,
           include_self: bool) -> TensorRef:
    """The module docstring's formula over K = `k` source slices."""
    if reduce not in RTYPE:
        raise Unsupported(f"reduce={reduce!r}")
    if not isinstance(k, sympy.Integer) or int(k) > DENSE_MAX_K:
        raise Unsupported("too many (or a symbolic number of) source slices for a dense reduction")
    val = lw.out_val()
    dt = val.dtype
    if dt.is_complex or (dt == torch.bool and reduce == "mean"):
        raise Unsupported(f"{reduce} of {dt}")
    rtype = RTYPE[reduce] if dt != torch.bool else BOOL_RTYPE[reduce]
    acc = upcast_compute(dt) if rtype in ("sum", "prod") else dt
    ident = _identity(rtype, acc)
    shape = [sympy.sympify(s) for s in val.shape]

    def body(p: list[sympy.Symbol], r: list[sympy.Symbol]) -> Value:
        hit, sidx = match(p, r)
        ld = load(src, sidx)
        v = cast(Load(ld.buffer, ld.index, ld.dtype, hit), acc)
        return Op("where", (hit, v, Constant(ident, acc)), acc)

    red = lw.reduction(TensorMeta.contiguous(shape, acc, val.device), [k], rtype, body, acc)
    count = None
    if reduce == "mean" or not include_self:
        def hits(p: list[sympy.Symbol], r: list[sympy.Symbol]) -> Value:
            return cast(match(p, r)[0], torch.int64)

        count = lw.reduction(TensorMeta.contiguous(shape, torch.int64, val.device), [k], "sum", hits, torch.int64)

    def finish(p: list[sympy.Symbol]) -> Value:
        me = cast(load(x, list(p)), acc)
        rv = load(red, list(p))
        n: Value | None = load(count, list(p)) if count is not None else None
        if reduce == "mean":
            assert n is not None
            total = Op("add", (me, rv), acc) if include_self else rv
            terms = Op("add", (n, Constant(1, torch.int64)), torch.int64) if include_self else \
                Op("maximum", (n, Constant(1, torch.int64)), torch.int64)
            name = "truediv" if acc.is_floating_point else "floordiv"
            out: Value = Op(name, (total, cast(terms, acc)), acc)
        elif include_self:
            name = {"sum": "add", "prod": "mul", "max": "maximum", "min": "minimum", "any": "logical_or",
                    "all": "logical_and"}[rtype]
            out = Op(name, (me, rv), acc)
        else:
            out = rv
        if not include_self:
            assert n is not None
            out = Op("where", (Op("gt", (n, Constant(0, torch.int64)), torch.bool), out, me), acc)
        return cast(out, dt)

    return lw.pointwise(finish)


def _index_at(index: TensorRef, idx: list[Expr], size: Expr, mask: Value | None) -> Value:
    """index[idx] as int64 (masked where `mask` is false), negatives wrapped by `size`."""
    ld = load(index, idx)
    v = cast(Load(ld.buffer, ld.index, ld.dtype, mask), torch.int64)
    neg = Op("lt", (v, Constant(0, torch.int64)), torch.bool)
    return Op("where", (neg, Op("add", (v, IndexValue(size, torch.int64)), torch.int64), v), torch.int64)


@register(aten.index_reduce.default)
def index_reduce(lw: Lowerer, node: torch.fx.Node, x: Any, dim: int, index: Any, src: Any, reduce: str, *,
                 include_self: bool = True) -> TensorRef:
    """self.index_reduce_(dim, index, source, reduce): slice r of source reduces into slice
    index[r] of self along dim."""
    if not (is_tensor(x) and is_tensor(index) and is_tensor(src)) or len(index.layout.size) != 1:
        raise Unsupported("index_reduce operands")
    rank = len(x.layout.size)
    if len(src.layout.size) != rank:
        raise Unsupported("index_reduce with source and self of different rank")
    d = dim % rank if rank else 0
    size = x.layout.size[d] if rank else sympy.Integer(1)  # a 0-d self acts as one element

    def match(p: list[sympy.Symbol], r: list[sympy.Symbol]) -> tuple[Value, list[Expr]]:
        at = _index_at(index, [r[0]], size, None)
        hit = Op("eq", (at, IndexValue(p[d] if rank else sympy.Integer(0), torch.int64)), torch.bool)
        sidx: list[Expr] = list(p)
        if rank:
            sidx[d] = r[0]
        return hit, sidx

    return _dense(lw, x, src, index.layout.size[0], match, reduce, include_self)


@register(aten.scatter_reduce.two)
def scatter_reduce(lw: Lowerer, node: torch.fx.Node, x: Any, dim: int, index: Any, src: Any, reduce: str, *,
                   include_self: bool = True) -> TensorRef:
    """self.scatter_reduce(dim, index, src, reduce): for every position q of index, src[q]
    reduces into self at q with q[dim] replaced by index[q] (index may be smaller than self
    and src in every dim)."""
    if not (is_tensor(x) and is_tensor(index) and is_tensor(src)):
        raise Unsupported("scatter_reduce operands")
    rank = len(x.layout.size)
    if len(index.layout.size) != rank or len(src.layout.size) != rank:
        raise Unsupported("scatter_reduce operands of different rank")
    isize = index.layout.size
    if not all(isinstance(s, sympy.Integer) for s in isize):
        raise Unsupported("scatter_reduce with a symbolic index shape")
    if rank == 0:  # one element: src reduces into it when index is 0 (or -1)
        def match0(p: list[sympy.Symbol], r: list[sympy.Symbol]) -> tuple[Value, list[Expr]]:
            at = _index_at(index, [], sympy.Integer(1), None)
            return Op("eq", (at, Constant(0, torch.int64)), torch.bool), []

        return _dense(lw, x, src, sympy.Integer(1), match0, reduce, include_self)
    d = dim % rank

    def match(p: list[sympy.Symbol], r: list[sympy.Symbol]) -> tuple[Value, list[Expr]]:
        inside: Value | None = None
        for k in range(rank):
            if k == d or sympy.Integer(isize[k]) == x.layout.size[k]:
                continue
            c = Op("lt", (IndexValue(p[k], torch.int64), Constant(int(isize[k]), torch.int64)), torch.bool)
            inside = c if inside is None else Op("logical_and", (inside, c), torch.bool)
        qidx: list[Expr] = list(p)
        qidx[d] = r[0]
        at = _index_at(index, qidx, x.layout.size[d], inside)
        hit: Value = Op("eq", (at, IndexValue(p[d], torch.int64)), torch.bool)
        if inside is not None:
            hit = Op("logical_and", (inside, hit), torch.bool)
        return hit, qidx

    return _dense(lw, x, src, isize[d], match, reduce, include_self)
