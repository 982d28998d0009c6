"""max_pool2d, forward and backward, as Pointwise nodes over unrolled windows; indices kept small.

**Forward.** Output element (..., oh, ow) folds its kH*kW window in window order (kh, then kw),
as eager's kernels do: the running max starts at -inf and element v replaces it when
`v > max or isnan(v)`. So the first maximum wins a tie, the last NaN of a window wins (once the
max is NaN only another NaN replaces it), and a window of -infs keeps eager's starting index,
its first in-bounds position. Padding positions are masked loads that never win. Each window
element is one masked load (no loop), so windows are bounded (`pool_common.MAX_WINDOW`
elements); larger ones, bool and complex run as ATen fallbacks. Values compare in float32 for
half types (exact: the result is one of the inputs). Integer inputs start from the dtype's
minimum, as eager does, and have no NaN test.

**Low-memory indices (the training form).** Eager's `max_pool2d_with_indices` returns int64 flat
indices `h * W + w`, and autograd saves them for the backward: 8 bytes per pooled element.
coil's decomposition table rewrites the op, while AOTAutograd traces the joint graph (so before
the min-cut partition), into two ops of a `coil` torch.library namespace:

    vals, offsets = coil.max_pool2d_offsets(x, k, s, p, d, ceil_mode)      # offsets: int8
    indices = coil.max_pool2d_offsets_to_indices(offsets, k, s, p, d, W)  # int64, as eager

`offsets` is each maximum's position in its window, `kh * kW + kw` (< MAX_WINDOW <= 127).
Only the backward reads `indices`, so the forward does not need the conversion: the partitioner
places it in the backward, and the cheapest cut is then the int8 `offsets` (1 byte per element;
the pooling op itself is not on the partitioner's recompute allow-list, so its outputs are
saved, not recomputed). Autograd still differentiates the original op (the table applies below
autograd), so the backward is eager's `max_pool2d_with_indices_backward`. A post-grad FX pass
could not do this: after the partition the int64 tensor is already a saved output; only a
rewrite before the partition changes what is saved, and the decomposition table is coil's hook
there. Both ops have eager kernels (used where a lowering falls back) and fake kernels.

**Backward.** `grad_input[..., h, w]` gathers: for each window position (kh, kw) at most one
output (oh, ow) holds (h, w) there (`oh = (h + pH - kh*dH) / sH` when that is an integer in
range); its gradient counts when its recorded index is `h * W + w`. The candidates are summed in
(oh, ow) order, as eager's scatter adds them, in float32 for half types: no atomics,
deterministic. When `indices` is `max_pool2d_offsets_to_indices(offsets)` (always, after the
rewrite), the lowering reads the int8 offsets directly and compares them with the constant
`kh * kW + kw`, so the int64 indices are never materialised (their Pointwise is unread and
dropped). The backward op still takes `x` (for its shape only), so the partitioner keeps `x`
saved, as eager does (in conv-bn-relu-pool stems relu's own backward saves it anyway).
"""

from __future__ import annotations

import math
from typing import Any

import sympy
import torch
import torch.fx
from coil.lowering_ir.errors import Unsupported
from coil.lowering_ir.layout import Expr, as_expr
from coil.lowering_ir.lowerer import Lowerer
from coil.lowering_ir.nodes import TensorRef, load
from coil.lowering_ir.ops.common import cast, is_tensor, upcast_compute
from coil.lowering_ir.ops.pool_common import (
    Pool2d,
    and_,
    axis,
    candidate,
    checked,
    ge,
    guard,
    i64,
    iv,
    masked,
    real_dtype,
)
from coil.lowering_ir.registry import register
from coil.lowering_ir.values import Constant, Op, Value

aten = torch.ops.aten


def supported(x: torch.Tensor, geo: Pool2d) -> bool:
    """Does the native lowering (and so the int8 rewrite) cover pooling `x` with `geo`?"""
    return real_dtype(x.dtype) and x.dim() in (3, 4) and geo.valid()


# -- the coil ops and the decomposition ----------------------------------------------------------

_LIB = torch.library.Library("coil", "FRAGMENT")  # type: ignore[no-untyped-call]
_LIB.define("max_pool2d_offsets(Tensor self, int[2] kernel_size, int[2] stride, int[2] padding, "  # type: ignore[no-untyped-call]
            "int[2] dilation, bool ceil_mode) -> (Tensor, Tensor)")
