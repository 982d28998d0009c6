"""avg_pool2d and adaptive average pooling, forward and backward, as Pointwise nodes over
unrolled windows (the geometry is pool_common's; max pooling is in pooling.py).

**avg_pool2d.** Output (..., oh, ow) sums its window's in-bounds elements in window order (masked
loads: padding adds nothing), in float32 for half types, and divides by eager's divisor: the
`divisor_override` if given; else, with `count_include_pad`, the window clipped to the padded
input (`min(start + k, size + pad) - start` per axis, so a ceil_mode window hanging past the
padding counts only up to it), without it the window clipped to the input. Integer inputs sum
in int64 and divide truncating, as eager's integer kernel does. The backward gathers:
grad_input[h, w] sums grad[oh, ow] / divisor(oh, ow) over the windows holding (h, w), in (oh, ow)
order as eager's scatter adds them.

**_adaptive_avg_pool2d.** Output o along an axis of input size I and output size O averages
input positions [floor(o*I/O), ceil((o+1)*I/O)); the window length varies by at most one, so the
forward unrolls the longest window with a mask on the tail. It divides by each axis length in
turn (`sum / kh / kw`, eager's CPU order); floats only. The backward gathers over the outputs whose windows
hold h: o in [floor(h*O/I), ceil((h+1)*O/I)). Sizes must be static (the unroll length depends
on them); output size 1 never gets here (adaptive_avg_pool2d decomposes to a mean).

Windows (and the backward's candidate sets) above `MAX_WINDOW` elements, bool and complex
dtypes, integer adaptive pooling and symbolic adaptive sizes run as ATen fallbacks.
"""

from __future__ import annotations

from typing import Any

import sympy
import torch
import torch.fx
from coil.lowering_ir.errors import Unsupported
from coil.lowering_ir.layout import Expr
from coil.lowering_ir.lowerer import Lowerer
from coil.lowering_ir.nodes import TensorRef
from coil.lowering_ir.ops.common import cast, is_tensor, upcast_compute
from coil.lowering_ir.ops.pool_common import (
    MAX_WINDOW,
    Pool2d,
    and_,
    axis,
    candidate,
    checked,
    i64,
    iv,
    lt,
    masked,
    may_reach,
)
from coil.lowering_ir.registry import register
from coil.lowering_ir.values import Constant, Op, Value

aten = torch.ops.aten


def _count(o: Expr, n_out: Expr, size: Expr, k: int, s: int, pad: int, include_pad: bool) -> Value:
    """Eager's divisor factor along one axis for output o: the window [o*s - pad, + k) clipped
    to [-pad, size + pad) (include_pad) or to [0, size)."""
    start = o * s - pad
    cap = size + pad if include_pad else size
    hi: Value | None = None
    if may_reach((n_out - 1) * s - pad + k, cap + 1):  # some window ends past the cap
        hi = Op("minimum", (iv(start + k), iv(cap)), torch.int64)
    lo: Value | None = None
    if not include_pad and pad > 0:
        lo = Op("maximum", (iv(start), i64(0)), torch.int64)
    if hi is None and lo is None:
        return i64(k)
    return Op("sub", (hi if hi is not None else iv(start + k), lo if lo is not None else iv(start)), torch.int64)


def _divisor(geo: Pool2d, oh: Expr, ow: Expr, n_out: tuple[Expr, Expr], size: tuple[Expr, Expr],
             include_pad: bool, override: Any) -> Value:
    if override is not None:
        if not isinstance(override, int):
            raise Unsupported("symbolic divisor_override")
        return i64(override)
    (kh, kw), (sh, sw), (ph, pw) = geo.kernel, geo.stride, geo.padding
    ch = _count(oh, n_out[0], size[0], kh, sh, ph, include_pad)
    cw = _count(ow, n_out[1], size[1], kw, sw, pw, include_pad)
    return Op("mul", (ch, cw), torch.int64)


def _avg_geometry(x: Any, kernel_size: Any, stride: Any, padding: Any) -> Pool2d:
    return checked(x, Pool2d.of(kernel_size, stride, padding), "avg_pool2d")


