"""Random ops with a counter-based in-kernel generator (Philox, through tl.rand/tl.randn).

Each compiled call draws one seed from torch's default generator (an extern `randint`), so
`torch.manual_seed(s)` makes coil's random ops reproducible run after run. Op k of a graph uses
stream seed + k and offset = the element's row-major position, so ops are independent and the
result does not depend on block sizes. The numbers differ from eager PyTorch's (another
generator); tests compare distributions and reproducibility, not values.

Distributions are transforms of one uniform u in [0, 1) or one standard normal z per element:
uniform a + (b - a) u; normal / normal_functional m + s z; log_normal exp(m + s z); exponential
-log(1 - u) / lambda; cauchy m + s tan(pi (u - 1/2)); geometric max(1, ceil(log(1 - u) /
log(1 - p))); randint / randint_like / random(from, to) lo + floor(u (hi - lo)) in float64
(ranges up to 2**24, the resolution of u); rrelu's noise lower + (upper - lower) u.
"""

from __future__ import annotations

import math
from typing import Any

import sympy
import torch
import torch.fx
from coil.lowering_ir.errors import Unsupported
from coil.lowering_ir.layout import contiguous_strides
from coil.lowering_ir.lowerer import Lowerer
from coil.lowering_ir.nodes import TensorRef, load
from coil.lowering_ir.ops.common import cast, is_tensor, upcast_compute, value_of
from coil.lowering_ir.registry import register
from coil.lowering_ir.values import Constant, IndexValue, Op, Value

aten = torch.ops.aten


def _random(lw: Lowerer, kind: str) -> tuple[Any, Any]:
    """(val, body maker): body(p) is a float32 random Value at output position p."""
    val = lw.out_val()
    if not isinstance(val, torch.Tensor):
        raise Unsupported("random op without a tensor result")
    seed, stream = lw.random_seed(val.device)
    strides = contiguous_strides([sympy.sympify(s) for s in val.shape])

    def rnd(p: list[sympy.Symbol]) -> Value:
        flat = sum((pi * st for pi, st in zip(p, strides, strict=True)), sympy.Integer(0))
        s = Op("add", (load(seed, [sympy.Integer(0)]), Constant(stream, torch.int64)), torch.int64)
        return Op(kind, (s, IndexValue(flat, torch.int64)), torch.float32)

    return val, rnd


@register(aten.rand.default, aten.rand_like.default)
def rand(lw: Lowerer, node: torch.fx.Node, *args: Any, **kwargs: Any) -> TensorRef:
    val, rnd, _ = _float_out(lw, "rand")
    return lw.pointwise(lambda p: cast(rnd(p), val.dtype))


@register(aten.randn.default, aten.randn_like.default)
def randn(lw: Lowerer, node: torch.fx.Node, *args: Any, **kwargs: Any) -> TensorRef:
    val, rnd, _ = _float_out(lw, "randn")
    return lw.pointwise(lambda p: cast(rnd(p), val.dtype))


@register(aten.bernoulli.default, aten.bernoulli.p)
def bernoulli(lw: Lowerer, node: torch.fx.Node, x: Any, p: Any = None, **kwargs: Any) -> TensorRef:
    """1 with probability p (a float, or x itself for bernoulli(x)), else 0."""
    if kwargs.get("generator") is not None:
        raise Unsupported("bernoulli with an explicit generator")
    prob = x if node.target is aten.bernoulli.default else p
    if not (is_tensor(prob) or isinstance(prob, float | int)):
        raise Unsupported("bernoulli probability")
    val, rnd = _random(lw, "rand")

    def body(q: list[sympy.Symbol]) -> Value:
        hit = Op("lt", (rnd(q), value_of(prob, q, torch.float32)), torch.bool)
        return cast(hit, val.dtype)

    return lw.pointwise(body)


def _float_out(lw: Lowerer, kind: str) -> tuple[Any, Any, torch.dtype]:
    """(val, random body maker, compute dtype) for a float-valued random op (checked before
    the graph's seed is drawn, so a declined op leaves no seed behind)."""
    out = lw.out_val()
    if not isinstance(out, torch.Tensor) or not out.dtype.is_floating_point:
        raise Unsupported("a float distribution into a non-float dtype")
    val, rnd = _random(lw, kind)
    return val, rnd, upcast_compute(val.dtype)


def _number(x: Any) -> float:
    if not isinstance(x, int | float) or isinstance(x, bool):
        raise Unsupported("random op with a non-constant parameter")
    return float(x)


def _no_generator(kw: dict[str, Any]) -> None:
    if kw.get("generator") is not None:
        raise Unsupported("random op with an explicit generator")


def _op(name: str, *args: Value) -> Value:
    return Op(name, args, args[0].dtype)


def _c(x: float, dt: torch.dtype) -> Value:
    return Constant(x, dt)