_LIB.define("max_pool2d_offsets_to_indices(Tensor offsets, int[2] kernel_size, int[2] stride, "  # type: ignore[no-untyped-call]
            "int[2] padding, int[2] dilation, SymInt input_width) -> Tensor")


def _window_starts(n: Any, stride: int, pad: int, dim: int, rank: int, device: torch.device) -> torch.Tensor:
    """oh * stride - pad for oh < n, shaped to broadcast along dim `dim` of a rank-`rank` tensor."""
    shape = [1] * rank
    shape[dim] = -1
    return (torch.arange(n, device=device) * stride - pad).view(shape)


def _offsets_eager(x: torch.Tensor, kernel_size: list[int], stride: list[int], padding: list[int],
                   dilation: list[int], ceil_mode: bool) -> tuple[torch.Tensor, torch.Tensor]:
    vals, idx = aten.max_pool2d_with_indices(x, kernel_size, stride, padding, dilation, ceil_mode)
    width, rank = x.shape[-1], idx.dim()
    h0 = _window_starts(idx.shape[-2], stride[0], padding[0], rank - 2, rank, x.device)
    w0 = _window_starts(idx.shape[-1], stride[1], padding[1], rank - 1, rank, x.device)
    kh = torch.div(idx // width - h0, dilation[0], rounding_mode="floor")
    kw = torch.div(idx % width - w0, dilation[1], rounding_mode="floor")
    return vals, (kh * kernel_size[1] + kw).to(torch.int8)


def _offsets_fake(x: torch.Tensor, kernel_size: list[int], stride: list[int], padding: list[int],
                  dilation: list[int], ceil_mode: bool) -> tuple[torch.Tensor, torch.Tensor]:
    vals, idx = aten.max_pool2d_with_indices(x, kernel_size, stride, padding, dilation, ceil_mode)
    return vals, torch.empty_like(idx, dtype=torch.int8)


def _to_indices_eager(offsets: torch.Tensor, kernel_size: list[int], stride: list[int], padding: list[int],
                      dilation: list[int], input_width: int) -> torch.Tensor:
    off, rank = offsets.to(torch.int64), offsets.dim()
    h0 = _window_starts(offsets.shape[-2], stride[0], padding[0], rank - 2, rank, offsets.device)
    w0 = _window_starts(offsets.shape[-1], stride[1], padding[1], rank - 1, rank, offsets.device)
    h = h0 + (off // kernel_size[1]) * dilation[0]
    w = w0 + (off % kernel_size[1]) * dilation[1]
    return h * input_width + w


def _to_indices_fake(offsets: torch.Tensor, kernel_size: list[int], stride: list[int], padding: list[int],
                     dilation: list[int], input_width: int) -> torch.Tensor:
    return torch.empty_like(offsets, dtype=torch.int64)


_LIB.impl("max_pool2d_offsets", _offsets_eager, "CompositeExplicitAutograd")  # type: ignore[no-untyped-call]
_LIB.impl("max_pool2d_offsets_to_indices", _to_indices_eager, "CompositeExplicitAutograd")  # type: ignore[no-untyped-call]
torch.library.register_fake("coil::max_pool2d_offsets", _offsets_fake, lib=_LIB)
torch.library.register_fake("coil::max_pool2d_offsets_to_indices", _to_indices_fake, lib=_LIB)

MAX_POOL2D_OFFSETS = torch.ops.coil.max_pool2d_offsets.default
OFFSETS_TO_INDICES = torch.ops.coil.max_pool2d_offsets_to_indices.default


def max_pool2d_with_int8_offsets(self: torch.Tensor, kernel_size: Any, stride: Any = (), padding: Any = 0,
                                 dilation: Any = 1, ceil_mode: bool = False) -> Any:
    """The decomposition of `aten.max_pool2d_with_indices` in coil's table (see the module
    docstring; parameters named as in the ATen schema): the same values and int64 indices,
    through int8 window offsets, which are what the partitioner saves for the backward.
    NotImplemented (the op stays whole: native or an ATen fallback) where the pooling lowering
    does not apply."""
    try:
        geo = Pool2d.of(kernel_size, stride, padding, dilation)
    except Unsupported:
        return NotImplemented
    if not supported(self, geo):
        return NotImplemented
    k, s, p, d = geo.args()
    vals, offsets = MAX_POOL2D_OFFSETS(self, k, s, p, d, bool(ceil_mode))
    return vals, OFFSETS_TO_INDICES(offsets, k, s, p, d, self.shape[-1])


# -- forward -------------------------------------------------------------------------------------


def _first_start(o: Expr, k: int, s: int, pad: int, d: int) -> Value:
    """Eager's starting window position along an axis: the first j with o*s - pad + j*d >= 0."""
    safe = min(-(-pad // d), k - 1)  # from here on every j is >= 0
    out: Value = i64(safe)
    for j in reversed(range(safe)):
        out = Op("where", (ge(o * s - pad + j * d, 0), i64(j), out), torch.int64)
    return out


def _fold(x: TensorRef, geo: Pool2d, p: list[sympy.Symbol], n_out: tuple[Expr, Expr]) -> tuple[Value, Value]:
    """The window max at output position p and its window offset kh * kW + kw (int64)."""
    (kh_n, kw_n), (sh, sw), (ph, pw), (dh, dw) = geo.kernel, geo.stride, geo.padding, geo.dilation
    size = x.layout.size
    lead, oh, ow = p[:-2], p[-2], p[-1]
    rows = axis(oh, n_out[0], size[-2], kh_n, sh, ph, dh)
    cols = axis(ow, n_out[1], size[-1], kw_n, sw, pw, dw)
    dt = x.layout.dtype
    ct = upcast_compute(dt)
    floating = dt.is_floating_point
    best: Value = Constant(-math.inf if floating else torch.iinfo(dt).min, ct)
    start_h = Op("mul", (_first_start(oh, kh_n, sh, ph, dh), i64(kw_n)), torch.int64)
    off: Value = Op("add", (start_h, _first_start(ow, kw_n, sw, pw, dw)), torch.int64)
    for kh, (h, hcond) in enumerate(rows):
        for kw, (w, wcond) in enumerate(cols):
            valid = and_(hcond, wcond)
            v = cast(masked(x, [*lead, h, w], valid), ct)
            bigger: Value = Op("gt", (v, best), torch.bool)
            if floating:
                bigger = Op("logical_or", (bigger, Op("isnan", (v,), torch.bool)), torch.bool)
            take = guard(valid, bigger)
            best = Op("where", (take, v, best), ct)
            off = Op("where", (take, i64(kh * kw_n + kw), off), torch.int64)
    return best, off


def _flat_index(off: Value, geo: Pool2d, p: list[sympy.Symbol], width: Expr) -> Value:
    """Window offset `off` (int64) at output position p -> eager's flat index h * W + w."""
    (_, kw_n), (sh, sw), (ph, pw), (dh, dw) = geo.kernel, geo.stride, geo.padding, geo.dilation
    t = torch.int64
    kh = Op("floordiv", (off, i64(kw_n)), t)
    kw = Op("sub", (off, Op("mul", (kh, i64(kw_n)), t)), t)
    h = Op("add", (iv(p[-2] * sh - ph), Op("mul", (kh, i64(dh)), t)), t)
    w = Op("add", (iv(p[-1] * sw - pw), Op("mul", (kw, i64(dw)), t)), t)
    return Op("add", (Op("mul", (h, iv(width)), t), w), t)


def _out_hw(val: Any) -> tuple[Expr, Expr]:
    return as_expr(val.shape[-2]), as_expr(val.shape[-1])


@register(aten.max_pool2d_with_indices.default)
def max_pool2d_with_indices(lw: Lowerer, node: torch.fx.Node, x: Any, kernel_size: Any, stride: Any = (),
                            padding: Any = 0, dilation: Any = 1, ceil_mode: bool = False) -> tuple[TensorRef, TensorRef]:
    """(values, int64 flat indices), as eager. Used where the decomposition did not run."""
    geo = checked(x, Pool2d.of(kernel_size, stride, padding, dilation), "max_pool2d")
    vval, ival = lw.out_val()
    n_out = _out_hw(vval)
    width = x.layout.size[-1]
    vals = lw.pointwise(lambda p: cast(_fold(x, geo, p, n_out)[0], vval.dtype), vval)
    idx = lw.pointwise(lambda p: _flat_index(_fold(x, geo, p, n_out)[1], geo, p, width), ival)
    return vals, idx


@register(MAX_POOL2D_OFFSETS)
def max_pool2d_offsets(lw: Lowerer, node: torch.fx.Node, x: Any, kernel_size: Any, stride: Any, padding: Any,
                       dilation: Any, ceil_mode: bool) -> tuple[TensorRef, TensorRef]:
    """(values, int8 window offsets): two Pointwise nodes over the same windows (the scheduler
    fuses them; only the first is left where nothing reads the offsets)."""
    geo = checked(x, Pool2d.of(kernel_size, stride, padding, dilation), "max_pool2d")
    vval, oval = lw.out_val()
    n_out = _out_hw(vval)
    vals = lw.pointwise(lambda p: cast(_fold(x, geo, p, n_out)[0], vval.dtype), vval)
    offs = lw.pointwise(lambda p: cast(_fold(x, geo, p, n_out)[1], torch.int8), oval)
    return vals, offs


@register(OFFSETS_TO_INDICES)
def max_pool2d_offsets_to_indices(lw: Lowerer, node: torch.fx.Node, offsets: Any, kernel_size: Any, stride: Any,
                                  padding: Any, dilation: Any, input_width: Any) -> TensorRef:
    """Eager's int64 flat indices from the int8 window offsets (one Pointwise)."""
    if not is_tensor(offsets):
        raise Unsupported("offsets of a non-tensor")
    geo = Pool2d.of(kernel_size, stride, padding, dilation)
    width = as_expr(input_width)
    return lw.pointwise(lambda p: _flat_index(cast(load(offsets, list(p)), torch.int64), geo, p, width))


# -- backward ------------------------------------------------------------------------------------


def _offsets_producer(lw: Lowerer, node: torch.fx.Node, geo: Pool2d, width: Expr) -> TensorRef | None:
    """The int8 offsets behind the backward's `indices` argument, when it is
    max_pool2d_offsets_to_indices of the same geometry and input width; else None."""
    src = node.args[7] if len(node.args) > 7 else node.kwargs.get("indices")
    if not isinstance(src, torch.fx.Node) or src.target is not OFFSETS_TO_INDICES:
        return None
    offsets, kernel_size, stride, padding, dilation, input_width = src.args
    got_width = lw.env[input_width] if isinstance(input_width, torch.fx.Node) else input_width
    if Pool2d.of(kernel_size, stride, padding, dilation) != geo or as_expr(got_width) != width:
        return None
    ref = lw.env.get(offsets) if isinstance(offsets, torch.fx.Node) else None
    return ref if is_tensor(ref) else None


@register(aten.max_pool2d_with_indices_backward.default)
def max_pool2d_with_indices_backward(lw: Lowerer, node: torch.fx.Node, grad: Any, x: Any, kernel_size: Any,
                                     stride: Any, padding: Any, dilation: Any, ceil_mode: bool,
                                     indices: Any) -> TensorRef:
    """grad_input[..., h, w]: the sum, in output order, of grad[..., oh, ow] over the windows
    holding (h, w) whose maximum it was (a gather: no atomics). `x` is read for its shape only."""
    if not (is_tensor(grad) and is_tensor(indices)):
        raise Unsupported("max_pool2d backward operands")
    geo = checked(x, Pool2d.of(kernel_size, stride, padding, dilation), "max_pool2d backward")
    (kh_n, kw_n), (sh, sw), (ph, pw), (dh, dw) = geo.kernel, geo.stride, geo.padding, geo.dilation
    size = x.layout.size
    n_out = (grad.layout.size[-2], grad.layout.size[-1])
    offsets = _offsets_producer(lw, node, geo, size[-1])
    dt = lw.out_val().dtype
    acc_t = upcast_compute(dt)

    def body(p: list[sympy.Symbol]) -> Value:
        lead, h, w = p[:-2], p[-2], p[-1]
        flat = iv(h * size[-1] + w)
        acc: Value = Constant(0.0, acc_t)
        # kh, kw descending = oh, ow ascending: eager's order of accumulation
        for kh in reversed(range(kh_n)):
            oh, hcond = candidate(h, n_out[0], size[-2], kh, sh, ph, dh)
            for kw in reversed(range(kw_n)):
                ow, wcond = candidate(w, n_out[1], size[-1], kw, sw, pw, dw)
                valid = and_(hcond, wcond)
                at = [*lead, oh, ow]
                if offsets is not None:  # the int8 form: compare with this window position
                    got = cast(masked(offsets, at, valid), torch.int32)
                    hit = Op("eq", (got, Constant(kh * kw_n + kw, torch.int32)), torch.bool)
                else:
                    hit = Op("eq", (cast(masked(indices, at, valid), torch.int64), flat), torch.bool)
                g = cast(masked(grad, at, guard(valid, hit)), acc_t)
                acc = Op("add", (acc, g), acc_t)
        return cast(acc, dt)

    return lw.pointwise(body)
