"""Reduction lowerings: sum, prod, amax/amin, any/all, mean, var/std/var_mean (two-pass)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sympy
import torch
import torch.fx
from coil.knobs import knobs
from coil.lowering_ir.errors import Unsupported
from coil.lowering_ir.layout import Expr
from coil.lowering_ir.lowerer import Lowerer, TensorMeta
from coil.lowering_ir.nodes import TensorRef, load
from coil.lowering_ir.ops.common import cast, upcast_compute, value_of
from coil.lowering_ir.registry import register
from coil.lowering_ir.split_rule import MAX_CHUNKS, MIN_CHUNKS, MIN_TOTAL_FACTOR, SplitRule
from coil.lowering_ir.values import Constant, IndexValue, Load, Op, Value

aten = torch.ops.aten
prims = torch.ops.prims


def _dims(x: TensorRef, dims: Any) -> list[int]:
    rank = len(x.layout.size)
    if rank == 0:
        return []  # a 0-d tensor has no dims: the reduction reads its one element
    if dims is None or (isinstance(dims, list | tuple) and len(dims) == 0):
        return list(range(rank))
    if isinstance(dims, int):
        dims = [dims]
    return sorted({d % rank if rank else 0 for d in dims})


def _split(x: TensorRef, dims: list[int], keepdim: bool) -> tuple[list[Expr], Any]:
    """Reduction ranges, and a map (p, r) -> the input index."""
    size = x.layout.size
    rranges = [size[d] for d in dims]

    def index(p: Sequence[Expr], r: Sequence[Expr]) -> list[Expr]:
        idx: list[Expr] = []
        pi = 0
        ri = 0
        for d in range(len(size)):
            if d in dims:
                idx.append(r[ri])
                ri += 1
                if keepdim:
                    pi += 1
            else:
                idx.append(p[pi])
                pi += 1
        return idx

    return rranges, index


SPLITTABLE = {"sum": "0", "prod": "1", "max": "-inf", "min": "inf", "any": "0", "all": "1"}


def _reduce(lw: Lowerer, x: TensorRef, dims: list[int], keepdim: bool, rtype: str, val: torch.Tensor | TensorMeta,
            body_dtype: torch.dtype, transform: Any = None, may_split: bool = True) -> TensorRef:
    rranges, index = _split(x, dims, keepdim)
    acc = upcast_compute(body_dtype) if rtype in ("sum", "prod") else body_dtype
    plan = _split_plan(x, dims, val, lw.split_rule) if may_split and rtype in SPLITTABLE else None
    if plan is not None:
        return _split_reduce(lw, x, plan, index, rtype, val, body_dtype, acc, transform)

    def body(p: list[sympy.Symbol], r: list[sympy.Symbol]) -> Value:
        v = cast(load(x, index(p, r)), body_dtype)
        return transform(v, p) if transform is not None else v

    return lw.reduction(val, rranges, rtype, body, acc)


def _identity(ident: str, dtype: torch.dtype) -> float | int | bool:
    """The identity element named in SPLITTABLE ("0", "1", "inf", "-inf") as a `dtype` value."""
    if dtype == torch.bool:
        return ident == "1"
    if dtype.is_floating_point:
        return float(ident)
    if ident in ("inf", "-inf"):
        info = torch.iinfo(dtype)
        return info.max if ident == "inf" else info.min
    return int(ident)


# -- split reductions ---------------------------------------------------------------------------------
#
# Why here: a split makes a new buffer and two IR nodes, which the scheduler (fusion), the memory
# planner and the wrapper must all see; codegen sees one kernel group at a time. The rule's two
# machine facts come from lowering's caller (`SplitRule`, coil.lowering_ir.split_rule): the SM
# count, and `rows`, the outputs one program of codegen's outer reduction kernel reduces.
#
# The rule: a reduction of a splittable type (sum, prod, max, min, any, all; mean and
# var/std/var_mean through them) with static sizes is split when
#   - rows = rule.outer_rows if the input's innermost (stride-1) dim is kept ("outer": codegen
#     tiles that many neighbouring outputs per program), else 1 (one row per program);
#   - its outputs occupy few programs: ceil(xnumel / rows) < rule.min_programs (2 per SM);
#   - each program has much work: rnumel * rows >= split_reduction_min (COIL_SPLIT_REDUCTION_MIN,
#     default 4096);
#   - there is enough data in all: xnumel * rnumel >= MIN_TOTAL_FACTOR (8) * split_reduction_min
#     (below that a few programs finish in about a launch's time);
#   - it yields S >= MIN_CHUNKS (4) chunks per output, where S is the power of two that brings
#     programs * S to rule.target_programs (8 per SM): the least that reaches it for an inner
#     reduction; the most that stays within it for an outer one (its partials run faster in
#     fewer, longer programs); the least that reaches it for var/std/var_mean's partials, outer
#     or not (two passes over each chunk: they run faster in more programs). At most MAX_CHUNKS
#     (1024), and at most rnumel / max(2, split_reduction_min / (2 rows)) (every chunk keeps at
#     least half the minimum work). With the defaults (132 SMs): inner reductions from 8192
#     elements per row, outer ones from 128 rows. docs/perf.md has the timings behind the outer
#     and var_mean choices.
# The chunks are cut from the reduced dims in memory order, outermost first: whole dims while they
# fit in S, then one dim cut into f pieces: f the divisor of n nearest the count still wanted
# (within a factor 2 of it), so that every piece is whole; without such a divisor, no cut when
# the whole dims reach half of S, else f = ceil(n / ceil(n / remaining)) pieces (the last may be
# shorter; a mask covers it, and the masked partial does not fuse with the value's producer).
# Every index stays affine in the loop variables (no div/mod), so codegen's loops and tiling see
# the input's strides. Partials of an "outer" reduction are laid out chunk-major ([*chunks,
# *out]: the contiguous output dim stays innermost for both kernels); of an inner one
# chunk-minor ([*out, *chunks]).


@dataclass(frozen=True)
class _SplitPlan:
    """How one reduction is cut into chunks (see the rule above).

    `rsizes`: the reduced dims' sizes, in the order `_split` lists them (logical order).
    `chunks`: (position in rsizes, pieces f, width w) for each dim the chunks cut: whole dims
    (w == 1, f == n) then possibly one cut dim (w > 1). `rest`: positions of the dims a partial
    reduces over (the cut dim first, as width w, then the untouched ones in memory order).
    `outer`: partials are chunk-major.
    """

    rsizes: tuple[int, ...]
    chunks: tuple[tuple[int, int, int], ...]
    rest: tuple[int, ...]
    outer: bool

    @property
    def chunk_sizes(self) -> list[Expr]:
        return [sympy.Integer(f) for _, f, _ in self.chunks]

    def rest_sizes(self) -> list[Expr]:
        width = {k: w for k, _, w in self.chunks if w > 1}
        return [sympy.Integer(width.get(k, self.rsizes[k])) for k in self.rest]

    def rvars(self, s: Sequence[Expr], r: Sequence[Expr]) -> tuple[list[Expr], Expr | None]:
        """The input's reduced-dim indices from chunk indices `s` and within-chunk indices `r`,
        and the index that must stay below its dim's size (the cut dim when ragged), or None."""
        out: list[Expr] = [sympy.Integer(0)] * len(self.rsizes)
        for i, k in enumerate(self.rest):
            out[k] = r[i]
        inside: Expr | None = None
        for j, (k, f, w) in enumerate(self.chunks):
            if w == 1:
                out[k] = s[j]
            else:  # the cut dim: rest[0] is its position inside the piece
                out[k] = s[j] * w + r[0]
                if f * w != self.rsizes[k]:
                    inside = out[k]
        return out, inside

    def count(self, s: Sequence[Expr], dtype: torch.dtype) -> Value:
        """Elements in chunk `s` (a Value in `dtype`): the cut dim's last piece may be short."""
        full = 1
        for k in self.rest:
            cut = [w for c, _, w in self.chunks if c == k and w > 1]
            full *= cut[0] if cut else self.rsizes[k]
        for j, (k, f, w) in enumerate(self.chunks):
            last = self.rsizes[k] - (f - 1) * w
            if w > 1 and last != w:
                is_last = Op("eq", (IndexValue(s[j], torch.int64), Constant(f - 1, torch.int64)), torch.bool)
                short = full // w * last
                return Op("where", (is_last, Constant(float(short), dtype), Constant(float(full), dtype)), dtype)
        return Constant(float(full), dtype)

    def partial_meta(self, val: torch.Tensor | TensorMeta, dtype: torch.dtype) -> TensorMeta:
        shape = [*self.chunk_sizes, *val.shape] if self.outer else [*val.shape, *self.chunk_sizes]
        return TensorMeta.contiguous(shape, dtype, val.device)

    def split_p(self, p: Sequence[sympy.Symbol]) -> tuple[list[sympy.Symbol], list[sympy.Symbol]]:
        """(chunk indices, output indices) of a partial buffer's index variables."""
        n = len(self.chunks)
        return (list(p[:n]), list(p[n:])) if self.outer else (list(p[len(p) - n:]), list(p[:len(p) - n]))

    def partial_index(self, c: Sequence[Expr], p: Sequence[Expr]) -> list[Expr]:
        return [*c, *p] if self.outer else [*p, *c]