@register(aten.avg_pool2d.default)
def avg_pool2d(lw: Lowerer, node: torch.fx.Node, x: Any, kernel_size: Any, stride: Any = (), padding: Any = 0,
               ceil_mode: bool = False, count_include_pad: bool = True, divisor_override: Any = None) -> TensorRef:
    geo = _avg_geometry(x, kernel_size, stride, padding)
    (kh_n, kw_n), (sh, sw), (ph, pw) = geo.kernel, geo.stride, geo.padding
    val = lw.out_val()
    n_out = (val.shape[-2], val.shape[-1])
    size = x.layout.size
    floating = val.dtype.is_floating_point
    ct = upcast_compute(val.dtype) if floating else torch.int64
    divide = "truediv" if floating else "truncdiv"  # integers: eager's C++ integer division

    def body(p: list[sympy.Symbol]) -> Value:
        lead, oh, ow = p[:-2], p[-2], p[-1]
        acc: Value = Constant(0.0 if floating else 0, ct)
        for h, hc in axis(oh, n_out[0], size[-2], kh_n, sh, ph, 1):
            for w, wc in axis(ow, n_out[1], size[-1], kw_n, sw, pw, 1):
                acc = Op("add", (acc, cast(masked(x, [*lead, h, w], and_(hc, wc)), ct)), ct)
        div = _divisor(geo, oh, ow, n_out, (size[-2], size[-1]), count_include_pad, divisor_override)
        return cast(Op(divide, (acc, cast(div, ct)), ct), val.dtype)

    return lw.pointwise(body)


@register(aten.avg_pool2d_backward.default)
def avg_pool2d_backward(lw: Lowerer, node: torch.fx.Node, grad: Any, x: Any, kernel_size: Any, stride: Any,
                        padding: Any, ceil_mode: bool, count_include_pad: bool, divisor_override: Any) -> TensorRef:
    if not (is_tensor(grad) and grad.layout.dtype.is_floating_point):
        raise Unsupported("avg_pool2d backward of a non-float gradient")
    geo = _avg_geometry(x, kernel_size, stride, padding)
    (kh_n, kw_n), (sh, sw), (ph, pw) = geo.kernel, geo.stride, geo.padding
    size = x.layout.size
    n_out = (grad.layout.size[-2], grad.layout.size[-1])
    dt = lw.out_val().dtype
    ct = upcast_compute(dt)

    def body(p: list[sympy.Symbol]) -> Value:
        lead, h, w = p[:-2], p[-2], p[-1]
        acc: Value = Constant(0.0, ct)
        for kh in reversed(range(kh_n)):  # descending kh, kw: ascending oh, ow (eager's order)
            oh, hc = candidate(h, n_out[0], size[-2], kh, sh, ph, 1)
            for kw in reversed(range(kw_n)):
                ow, wc = candidate(w, n_out[1], size[-1], kw, sw, pw, 1)
                valid = and_(hc, wc)
                g = cast(masked(grad, [*lead, oh, ow], valid), ct)  # 0 where invalid
                div = _divisor(geo, oh, ow, n_out, (size[-2], size[-1]), count_include_pad, divisor_override)
                if valid is not None:  # an invalid candidate's divisor may be 0: 0 / 0 would be NaN
                    div = Op("where", (valid, div, i64(1)), torch.int64)
                acc = Op("add", (acc, Op("truediv", (g, cast(div, ct)), ct)), ct)
        return cast(acc, dt)

    return lw.pointwise(body)


# -- adaptive ------------------------------------------------------------------------------------


def _static(n: Any, what: str) -> int:
    e = sympy.sympify(n)
    if not isinstance(e, sympy.Integer):
        raise Unsupported(f"adaptive pooling over a symbolic {what}")
    return int(e)


def _start(o: Expr, i_size: int, o_size: int) -> Expr:
    """First input position of adaptive window o: floor(o * I / O)."""
    return sympy.floor(o * i_size / sympy.Integer(o_size))


def _end(o: Expr, i_size: int, o_size: int) -> Expr:
    """One past the last input position of adaptive window o: ceil((o + 1) * I / O)."""
    return sympy.floor(((o + 1) * i_size + o_size - 1) / sympy.Integer(o_size))


