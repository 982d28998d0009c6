"""Lowerings that read data-dependent or piecewise positions: cat, constant_pad_nd, gather,
index_select, index.Tensor (advanced indexing), embedding.

A cat of at most `CAT_MAX_POINTWISE_PARTS` tensors is a Pointwise choosing among masked loads
(every element evaluates each part's load, all but one masked off); one of more parts is ATen's
cat, an extern: its work is one pass over the output whatever the number of parts (the steps
of an unrolled recurrence stacked together: hundreds of parts).

They use masked loads (nothing is read where the mask is false) and indirect loads (an index
computed from another tensor's values). Indices are wrapped like PyTorch (negative counts from the
end) where the op allows negatives; out-of-range indices are not checked on the device.
"""

from __future__ import annotations

from typing import Any

import sympy
import torch
import torch.fx
from coil.lowering_ir.errors import Unsupported
from coil.lowering_ir.layout import Expr
from coil.lowering_ir.lowerer import Lowerer
from coil.lowering_ir.nodes import TensorRef, load
from coil.lowering_ir.ops.common import cast, is_tensor, value_of
from coil.lowering_ir.ops.wide_accumulate import accumulation_target, finish
from coil.lowering_ir.registry import register
from coil.lowering_ir.values import Constant, IndexValue, Load, Op, Value, indirect_symbol

aten = torch.ops.aten

CAT_MAX_POINTWISE_PARTS = 16


def _bool(name: str, *args: Value) -> Value:
    return Op(name, tuple(args), torch.bool)


def _int(e: Expr | int) -> Value:
    """An int64 Value for a size or bound: a Constant when known, else the expression (its
    symbols become kernel arguments)."""
    e = sympy.sympify(e)
    return Constant(int(e), torch.int64) if isinstance(e, sympy.Integer) else IndexValue(e, torch.int64)


def _in_range(i: Expr, lo: Expr | int, hi: Expr | int) -> Value:
    """lo <= i < hi as a bool Value, for a loop variable i (so i >= 0 needs no test)."""
    iv = IndexValue(i, torch.int64)
    upper = _bool("lt", iv, _int(hi))
    lo = sympy.sympify(lo)
    if lo.is_nonpositive:
        return upper
    return _bool("logical_and", _bool("ge", iv, _int(lo)), upper)


def _masked(x: TensorRef, idx: list[Expr], mask: Value, dt: torch.dtype) -> Value:
    ld = load(x, idx)
    return cast(Load(ld.buffer, ld.index, ld.dtype, mask), dt)


@register(aten.cat.default)
def cat(lw: Lowerer, node: torch.fx.Node, tensors: Any, dim: int = 0) -> TensorRef:
    val = lw.out_val()
    dt = val.dtype
    rank = val.dim()
    parts = [t for t in tensors if is_tensor(t) and not (len(t.layout.size) == 1 and t.layout.size[0] == 0 and rank != 1)]
    if not parts or any(len(t.layout.size) != rank for t in parts):
        raise Unsupported("cat of tensors of different rank")
    d = dim % rank
    if len(parts) > CAT_MAX_POINTWISE_PARTS:
        return lw.extern(aten.cat.default, (list(tensors), dim), {}, fallback=False)  # type: ignore[no-any-return]

    def body(p: list[sympy.Symbol]) -> Value:
        offsets: list[Expr] = []
        acc: Expr = sympy.Integer(0)
        for t in parts:
            offsets.append(acc)
            acc = acc + t.layout.size[d]
        out: Value | None = None
        for t, off in reversed(list(zip(parts, offsets, strict=True))):
            n = t.layout.size[d]
            idx = list(p)
            idx[d] = p[d] - off
            inside = _in_range(p[d], off, off + n)
            v = _masked(t, idx, inside, dt)
            out = v if out is None else Op("where", (inside, v, out), dt)
        assert out is not None
        return out

    return lw.pointwise(body)