def _transform(lw: Lowerer, kind: str, f: Any) -> TensorRef:
    """out[p] = f(u or z at p, compute dtype), rounded to the node's dtype."""
    val, rnd, ct = _float_out(lw, kind)
    return lw.pointwise(lambda p: cast(f(cast(rnd(p), ct), ct), val.dtype))


@register(aten.uniform.default)
def uniform(lw: Lowerer, node: torch.fx.Node, x: Any, low: Any = 0.0, high: Any = 1.0, **kw: Any) -> TensorRef:
    _no_generator(kw)
    lo, hi = _number(low), _number(high)
    return _transform(lw, "rand", lambda u, ct: _op("add", _c(lo, ct), _op("mul", _c(hi - lo, ct), u)))


@register(aten.normal_functional.default)
def normal_functional(lw: Lowerer, node: torch.fx.Node, x: Any, mean: Any = 0.0, std: Any = 1.0,
                      **kw: Any) -> TensorRef:
    _no_generator(kw)
    m, s = _number(mean), _number(std)
    return _transform(lw, "randn", lambda z, ct: _op("add", _c(m, ct), _op("mul", _c(s, ct), z)))


@register(aten.log_normal.default)
def log_normal(lw: Lowerer, node: torch.fx.Node, x: Any, mean: Any = 1.0, std: Any = 2.0, **kw: Any) -> TensorRef:
    _no_generator(kw)
    m, s = _number(mean), _number(std)
    return _transform(lw, "randn", lambda z, ct: Op("exp", (_op("add", _c(m, ct), _op("mul", _c(s, ct), z)),), ct))


@register(aten.normal.Tensor_Tensor, aten.normal.Tensor_float, aten.normal.float_Tensor, aten.normal.float_float)
def normal(lw: Lowerer, node: torch.fx.Node, mean: Any, std: Any = 1.0, *rest: Any, **kw: Any) -> TensorRef:
    """mean + std * z with tensor or number mean and std, broadcast to the output."""
    _no_generator(kw)
    if not all(is_tensor(a) or isinstance(a, int | float) for a in (mean, std)):
        raise Unsupported("normal with non-numeric parameters")
    val, rnd, ct = _float_out(lw, "randn")

    def body(p: list[sympy.Symbol]) -> Value:
        z = cast(rnd(p), ct)
        return cast(_op("add", value_of(mean, p, ct), _op("mul", value_of(std, p, ct), z)), val.dtype)

    return lw.pointwise(body)


@register(aten.exponential.default)
def exponential(lw: Lowerer, node: torch.fx.Node, x: Any, lambd: Any = 1.0, **kw: Any) -> TensorRef:
    _no_generator(kw)
    lam = _number(lambd)
    return _transform(lw, "rand", lambda u, ct: _op(
        "truediv", Op("neg", (Op("log", (_op("sub", _c(1.0, ct), u),), ct),), ct), _c(lam, ct)))


@register(aten.cauchy.default)
def cauchy(lw: Lowerer, node: torch.fx.Node, x: Any, median: Any = 0.0, sigma: Any = 1.0, **kw: Any) -> TensorRef:
    _no_generator(kw)
    m, s = _number(median), _number(sigma)
    return _transform(lw, "rand", lambda u, ct: _op("add", _c(m, ct), _op(
        "mul", _c(s, ct), Op("tan", (_op("mul", _c(math.pi, ct), _op("sub", u, _c(0.5, ct))),), ct))))


@register(aten.geometric.default)
def geometric(lw: Lowerer, node: torch.fx.Node, x: Any, p: Any, **kw: Any) -> TensorRef:
    """Trials up to the first success: max(1, ceil(log(1 - u) / log(1 - p))), in float64."""
    _no_generator(kw)
    prob = _number(p)
    if not 0.0 < prob < 1.0:
        raise Unsupported("geometric with p outside (0, 1)")
    val, rnd = _random(lw, "rand")
    f64 = torch.float64

    def body(q: list[sympy.Symbol]) -> Value:
        u = cast(rnd(q), f64)
        k = Op("ceil", (_op("truediv", Op("log", (_op("sub", _c(1.0, f64), u),), f64), _c(math.log1p(-prob), f64)),), f64)
        return cast(Op("maximum", (k, _c(1.0, f64)), f64), val.dtype)

    return lw.pointwise(body)


def _randint(lw: Lowerer, low: Any, high: Any) -> TensorRef:
    """low + floor(u * (high - low)) for integers low < high, computed in float64."""
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (low, high)):
        raise Unsupported("randint with symbolic bounds")
    span = high - low
    if not 0 < span <= 2**24:
        raise Unsupported("randint range wider than the 24 bits of a uniform float")
    val, rnd = _random(lw, "rand")
    f64 = torch.float64

    def body(p: list[sympy.Symbol]) -> Value:
        k = Op("floor", (_op("mul", cast(rnd(p), f64), _c(float(span), f64)),), f64)
        return cast(_op("add", k, _c(float(low), f64)), val.dtype)

    return lw.pointwise(body)