def _lengths(i_size: int, o_size: int) -> tuple[int, int]:
    """(shortest, longest) length of the windows [start(o), end(o)) for o < O."""
    lens = [(-(-(o + 1) * i_size // o_size)) - (o * i_size // o_size) for o in range(o_size)]
    return min(lens), max(lens)


def _adaptive_sizes(x: Any, n_out: tuple[Any, Any]) -> tuple[int, int, int, int]:
    if not is_tensor(x) or not x.layout.dtype.is_floating_point or len(x.layout.size) not in (3, 4):
        raise Unsupported("adaptive_avg_pool2d operand")
    return (_static(x.layout.size[-2], "input size"), _static(x.layout.size[-1], "input size"),
            _static(n_out[0], "output size"), _static(n_out[1], "output size"))


def _length(o: Expr, i_size: int, o_size: int) -> Value:
    lo, hi = _lengths(i_size, o_size)
    return i64(lo) if lo == hi else iv(_end(o, i_size, o_size) - _start(o, i_size, o_size))


@register(aten._adaptive_avg_pool2d.default)
def adaptive_avg_pool2d(lw: Lowerer, node: torch.fx.Node, x: Any, output_size: Any) -> TensorRef:
    val = lw.out_val()
    h_in, w_in, h_out, w_out = _adaptive_sizes(x, (val.shape[-2], val.shape[-1]))
    (min_h, max_h), (min_w, max_w) = _lengths(h_in, h_out), _lengths(w_in, w_out)
    if max_h * max_w > MAX_WINDOW:
        raise Unsupported(f"adaptive_avg_pool2d window {max_h}x{max_w}")
    ct = upcast_compute(val.dtype)

    def body(p: list[sympy.Symbol]) -> Value:
        lead, oh, ow = p[:-2], p[-2], p[-1]
        h0, h1, w0, w1 = _start(oh, h_in, h_out), _end(oh, h_in, h_out), _start(ow, w_in, w_out), _end(ow, w_in, w_out)
        acc: Value = Constant(0.0, ct)
        for jh in range(max_h):
            hc = lt(h0 + jh, h1) if jh >= min_h else None
            for jw in range(max_w):
                wc = lt(w0 + jw, w1) if jw >= min_w else None
                acc = Op("add", (acc, cast(masked(x, [*lead, h0 + jh, w0 + jw], and_(hc, wc)), ct)), ct)
        acc = Op("truediv", (acc, cast(_length(oh, h_in, h_out), ct)), ct)
        return cast(Op("truediv", (acc, cast(_length(ow, w_in, w_out), ct)), ct), val.dtype)

    return lw.pointwise(body)


@register(aten._adaptive_avg_pool2d_backward.default)
def adaptive_avg_pool2d_backward(lw: Lowerer, node: torch.fx.Node, grad: Any, x: Any) -> TensorRef:
    if not is_tensor(grad):
        raise Unsupported("adaptive_avg_pool2d backward of a non-tensor gradient")
    h_in, w_in, h_out, w_out = _adaptive_sizes(x, (grad.layout.size[-2], grad.layout.size[-1]))
    # outputs holding input h: [floor(h*O/I), ceil((h+1)*O/I)), the same formulas with I and O swapped
    (min_h, max_h), (min_w, max_w) = _lengths(h_out, h_in), _lengths(w_out, w_in)
    if max_h * max_w > MAX_WINDOW:
        raise Unsupported(f"adaptive_avg_pool2d backward: {max_h}x{max_w} outputs per input")
    dt = lw.out_val().dtype
    ct = upcast_compute(dt)

    def body(p: list[sympy.Symbol]) -> Value:
        lead, h, w = p[:-2], p[-2], p[-1]
        oh0, oh1, ow0, ow1 = _start(h, h_out, h_in), _end(h, h_out, h_in), _start(w, w_out, w_in), _end(w, w_out, w_in)
        acc: Value = Constant(0.0, ct)
        for mh in range(max_h):
            hc = lt(oh0 + mh, oh1) if mh >= min_h else None
            for mw in range(max_w):
                wc = lt(ow0 + mw, ow1) if mw >= min_w else None
                g = cast(masked(grad, [*lead, oh0 + mh, ow0 + mw], and_(hc, wc)), ct)  # 0 where masked
                g = Op("truediv", (g, cast(_length(oh0 + mh, h_in, h_out), ct)), ct)
                acc = Op("add", (acc, Op("truediv", (g, cast(_length(ow0 + mw, w_in, w_out), ct)), ct)), ct)
        return cast(acc, dt)

    return lw.pointwise(body)
