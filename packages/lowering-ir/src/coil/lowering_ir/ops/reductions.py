"""Reduction lowerings: sum, prod, amax/amin, any/all, mean, var/std/var_mean (two-pass)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sympy
import torch
import torch.fx
from coil.lowering_ir.errors import Unsupported
from coil.lowering_ir.knobs import SPLIT_MAX_ROWS, split_reduction_min
from coil.lowering_ir.layout import Expr
from coil.lowering_ir.lowerer import Lowerer, TensorMeta
from coil.lowering_ir.nodes import TensorRef, load
from coil.lowering_ir.ops.common import cast, upcast_compute, value_of
from coil.lowering_ir.registry import register
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
            body_dtype: torch.dtype, transform: Any = None) -> TensorRef:
    rranges, index = _split(x, dims, keepdim)
    acc = upcast_compute(body_dtype) if rtype in ("sum", "prod") else body_dtype
    rnumel = sympy.Mul(*rranges) if rranges else sympy.Integer(1)
    xnumel = sympy.Mul(*[sympy.sympify(s) for s in val.shape]) if val.dim() else sympy.Integer(1)
    if (rtype in SPLITTABLE and rnumel.is_Integer and xnumel.is_Integer and int(rnumel) >= split_reduction_min()
            and int(xnumel) <= SPLIT_MAX_ROWS and int(rnumel) >= 4):
        return _split_reduce(lw, x, rranges, index, rtype, val, body_dtype, acc, transform)

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


def _split_reduce(lw: Lowerer, x: TensorRef, rranges: list[Expr], index: Any, rtype: str, val: torch.Tensor | TensorMeta,
                  body_dtype: torch.dtype, acc: torch.dtype, transform: Any) -> TensorRef:
    """Two kernels: partial reductions over S chunks of each row, then a reduction of the chunks."""
    total = int(sympy.Mul(*rranges))
    chunks = 1
    while chunks * chunks < total and chunks < 1024:
        chunks *= 2
    width = -(-total // chunks)
    strides = [int(sympy.Mul(*rranges[k + 1:])) if k + 1 < len(rranges) else 1 for k in range(len(rranges))]
    ident = SPLITTABLE[rtype]
    ident_value = _identity(ident, body_dtype)
    partial_val = TensorMeta.contiguous([*val.shape, chunks], acc, val.device)
    nout = val.dim()

    def body1(p: list[sympy.Symbol], r: list[sympy.Symbol]) -> Value:
        flat = p[nout] * width + r[0]
        inside = Op("lt", (IndexValue(flat, torch.int64), Constant(total, torch.int64)), torch.bool)
        rvars = [sympy.Mod(sympy.floor(flat / st), n) if st != 1 else sympy.Mod(flat, n)
                 for st, n in zip(strides, rranges, strict=True)]
        ld = load(x, index(p[:nout], rvars))
        v = cast(Load(ld.buffer, ld.index, ld.dtype, inside), body_dtype)
        if transform is not None:
            v = transform(v, p[:nout])
        return Op("where", (inside, v, Constant(ident_value, v.dtype)), v.dtype)

    partial = lw.reduction(partial_val, [sympy.Integer(width)], rtype, body1, acc)

    def body2(p: list[sympy.Symbol], r: list[sympy.Symbol]) -> Value:
        return load(partial, [*p, r[0]])

    return lw.reduction(val, [sympy.Integer(chunks)], rtype, body2, acc)


@register(aten.sum.dim_IntList, aten.sum.default, prims.sum.default)
def sum_(lw: Lowerer, node: torch.fx.Node, x: Any, dims: Any = None, keepdim: bool = False, *,
         dtype: Any = None, output_dtype: Any = None) -> TensorRef:
    val = lw.out_val()
    return _reduce(lw, x, _dims(x, dims), keepdim and node.target is not prims.sum.default, "sum", val, val.dtype)


@register(aten.prod.dim_int, aten.prod.default)
def prod(lw: Lowerer, node: torch.fx.Node, x: Any, dim: Any = None, keepdim: bool = False, *, dtype: Any = None) -> TensorRef:
    val = lw.out_val()
    return _reduce(lw, x, _dims(x, dim), keepdim, "prod", val, val.dtype)


@register(aten.amax, aten.amin)
def amax(lw: Lowerer, node: torch.fx.Node, x: Any, dims: Any = (), keepdim: bool = False) -> TensorRef:
    val = lw.out_val()
    rtype = "max" if node.target is aten.amax.default else "min"
    if x.layout.dtype == torch.bool:  # the max of bools is any, the min all
        rtype = "any" if rtype == "max" else "all"
    return _reduce(lw, x, _dims(x, dims), keepdim, rtype, val, val.dtype)


@register(aten.argmax, aten.argmin)
def argmax(lw: Lowerer, node: torch.fx.Node, x: Any, dim: Any = None, keepdim: bool = False) -> TensorRef:
    if x.layout.dtype == torch.bool or x.layout.dtype.is_complex:
        raise Unsupported("argmax of bool/complex")
    rtype = "argmax" if node.target is aten.argmax.default else "argmin"
    val = lw.out_val()
    dims = _dims(x, dim)
    keep = keepdim and dim is not None
    return _reduce(lw, x, dims, keep, rtype, val, upcast_compute(x.layout.dtype))


@register(aten.max.dim, aten.min.dim)
def max_dim(lw: Lowerer, node: torch.fx.Node, x: Any, dim: int, keepdim: bool = False) -> tuple[TensorRef, TensorRef]:
    """(values, indices): a max/min and an argmax/argmin over the same rows (one kernel)."""
    if x.layout.dtype == torch.bool:
        raise Unsupported("max.dim of bool")
    values_val, indices_val = lw.out_val()
    is_max = node.target is aten.max.dim
    dims = _dims(x, dim)
    values = _reduce(lw, x, dims, keepdim, "max" if is_max else "min", values_val, values_val.dtype)
    indices = _reduce(lw, x, dims, keepdim, "argmax" if is_max else "argmin", indices_val, upcast_compute(x.layout.dtype))
    return values, indices


@register(aten.max.default, aten.min.default)
def max_all(lw: Lowerer, node: torch.fx.Node, x: Any) -> TensorRef:
    if x.layout.dtype == torch.bool:
        raise Unsupported("max of bool")
    val = lw.out_val()
    rtype = "max" if node.target is aten.max.default else "min"
    return _reduce(lw, x, _dims(x, None), False, rtype, val, val.dtype)


@register(aten.cumsum, aten.cumprod)
def scan(lw: Lowerer, node: torch.fx.Node, x: Any, dim: int, *, dtype: Any = None) -> TensorRef:
    """Inclusive scans along `dim`: a Reduction whose result is stored at every position."""
    from coil.lowering_ir.lowerer import index_symbols
    from coil.lowering_ir.nodes import Reduction

    val = lw.out_val()
    rank = len(x.layout.size)
    if rank == 0:
        raise Unsupported("scan of a 0-d tensor")
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
    """(var or std, mean) by the centred two-pass formula; both reductions fuse into one kernel."""
    if not var_val.dtype.is_floating_point:
        raise Unsupported("var of non-float")
    ct = upcast_compute(var_val.dtype)
    d = _dims(x, dims)
    n = sympy.Mul(*[x.layout.size[i] for i in d]) if d else sympy.Integer(1)
    c = 1 if correction is None else correction
    mean_val = TensorMeta(tuple(var_val.shape), tuple(var_val.stride()), ct, var_val.device)
    total = _reduce(lw, x, d, keepdim, "sum", mean_val, ct)
    mean_buf = lw.pointwise(lambda p: Op("truediv", (value_of(total, p, ct), number(n, ct)), ct), mean_val)

    def centred_square(v: Value, p: list[sympy.Symbol]) -> Value:
        diff = Op("sub", (v, load(mean_buf, list(p))), ct)
        return Op("mul", (diff, diff), ct)

    sq = _reduce(lw, x, d, keepdim, "sum", mean_val, ct, centred_square)
    denom: Value = Constant(float(max(int(n) - c, 0)), ct) if n.is_Integer else \
        Op("maximum", (number(n - c, ct), Constant(0.0, ct)), ct)

    def finish(p: list[sympy.Symbol]) -> Value:
        v: Value = Op("truediv", (value_of(sq, p, ct), denom), ct)
        if want_std:
            v = Op("sqrt", (v,), ct)
        return cast(v, var_val.dtype)

    out = lw.pointwise(finish, var_val)
    return out, mean_buf


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