@register(aten.constant_pad_nd.default)
def constant_pad_nd(lw: Lowerer, node: torch.fx.Node, x: Any, pad: Any, value: Any = 0) -> TensorRef:
    if not is_tensor(x) or not all(isinstance(v, int) for v in pad):
        raise Unsupported("symbolic padding")
    val = lw.out_val()
    dt = val.dtype
    rank = len(x.layout.size)
    lows = [0] * rank
    for k in range(len(pad) // 2):
        lows[rank - 1 - k] = pad[2 * k]

    def body(p: list[sympy.Symbol]) -> Value:
        idx: list[Expr] = [pi - lo for pi, lo in zip(p, lows, strict=True)]
        mask: Value | None = None
        for d in range(rank):
            if lows[d] == 0 and val.shape[d] == x.layout.size[d]:
                continue
            c = _in_range(p[d], lows[d], lows[d] + x.layout.size[d])
            mask = c if mask is None else _bool("logical_and", mask, c)
        if mask is None:
            return value_of(x, idx, dt)
        return Op("where", (mask, _masked(x, idx, mask, dt), cast(Constant(value, torch.float64 if isinstance(value, float) else torch.int64), dt)), dt)

    return lw.pointwise(body)


def _index_value(t: TensorRef, idx: list[Expr], size: Expr, wrap: bool) -> Value:
    """An index tensor's value at idx, as int64, negative values wrapped by `size` if `wrap`."""
    v = cast(load(t, idx), torch.int64)
    if not wrap:
        return v
    neg = _bool("lt", v, Constant(0, torch.int64))
    return Op("where", (neg, Op("add", (v, _int(size)), torch.int64), v), torch.int64)


def _indirect_load(x: TensorRef, idx: list[Expr | None], values: dict[int, Value], dt: torch.dtype) -> Value:
    """Load x where dims in `values` take data-dependent indices."""
    bound: list[tuple[sympy.Symbol, Value]] = []
    full: list[Expr] = []
    for d, i in enumerate(idx):
        if d in values:
            s = indirect_symbol(x.layout.size[d])  # a valid index lies in [0, size of dim d)
            bound.append((s, values[d]))
            full.append(s)
        else:
            assert i is not None
            full.append(i)
    ld = load(x, full)
    return cast(Load(ld.buffer, ld.index, ld.dtype, None, tuple(bound)), dt)


@register(aten.index_select.default)
def index_select(lw: Lowerer, node: torch.fx.Node, x: Any, dim: int, index: Any) -> TensorRef:
    if not (is_tensor(x) and is_tensor(index)):
        raise Unsupported("index_select operands")
    val = lw.out_val()
    rank = len(x.layout.size)
    d = dim % max(rank, 1)

    def body(p: list[sympy.Symbol]) -> Value:
        if rank == 0:
            return value_of(x, [], val.dtype)
        ival = _index_value(index, [p[d]] if index.layout.size else [], x.layout.size[d], True)
        return _indirect_load(x, list(p), {d: ival}, val.dtype)

    return lw.pointwise(body)


@register(aten.gather.default)
def gather(lw: Lowerer, node: torch.fx.Node, x: Any, dim: int, index: Any, sparse_grad: bool = False) -> TensorRef:
    if not (is_tensor(x) and is_tensor(index)):
        raise Unsupported("gather operands")
    val = lw.out_val()
    rank = len(x.layout.size)
    if rank == 0:
        raise Unsupported("gather of a 0-d tensor")
    d = dim % rank

    def body(p: list[sympy.Symbol]) -> Value:
        ival = _index_value(index, list(p), x.layout.size[d], True)
        return _indirect_load(x, list(p), {d: ival}, val.dtype)

    return lw.pointwise(body)


def _advanced_positions(x: TensorRef, idx_list: list[Any], p: list[sympy.Symbol], start: int, brank: int
                        ) -> tuple[list[Expr | None], dict[int, Value]]:
    """Where output position p of x[idx_list] reads x (the advanced-indexing rule).

    The broadcast index dims sit at `start` (brank of them) in the output; the other dims map to
    x's unindexed dims in order. Returns the index of each x dim (None where it is loaded from an
    index tensor) and, for those dims, the loaded index Values (negatives wrapped).
    """
    bvars = list(p[start:start + brank])
    rest = list(p[:start]) + list(p[start + brank:])
    idx: list[Expr | None] = []
    values: dict[int, Value] = {}
    r = 0
    for d, i in enumerate(idx_list):
        if i is None:
            idx.append(rest[r])
            r += 1
        else:
            size = i.layout.size
            tail = bvars[len(bvars) - len(size):]
            ii = [sympy.Integer(0) if s == 1 else v for s, v in zip(size, tail, strict=True)]
            values[d] = _index_value(i, ii, x.layout.size[d], True)
            idx.append(None)
    return idx, values


@register(aten.index.Tensor)
def index_tensor(lw: Lowerer, node: torch.fx.Node, x: Any, indices: Any) -> TensorRef:
    """Advanced indexing x[i0, i1, ...] with some indices None (full slices)."""
    if not is_tensor(x):
        raise Unsupported("index of a non-tensor")
    if any(i is not None and not is_tensor(i) for i in indices):
        raise Unsupported("index with non-tensor indices")
    if any(i is not None and i.layout.dtype == torch.bool for i in indices):
        raise Unsupported("boolean mask indexing (data-dependent shape)")
    val = lw.out_val()
    rank = len(x.layout.size)
    idx_list = list(indices) + [None] * (rank - len(indices))
    pos = [d for d, i in enumerate(idx_list) if i is not None]
    bshape_rank = max(len(idx_list[d].layout.size) for d in pos)
    adjacent = pos == list(range(pos[0], pos[-1] + 1))
    start = pos[0] if adjacent else 0

    def body(p: list[sympy.Symbol]) -> Value:
        idx, values = _advanced_positions(x, idx_list, p, start, bshape_rank)
        return _indirect_load(x, idx, values, val.dtype)

    return lw.pointwise(body)


@register(aten.embedding.default)
def embedding(lw: Lowerer, node: torch.fx.Node, weight: Any, indices: Any, *args: Any) -> TensorRef:
    if not (is_tensor(weight) and is_tensor(indices)):
        raise Unsupported("embedding operands")
    val = lw.out_val()
    nb = len(indices.layout.size)

    def body(p: list[sympy.Symbol]) -> Value:
        ival = _index_value(indices, list(p[:nb]), weight.layout.size[0], False)
        return _indirect_load(weight, [None, p[nb]], {0: ival}, val.dtype)

    return lw.pointwise(body)


def _scatter_op(lw: Lowerer, base: TensorRef | None, ranges: list[Expr], target_idx: Any,
                values: dict[int, Value], value_fn: Any, accumulate: bool) -> TensorRef:
    """A Scatter writing a copy of `base`; target_idx(p) -> (index per dim or None, loaded
    indices by dim) locates each source point's target."""
    from coil.lowering_ir.lowerer import index_symbols
    from coil.lowering_ir.nodes import Scatter

    val = lw.out_val()
    out, base = accumulation_target(lw, base, val, accumulate)
    p = index_symbols("p", len(ranges))
    idx, vals = target_idx(p) if callable(target_idx) else (target_idx, values)
    bound: list[tuple[sympy.Symbol, Value]] = []
    full: list[Expr] = []
    for d, i in enumerate(idx):
        if d in vals:
            s = indirect_symbol()
            bound.append((s, vals[d]))
            full.append(s)
        else:
            full.append(i)
    ld = load(out, full)
    target = Load(ld.buffer, ld.index, ld.dtype, None, tuple(bound))
    value = cast(cast(value_fn(p), val.dtype), out.layout.dtype)  # rounded as eager's values are
    op = Scatter(lw.fresh("op"), lw.origins(), out, base, tuple(ranges), target, value, accumulate)
    lw.operations.append(op)
    return finish(lw, out, val)


@register(aten.index_put.default)
def index_put(lw: Lowerer, node: torch.fx.Node, x: Any, indices: Any, values: Any, accumulate: bool = False) -> TensorRef:
    """x[indices] = values (or += with accumulate); indices as in index.Tensor."""
    if not is_tensor(x) or any(i is not None and (not is_tensor(i) or i.layout.dtype == torch.bool) for i in indices):
        raise Unsupported("index_put with boolean or non-tensor indices")
    rank = len(x.layout.size)
    idx_list = list(indices) + [None] * (rank - len(indices))
    pos = [d for d, i in enumerate(idx_list) if i is not None]
    if not pos:
        raise Unsupported("index_put without indices")
    bsize = _broadcast([idx_list[d].layout.size for d in pos])
    adjacent = pos == list(range(pos[0], pos[-1] + 1))
    start = pos[0] if adjacent else 0
    rest_sizes = [x.layout.size[d] for d, i in enumerate(idx_list) if i is None]
    ranges = [*rest_sizes[:start], *bsize, *rest_sizes[start:]]
    dt = lw.out_val().dtype

    def target(p: list[sympy.Symbol]) -> tuple[list[Expr | None], dict[int, Value]]:
        return _advanced_positions(x, idx_list, p, start, len(bsize))

    return _scatter_op(lw, x, ranges, target, {}, lambda p: value_of(values, list(p), dt), accumulate)


def _broadcast(shapes: list[tuple[Expr, ...]]) -> list[Expr]:
    rank = max(len(s) for s in shapes)
    out: list[Expr] = []
    for k in range(rank):
        sizes = [s[len(s) - rank + k] for s in shapes if len(s) - rank + k >= 0]
        big = [s for s in sizes if s != 1]
        out.append(big[0] if big else sympy.Integer(1))
    return out


@register(aten.scatter.src, aten.scatter.value, aten.scatter_add.default)
def scatter(lw: Lowerer, node: torch.fx.Node, x: Any, dim: int, index: Any, src: Any, **kw: Any) -> TensorRef:
    """out = x; out[..., index[p], ...] (+)= src[p] along `dim`, for p over index's shape."""
    if kw or not (is_tensor(x) and is_tensor(index)) or len(index.layout.size) != len(x.layout.size):
        raise Unsupported("scatter variant")
    rank = len(x.layout.size)
    if rank == 0:
        raise Unsupported("scatter into a 0-d tensor")
    d = dim % rank
    dt = lw.out_val().dtype

    def target(p: list[sympy.Symbol]) -> tuple[list[Expr | None], dict[int, Value]]:
        idx: list[Expr | None] = [pi if k != d else None for k, pi in enumerate(p)]
        return idx, {d: _index_value(index, list(p), x.layout.size[d], True)}

    accumulate = node.target is aten.scatter_add.default
    return _scatter_op(lw, x, list(index.layout.size), target, {}, lambda p: value_of(src, list(p), dt), accumulate)