@register(aten.randint.default, aten.randint.low)
def randint(lw: Lowerer, node: torch.fx.Node, *args: Any, **kw: Any) -> TensorRef:
    _no_generator(kw)
    low, high = (0, args[0]) if node.target is aten.randint.default else (args[0], args[1])
    return _randint(lw, low, high)


@register(aten.randint_like.default, aten.randint_like.low_dtype)
def randint_like(lw: Lowerer, node: torch.fx.Node, x: Any, *args: Any, **kw: Any) -> TensorRef:
    _no_generator(kw)
    low, high = (0, args[0]) if node.target is aten.randint_like.default else (args[0], args[1])
    return _randint(lw, low, high)


@register(aten.random.to, getattr(aten.random, "from"))
def random_(lw: Lowerer, node: torch.fx.Node, x: Any, *args: Any, **kw: Any) -> TensorRef:
    """Integers in [from, to) (random.to: [0, to)) in x's dtype."""
    _no_generator(kw)
    if node.target is aten.random.to:
        return _randint(lw, 0, args[0])
    if len(args) < 2 or args[1] is None:
        raise Unsupported("random(from, None): the dtype's whole range")
    return _randint(lw, args[0], args[1])


@register(aten.rrelu_with_noise_functional.default)
def rrelu_with_noise(lw: Lowerer, node: torch.fx.Node, x: Any, noise: Any, lower: Any = 1.0 / 8,
                     upper: Any = 1.0 / 3, training: bool = False, **kw: Any) -> tuple[TensorRef, TensorRef]:
    """(out, noise_out). Training: where x <= 0 the slope is lower + (upper - lower) u, else 1;
    out = x * slope and noise_out = slope. Eval: slope (lower + upper) / 2, noise unchanged."""
    _no_generator(kw)
    lo, hi = _number(lower), _number(upper)
    out_val, noise_val = lw.out_val()
    if not (is_tensor(x) and is_tensor(noise)) or not out_val.dtype.is_floating_point:
        raise Unsupported("rrelu operands")
    ct = upcast_compute(out_val.dtype)
    if not training:
        def leaky(p: list[sympy.Symbol]) -> Value:
            v = value_of(x, p, ct)
            neg = Op("le", (v, _c(0.0, ct)), torch.bool)
            return cast(Op("where", (neg, _op("mul", v, _c((lo + hi) / 2, ct)), v), ct), out_val.dtype)

        out = lw.pointwise(leaky, out_val)
        return out, lw.pointwise(lambda p: value_of(noise, p, noise_val.dtype), noise_val)
    seed, stream = lw.random_seed(out_val.device)
    strides = contiguous_strides([sympy.sympify(s) for s in out_val.shape])

    def slope(p: list[sympy.Symbol]) -> Value:
        flat = sum((pi * st for pi, st in zip(p, strides, strict=True)), sympy.Integer(0))
        sd = Op("add", (load(seed, [sympy.Integer(0)]), Constant(stream, torch.int64)), torch.int64)
        u = cast(Op("rand", (sd, IndexValue(flat, torch.int64)), torch.float32), ct)
        r = _op("add", _c(lo, ct), _op("mul", _c(hi - lo, ct), u))
        neg = Op("le", (value_of(x, p, ct), _c(0.0, ct)), torch.bool)
        return Op("where", (neg, r, _c(1.0, ct)), ct)

    noise_out = lw.pointwise(lambda p: cast(slope(p), noise_val.dtype), noise_val)
    out = lw.pointwise(lambda p: cast(_op("mul", value_of(x, p, ct), value_of(noise_out, p, ct)), out_val.dtype),
                       out_val)
    return out, noise_out


@register(aten.rrelu_with_noise_backward.default)
def rrelu_with_noise_backward(lw: Lowerer, node: torch.fx.Node, grad: Any, x: Any, noise: Any, lower: Any,
                              upper: Any, training: bool, self_is_result: bool = False) -> TensorRef:
    """Training (upper - lower > 1e-6): grad * noise; else leaky_relu's backward with slope
    (lower + upper) / 2 (x > 0: grad, else grad * slope), as eager."""
    lo, hi = _number(lower), _number(upper)
    if not (is_tensor(grad) and is_tensor(x) and is_tensor(noise)):
        raise Unsupported("rrelu backward operands")
    dt = lw.out_val().dtype
    ct = upcast_compute(dt)
    if training and hi - lo > 1e-6:
        return lw.pointwise(lambda p: cast(_op("mul", value_of(grad, p, ct), value_of(noise, p, ct)), dt))

    def body(p: list[sympy.Symbol]) -> Value:
        g = value_of(grad, p, ct)
        pos = Op("gt", (value_of(x, p, ct), _c(0.0, ct)), torch.bool)
        return cast(Op("where", (pos, g, _op("mul", g, _c((lo + hi) / 2, ct))), ct), dt)

    return lw.pointwise(body)