def _split_plan(x: TensorRef, dims: list[int], val: torch.Tensor | TensorMeta, rule: SplitRule,
                moments: bool = False) -> _SplitPlan | None:
    """The split of a reduction of `x` over `dims` into `val` under `rule`'s machine facts, or
    None (see the rule above).

    `moments`: the partials are var_mean's (two passes over each chunk), which take the least
    chunk count reaching the target even when outer (see the rule above).
    """
    size, stride = x.layout.size, x.layout.stride
    rsizes = [size[d] for d in dims]
    xsizes = [sympy.sympify(s) for s in val.shape]
    if not all(sympy.sympify(e).is_Integer for e in (*rsizes, *xsizes)) or not dims:
        return None
    total = int(sympy.Mul(*rsizes))
    xnumel = int(sympy.Mul(*xsizes)) if xsizes else 1
    least = knobs.split_reduction_min
    if total < 2 or xnumel * total < MIN_TOTAL_FACTOR * least:
        return None  # so little data in all that a few programs finish at once
    static_strides = all(sympy.sympify(st).is_Integer for st in stride)
    live = [d for d in range(len(size)) if size[d] != 1 and (not static_strides or int(stride[d]) != 0)]
    innermost = min(live, key=lambda d: abs(int(stride[d]))) if live and static_strides else len(size) - 1
    outer = bool(live) and innermost not in dims
    rows = rule.outer_rows if outer else 1
    programs = -(-xnumel // rows)
    if programs >= rule.min_programs or total * rows < least:
        return None  # enough programs, or each does little work
    min_chunk = max(2, least // (2 * rows))
    want = 1
    if outer and not moments:  # the most chunks keeping programs * S within the target (above)
        while 2 * want * programs <= rule.target_programs:
            want *= 2
    else:
        while want * programs < rule.target_programs:
            want *= 2
    want = min(want, MAX_CHUNKS, total // min_chunk)
    if want < MIN_CHUNKS:
        return None
    order = list(range(len(dims)))
    if static_strides:
        order.sort(key=lambda k: -abs(int(stride[dims[k]])))
    chunks: list[tuple[int, int, int]] = []
    remaining = want
    for k in order:
        n = int(rsizes[k])
        if remaining <= 1:
            break
        if n == 1:
            continue
        if n <= remaining:
            chunks.append((k, n, 1))
            remaining = -(-remaining // n)
            continue
        f = _even_pieces(n, remaining)
        if f is None and remaining <= 2 and chunks:
            break  # the whole dims reach half the wanted count: no ragged piece
        if f is None:
            f = -(-n // -(-n // remaining))
        chunks.append((k, f, -(-n // f)))
        break
    if not chunks:
        return None
    cut = [k for k, _, w in chunks if w > 1]
    rest = cut + [k for k in order if all(k != c for c, _, _ in chunks)]
    if not rest:
        return None  # every element its own chunk: nothing left to reduce per chunk
    return _SplitPlan(tuple(int(n) for n in rsizes), tuple(chunks), tuple(rest), outer)


def _even_pieces(n: int, wanted: int) -> int | None:
    """The divisor of `n` nearest `wanted` (by ratio; the larger on a tie) among those within a
    factor 2 of it that leave pieces of 2 or more, or None: equal pieces need no mask, and a
    masked partial refuses fusion with the producer of the reduced value."""
    near = [f for f in range(max(2, -(-wanted // 2)), min(n // 2, 2 * wanted) + 1) if n % f == 0]
    return min(near, key=lambda f: (max(f / wanted, wanted / f), -f)) if near else None


def _split_reduce(lw: Lowerer, x: TensorRef, plan: _SplitPlan, index: Any, rtype: str, val: torch.Tensor | TensorMeta,
                  body_dtype: torch.dtype, acc: torch.dtype, transform: Any) -> TensorRef:
    """Two kernels: partial reductions over the chunks of each output, then their reduction."""
    ident_value = _identity(SPLITTABLE[rtype], body_dtype)

    def body1(p: list[sympy.Symbol], r: list[sympy.Symbol]) -> Value:
        c, q = plan.split_p(p)
        v, inside = _chunk_value(x, plan, index, c, q, r, body_dtype)
        if transform is not None:
            v = transform(v, q)
        return v if inside is None else Op("where", (inside, v, Constant(ident_value, v.dtype)), v.dtype)

    partial = lw.reduction(plan.partial_meta(val, acc), plan.rest_sizes(), rtype, body1, acc)

    def body2(p: list[sympy.Symbol], r: list[sympy.Symbol]) -> Value:
        return load(partial, plan.partial_index(r, p))

    return lw.reduction(val, plan.chunk_sizes, rtype, body2, acc)


def _chunk_value(x: TensorRef, plan: _SplitPlan, index: Any, c: Sequence[Expr], q: Sequence[Expr],
                 r: Sequence[Expr], dtype: torch.dtype) -> tuple[Value, Value | None]:
    """The input element at chunk `c`, output `q`, within-chunk `r` (cast to `dtype`; a masked
    load on a ragged chunk), and the bool Value "inside the input" (None when every chunk is full)."""
    rv, inside_at = plan.rvars(c, r)
    ld = load(x, index(q, rv))
    if inside_at is None:
        return cast(ld, dtype), None
    k = next(k for k, _, w in plan.chunks if w > 1)
    inside = Op("lt", (IndexValue(inside_at, torch.int64), Constant(plan.rsizes[k], torch.int64)), torch.bool)
    return cast(Load(ld.buffer, ld.index, ld.dtype, inside), dtype), inside


@register(aten.sum.dim_IntList, aten.sum.default, prims.sum.default)
def sum_(lw: Lowerer, node: torch.fx.Node, x: Any, dims: Any = None, keepdim: bool = False, *,
         dtype: Any = None, output_dtype: Any = None) -> TensorRef:
    val = lw.out_val()
    return _reduce(lw, x, _dims(x, dims), keepdim and node.target is not prims.sum.default, "sum", val, val.dtype)


@register(aten.prod.dim_int, aten.prod.default)
def prod(lw: Lowerer, node: torch.fx.Node, x: Any, dim: Any = None, keepdim: bool = False, *, dtype: Any = None) -> TensorRef:
    val = lw.out_val()
    return _reduce(lw, x, _dims(x, dim), keepdim, "prod", val, val.dtype)


def _extreme(is_max: bool, dtype: torch.dtype) -> str:
    """The reduction type of max (`is_max`) or min over `dtype`: any and all for bools."""
    if dtype == torch.bool:
        return "any" if is_max else "all"
    return "max" if is_max else "min"


@register(aten.amax, aten.amin)
def amax(lw: Lowerer, node: torch.fx.Node, x: Any, dims: Any = (), keepdim: bool = False) -> TensorRef:
    val = lw.out_val()
    rtype = _extreme(node.target is aten.amax.default, x.layout.dtype)
    return _reduce(lw, x, _dims(x, dims), keepdim, rtype, val, val.dtype)


def _arg_dtype(x: Any) -> torch.dtype:
    """What an arg reduction of `x` compares in: bools (max.dim and min.dim's indices) as int32
    (0 < 1: the first True is max's, the first False min's, as eager), other dtypes as
    `upcast_compute` says."""
    if x.layout.dtype.is_complex:
        raise Unsupported("arg reduction of a complex tensor")
    return torch.int32 if x.layout.dtype == torch.bool else upcast_compute(x.layout.dtype)


@register(aten.argmax, aten.argmin)
def argmax(lw: Lowerer, node: torch.fx.Node, x: Any, dim: Any = None, keepdim: bool = False) -> TensorRef:
    if x.layout.dtype == torch.bool:  # eager raises ("does not support bool input"): so does the fallback
        raise Unsupported("argmax/argmin of bool")
    rtype = "argmax" if node.target is aten.argmax.default else "argmin"
    val = lw.out_val()
    dims = _dims(x, dim)
    keep = keepdim and dim is not None
    return _reduce(lw, x, dims, keep, rtype, val, _arg_dtype(x))


@register(aten.max.dim, aten.min.dim)
def max_dim(lw: Lowerer, node: torch.fx.Node, x: Any, dim: int, keepdim: bool = False) -> tuple[TensorRef, TensorRef]:
    """(values, indices): a max/min and an argmax/argmin over the same rows (one kernel); over
    bools, any/all and the index of the first True/False."""
    values_val, indices_val = lw.out_val()
    is_max = node.target is aten.max.dim
    dims = _dims(x, dim)
    # never split: the indices need a whole-row pass anyway, and both fuse into one kernel
    values = _reduce(lw, x, dims, keepdim, _extreme(is_max, x.layout.dtype), values_val, values_val.dtype,
                     may_split=False)
    indices = _reduce(lw, x, dims, keepdim, "argmax" if is_max else "argmin", indices_val, _arg_dtype(x))
    return values, indices


@register(aten.max.default, aten.min.default)
def max_all(lw: Lowerer, node: torch.fx.Node, x: Any) -> TensorRef:
    val = lw.out_val()
    rtype = _extreme(node.target is aten.max.default, x.layout.dtype)
    return _reduce(lw, x, _dims(x, None), False, rtype, val, val.dtype)


@register(aten.cumsum, aten.cumprod)
def scan(lw: Lowerer, node: torch.fx.Node, x: Any, dim: int, *, dtype: Any = None) -> TensorRef:
    """Inclusive scans along `dim`: a Reduction whose result is stored at every position (of a
    0-d tensor: its value)."""
    from coil.lowering_ir.lowerer import index_symbols
    from coil.lowering_ir.nodes import Reduction

    val = lw.out_val()
    rank = len(x.layout.size)
    if rank == 0:  # one element: the scan is the value itself, in the output dtype
        return lw.pointwise(lambda p: value_of(x, p, val.dtype))
    d = dim % rank
    out = lw.new_buffer(val)
    p = index_symbols("p", rank - 1)
    r = index_symbols("r", 1)
    full = [*p[:d], r[0], *p[d:]]
    ct = upcast_compute(val.dtype)
    body = cast(load(x, full), ct)
    rtype = "cumsum" if node.target is aten.cumsum.default else "cumprod"
    ranges = tuple(s for i, s in enumerate(out.layout.size) if i != d)
    op = Reduction(lw.fresh("op"), lw.origins(), out, ranges, (out.layout.size[d],), rtype, body,
                   out.layout.index(full), ct)
    lw.operations.append(op)
    return out


@register(aten.any, aten.all)
def any_all(lw: Lowerer, node: torch.fx.Node, x: Any, dim: Any = None, keepdim: bool = False) -> TensorRef:
    val = lw.out_val()
    if val.dtype != torch.bool:
        raise Unsupported("any/all with non-bool result")
    rtype = "any" if node.target in (aten.any.default, aten.any.dim, aten.any.dims) else "all"
    return _reduce(lw, x, _dims(x, dim), keepdim, rtype, val, torch.bool)


@register(aten.mean.dim, aten.mean.default)
def mean(lw: Lowerer, node: torch.fx.Node, x: Any, dims: Any = None, keepdim: bool = False, *, dtype: Any = None) -> TensorRef:
    val = lw.out_val()
    d = _dims(x, dims)
    total = _reduce(lw, x, d, keepdim, "sum", _sum_meta(val), upcast_compute(val.dtype))
    n = sympy.Mul(*[x.layout.size[i] for i in d]) if d else sympy.Integer(1)
    ct = upcast_compute(val.dtype)
    return lw.pointwise(lambda p: cast(Op("truediv", (value_of(total, p, ct), number(n, ct)), ct), val.dtype))


def _sum_meta(val: torch.Tensor) -> TensorMeta:
    """The accumulator buffer of a mean: val's shape in the compute dtype (no fp16 overflow)."""
    return TensorMeta(tuple(val.shape), tuple(val.stride()), upcast_compute(val.dtype), val.device)


def number(n: sympy.Expr, dtype: torch.dtype) -> Value:
    """A count as a Value: a constant when static, else computed from the size symbols."""
    if n.is_Integer:
        return Constant(float(n) if dtype.is_floating_point else int(n), dtype)
    return cast(IndexValue(n, torch.int64), dtype)


def _var_mean(lw: Lowerer, x: Any, dims: Any, correction: Any, keepdim: bool, var_val: torch.Tensor,
              want_std: bool = False) -> tuple[TensorRef, TensorRef]:
    """(var or std, mean) by the centred two-pass formula; both reductions fuse into one kernel.

    A reduction the split rule splits (see `_split_plan`) is computed as partial (count, mean, M2)
    per chunk (two passes over the chunk: its sum, then its centred squares, one kernel), combined
    by Chan et al.'s formula in two passes over the partials: mean = sum(sum_c) / n, then
    M2 = sum(M2_c + n_c (mean_c - mean)^2) (one kernel). No sum-of-squares anywhere.
    """
    if not var_val.dtype.is_floating_point:
        raise Unsupported("var of non-float")
    ct = upcast_compute(var_val.dtype)
    d = _dims(x, dims)
    n = sympy.Mul(*[x.layout.size[i] for i in d]) if d else sympy.Integer(1)
    c = 1 if correction is None else correction
    mean_val = TensorMeta(tuple(var_val.shape), tuple(var_val.stride()), ct, var_val.device)
    plan = _split_plan(x, d, var_val, lw.split_rule, moments=True)
    if plan is not None:
        mean_buf, sq = _split_moments(lw, x, d, keepdim, plan, mean_val, ct, n)
    else:
        total = _reduce(lw, x, d, keepdim, "sum", mean_val, ct, may_split=False)
        mean_buf = lw.pointwise(lambda p: Op("truediv", (value_of(total, p, ct), number(n, ct)), ct), mean_val)

        def centred_square(v: Value, p: list[sympy.Symbol]) -> Value:
            diff = Op("sub", (v, load(mean_buf, list(p))), ct)
            return Op("mul", (diff, diff), ct)

        sq = _reduce(lw, x, d, keepdim, "sum", mean_val, ct, centred_square, may_split=False)
    denom: Value = Constant(float(max(int(n) - c, 0)), ct) if n.is_Integer else \
        Op("maximum", (number(n - c, ct), Constant(0.0, ct)), ct)

    def finish(p: list[sympy.Symbol]) -> Value:
        v: Value = Op("truediv", (value_of(sq, p, ct), denom), ct)
        if want_std:
            v = Op("sqrt", (v,), ct)
        return cast(v, var_val.dtype)

    out = lw.pointwise(finish, var_val)
    return out, mean_buf


def _split_moments(lw: Lowerer, x: TensorRef, d: list[int], keepdim: bool, plan: _SplitPlan, mean_val: TensorMeta,
                   ct: torch.dtype, n: Expr) -> tuple[TensorRef, TensorRef]:
    """(mean, M2) of a split var_mean: partial moments per chunk, then Chan's combination."""
    _, index = _split(x, d, keepdim)
    part = plan.partial_meta(mean_val, ct)
    zero = Constant(0.0, ct)

    def chunk_sum(p: list[sympy.Symbol], r: list[sympy.Symbol]) -> Value:
        v, inside = _chunk_value(x, plan, index, *plan.split_p(p), r, ct)
        return v if inside is None else Op("where", (inside, v, zero), ct)

    sum_c = lw.reduction(part, plan.rest_sizes(), "sum", chunk_sum, ct)

    def chunk_mean(p: Sequence[Expr]) -> Value:
        return Op("truediv", (load(sum_c, list(p)), plan.count(plan.split_p(p)[0], ct)), ct)

    mean_c = lw.pointwise(chunk_mean, part)

    def chunk_m2(p: list[sympy.Symbol], r: list[sympy.Symbol]) -> Value:
        v, inside = _chunk_value(x, plan, index, *plan.split_p(p), r, ct)
        diff = Op("sub", (v, load(mean_c, list(p))), ct)
        sq = Op("mul", (diff, diff), ct)
        return sq if inside is None else Op("where", (inside, sq, zero), ct)

    m2_c = lw.reduction(part, plan.rest_sizes(), "sum", chunk_m2, ct)
    total = lw.reduction(mean_val, plan.chunk_sizes, "sum", lambda p, r: load(sum_c, plan.partial_index(r, p)), ct)
    mean_buf = lw.pointwise(lambda p: Op("truediv", (load(total, list(p)), number(n, ct)), ct), mean_val)

    def combine(p: list[sympy.Symbol], r: list[sympy.Symbol]) -> Value:
        at = plan.partial_index(r, p)
        count = plan.count(r, ct)
        delta = Op("sub", (Op("truediv", (load(sum_c, at), count), ct), load(mean_buf, list(p))), ct)
        spread = Op("mul", (count, Op("mul", (delta, delta), ct)), ct)
        return Op("add", (load(m2_c, at), spread), ct)

    return mean_buf, lw.reduction(mean_val, plan.chunk_sizes, "sum", combine, ct)


@register(aten.var_mean.correction)
def var_mean(lw: Lowerer, node: torch.fx.Node, x: Any, dims: Any = None, *, correction: Any = None, keepdim: bool = False) -> tuple[TensorRef, TensorRef]:
    var_val, mean_val = lw.out_val()
    var, mean_ct = _var_mean(lw, x, dims, correction, keepdim, var_val)
    if mean_val.dtype != mean_ct.layout.dtype:
        mean_out = lw.pointwise(lambda p: value_of(mean_ct, p, mean_val.dtype), mean_val)
        return var, mean_out
    return var, mean_ct


@register(aten.var.correction, aten.std.correction)
def var(lw: Lowerer, node: torch.fx.Node, x: Any, dims: Any = None, *, correction: Any = None, keepdim: bool = False) -> TensorRef:
    return _var_mean(lw, x, dims, correction, keepdim, lw.out_val(), node.target is aten.std.correction)[0]
