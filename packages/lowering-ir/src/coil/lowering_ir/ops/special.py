"""Special functions, lowered to formulas over core value ops (no libdevice, no fallback).

Each lowering builds its function from `+ - * /`, exp/log/sin/tan/sqrt/erf/floor and
selections (see special_math.F), so it runs on every target, the CPU interpreter included.
Bessel functions are in bessel.py.

The algorithms follow eager PyTorch's CPU kernels (ATen/native/Math.h), most of them derived
from the Cephes Math Library (Copyright (c) 2018, Steven Moshier; 3-clause BSD license), so
results agree to rounding: digamma, trigamma, erfinv and ndtri compute in the op's compute
dtype (float32 for float32/half/integer inputs, float64 for float64) with the same shifts,
series, rational approximations and coefficients; Hurwitz zeta (and polygamma n >= 2, which is
+-n! zeta(n + 1, x)) accumulates in float64 as eager's CPU kernel does; lgamma, which eager takes
from the C library, is a Lanczos approximation (g = 7, 9 terms) evaluated in float64.
Data-dependent loops of the reference become fixed unrolled steps: digamma's and zeta's
recurrences shift x by a fixed number of terms (masked where eager would stop), which agrees
to rounding wherever the reference converges.
"""

from __future__ import annotations

import math
from typing import Any

import sympy
import torch
import torch.fx
from coil.lowering_ir.errors import Unsupported
from coil.lowering_ir.lowerer import Lowerer
from coil.lowering_ir.nodes import TensorRef
from coil.lowering_ir.ops.common import cast, value_of
from coil.lowering_ir.ops.special_math import (
    F,
    both,
    either,
    fn,
    isinf,
    polevl,
    pow_,
    unary_lowering,
    where,
)
from coil.lowering_ir.registry import register
from coil.lowering_ir.values import Value

aten = torch.ops.aten

PI = math.pi
LANCZOS_G = 7.0
LANCZOS = (
    0.99999999999980993, 676.5203681218851, -1259.1392167224028, 771.32342877765313,
    -176.61502916214059, 12.507343278686905, -0.13857109526572012, 9.9843695780195716e-6,
    1.5056327351493116e-7,
)
DIGAMMA_A = (
    8.33333333333333333333E-2, -2.10927960927960927961E-2, 7.57575757575757575758E-3,
    -4.16666666666666666667E-3, 3.96825396825396825397E-3, -8.33333333333333333333E-3,
    8.33333333333333333333E-2,
)
PSI_10 = 2.25175258906672110764
ZETA_A = (
    12.0, -720.0, 30240.0, -1209600.0, 47900160.0, -1.8924375803183791606e9, 7.47242496e10,
    -2.950130727918164224e12, 1.1646782814350067249e14, -4.5979787224074726105e15,
    1.8152105401943546773e17, -7.1661652561756670113e18,
)
ZETA_TERMS = 32  # direct terms before the Euler-Maclaurin tail
ZETA_MIN_Q = -24.0  # below it the tail would start too close to 0: NaN, not a wrong number
# erfinv's rational first guess (lowest order first, as in eager's a, b, c, d arrays)
ERFINV_A = (0.886226899, -1.645349621, 0.914624893, -0.140543331)
ERFINV_B = (-2.118377725, 1.442710462, -0.329097515, 0.012229801)
ERFINV_C = (-1.970840454, -1.624906493, 3.429567803, 1.641345311)
ERFINV_D = (3.543889200, 1.637067800)
NDTRI_P0 = (  # declared [5]: missing entries are zeros, as in C
    -5.99633501014107895267E1, 9.80010754185999661536E1, -5.66762857469070293439E1,
    1.39312609387279679503E1, -1.23916583867381258016E0,
)
NDTRI_Q0 = (  # declared [9]: missing entries are zeros, as in C
    1.00000000000000000000E0, 1.95448858338141759834E0, 4.67627912898881538453E0,
    8.63602421390890590575E1, -2.25462687854119370527E2, 2.00260212380060660359E2,
    -8.20372256168333339912E1, 1.59056225126211695515E1, -1.18331621121330003142E0,
)
NDTRI_P1 = (  # declared [9]: missing entries are zeros, as in C
    4.05544892305962419923E0, 3.15251094599893866154E1, 5.71628192246421288162E1,
    4.40805073893200834700E1, 1.46849561928858024014E1, 2.18663306850790267539E0,
    -1.40256079171354495875E-1, -3.50424626827848203418E-2, -8.57456785154685413611E-4,
)
NDTRI_Q1 = (  # declared [9]: missing entries are zeros, as in C
    1.00000000000000000000E0, 1.57799883256466749731E1, 4.53907635128879210584E1,
    4.13172038254672030440E1, 1.50425385692907503408E1, 2.50464946208309415979E0,
    -1.42182922854787788574E-1, -3.80806407691578277194E-2, -9.33259480895457427372E-4,
)
NDTRI_P2 = (  # declared [9]: missing entries are zeros, as in C
    3.23774891776946035970E0, 6.91522889068984211695E0, 3.93881025292474443415E0,
    1.33303460815807542389E0, 2.01485389549179081538E-1, 1.23716634817820021358E-2,
    3.01581553508235416007E-4, 2.65806974686737550832E-6, 6.23974539184983293730E-9,
)
NDTRI_Q2 = (  # declared [9]: missing entries are zeros, as in C
    1.00000000000000000000E0, 6.02427039364742014255E0, 3.67983563856160859403E0,
    1.37702099489081330271E0, 2.16236993594496635890E-1, 1.34204006088543189037E-2,
    3.28014464682127739104E-4, 2.89247864745380683936E-6, 6.79019408009981274425E-9,
)


# --- the functions, on F values -----------------------------------------------------------------

def lgamma(x: F) -> F:
    """log|Gamma(x)| for float64 x: Lanczos for x >= 0.5, reflection below; +inf at poles."""
    def positive(z: F) -> F:
        zm = z - 1.0
        acc = zm * 0.0 + LANCZOS[0]
        for i, c in enumerate(LANCZOS[1:], start=1):
            acc = acc + c / (zm + float(i))
        t = zm + (LANCZOS_G + 0.5)
        return 0.5 * math.log(2 * PI) + (zm + 0.5) * fn("log", t) - t + fn("log", acc)

    small = x.lt(0.5)
    y = where(small, 1.0 - x, x)
    frac = x - fn("floor", x)
    reflect = math.log(PI) - fn("log", fn("abs", fn("sin", PI * frac)))
    out = where(small, reflect - positive(y), positive(y))
    return where(isinf(x), math.inf, out)


def digamma(x: F) -> F:
    """psi(x) as eager's calc_digamma: reflection for x < 0, shift to x >= 10, asymptotic series."""
    neg = x.lt(0.0)
    xt = fn("trunc", x)
    x64 = x.to(torch.float64)
    r = x64 - fn("trunc", x64)  # modf's fractional part, in float64 as eager
    reflect = (PI / fn("tan", PI * r)).to(x.dtype)
    y = where(neg, 1.0 - x, x)
    shift: F | None = None
    for k in range(10):
        yk = y + float(k)
        term = where(yk.lt(10.0), 1.0 / yk, 0.0)
        shift = term if shift is None else shift + term
    assert shift is not None
    z = where(y.lt(10.0), y + fn("ceil", 10.0 - y), y)
    zz = 1.0 / (z * z)
    series = where(z.lt(1.0e17), zz * polevl(zz, DIGAMMA_A), 0.0)
    core = where(z.eq(10.0), PSI_10 - shift, fn("log", z) - 0.5 / z - series - shift)
    out = where(neg, core - reflect, core)
    out = where(both(neg, x.eq(xt)), math.nan, out)
    return where(x.eq(0.0), -(1.0 / x), out)


def trigamma(x: F) -> F:
    """psi'(x) as eager's trigamma: reflection below 0.5, six shifts, asymptotic series."""
    small = x.lt(0.5)
    s = fn("sin", x * PI)
    reflect = -(PI * PI) / (s * s)
    y = where(small, 1.0 - x, x)
    acc = where(small, reflect, 0.0)
    for k in range(6):
        yk = y + float(k)
        acc = acc + 1.0 / (yk * yk)
    w = y + 6.0
    ixx = 1.0 / (w * w)
    acc = acc + (1.0 + 1.0 / (2.0 * w) + ixx * (1.0 / 6 - ixx * (1.0 / 30 - ixx * (1.0 / 42)))) / w
    return where(small, -acc, acc)


def zeta(x: F | float, q: F) -> F:
    """Hurwitz zeta(x, q) = sum_k (q + k)^-x for float64 q: ZETA_TERMS direct terms, then
    Cephes' Euler-Maclaurin tail. `x` is an F, or a Python number (polygamma): then integer
    powers are products (exact in sign for negative q) and the tail's factors are folded.
    Eager iterates until q + k > 9 whatever q is; with a fixed count the result is NaN for
    q < ZETA_MIN_Q (documented limit) rather than inaccurate."""
    xc = None if isinstance(x, F) else float(x)

    def inv_pow(a: F) -> F:
        if xc is not None and xc.is_integer() and 1 <= xc <= 64:
            r = 1.0 / a
            out = r
            for _ in range(int(xc) - 1):
                out = out * r
            return out
        return pow_(a, -x)

    s = inv_pow(q)
    b = s
    for j in range(1, ZETA_TERMS + 1):
        b = inv_pow(q + float(j))
        s = s + b
    w = q + float(ZETA_TERMS)
    s = s + b * w / (x - 1.0) - 0.5 * b
    fac: F | float = 1.0
    k = 0.0
    for c in ZETA_A:
        fac = fac * (x + k)
        b = b / w
        s = s + fac * b / c
        fac = fac * (x + (k + 1.0))
        b = b / w
        k += 2.0
    s = where(q.lt(ZETA_MIN_Q), math.nan, s)
    pole = both(q.le(0.0), q.eq(fn("floor", q)))
    if isinstance(x, F):
        s = where(both(q.le(0.0), x.ne(fn("floor", x))), math.nan, s)
        s = where(pole, math.inf, s)
        s = where(x.lt(1.0), math.nan, s)
        return where(x.eq(1.0), math.inf, s)
    assert xc is not None
    if xc == 1.0:
        return q * 0.0 + math.inf
    if xc < 1.0:
        return q * 0.0 + math.nan
    s = where(pole, math.inf, s)
    if not xc.is_integer():
        s = where(q.le(0.0), math.nan, s)
    return s


def polygamma(n: int, x: F) -> F:
    if n == 0:
        return digamma(x)
    if n == 1:
        return trigamma(x)
    z = zeta(float(n + 1), x.to(torch.float64))
    return (z * ((1.0 if n % 2 else -1.0) * math.factorial(n))).to(x.dtype)


def erfinv(y: F) -> F:
    """erf^-1(y) as eager's calc_erfinv: a rational first guess (central |y| <= 0.7, tail
    sqrt(-log((1 - |y|) / 2))), then two Newton steps on erf; NaN outside [-1, 1], +-inf at +-1."""
    ay = fn("abs", y)
    z = y * y
    central = y * polevl(z, ERFINV_A[::-1]) / polevl(z, (*ERFINV_B[::-1], 1.0))
    t = fn("sqrt", -fn("log", (1.0 - ay) / 2.0))
    tail = polevl(t, ERFINV_C[::-1]) / polevl(t, (*ERFINV_D[::-1], 1.0))
    tail = where(y.lt(0.0), -tail, tail)  # copysign(num, y) / dem
    x = where(ay.le(0.7), central, tail)
    for _ in range(2):
        x = x - (fn("erf", x) - y) / ((2.0 / math.sqrt(PI)) * fn("exp", -(x * x)))
    x = where(ay.gt(1.0), math.nan, x)
    return where(ay.eq(1.0), where(y.lt(0.0), -math.inf, math.inf), x)


def ndtri(y: F) -> F:
    """The standard normal quantile as eager's calc_ndtri (Cephes): rational in y - 1/2 on
    the central part, in 1 / sqrt(-2 log y) in the tails; +-inf at 0/1, NaN outside."""
    upper = y.gt(1.0 - 0.13533528323661269189)
    w = where(upper, 1.0 - y, y)
    c = w - 0.5
    c2 = c * c
    central = (c + c * (c2 * polevl(c2, NDTRI_P0) / polevl(c2, NDTRI_Q0))) * 2.50662827463100050242
    x = fn("sqrt", -2.0 * fn("log", w))
    x0 = x - fn("log", x) / x
    r = 1.0 / x
    x1 = where(x.lt(8.0), r * polevl(r, NDTRI_P1) / polevl(r, NDTRI_Q1), r * polevl(r, NDTRI_P2) / polevl(r, NDTRI_Q2))
    tail = x0 - x1
    tail = where(upper, tail, -tail)
    out = where(w.gt(0.13533528323661269189), central, tail)
    out = where(either(y.lt(0.0), y.gt(1.0)), math.nan, out)
    out = where(y.eq(1.0), math.inf, out)
    return where(y.eq(0.0), -math.inf, out)


# --- registration -------------------------------------------------------------------------------

@register(aten.lgamma.default)
def lower_lgamma(lw: Lowerer, node: torch.fx.Node, x: Any) -> TensorRef:
    return unary_lowering(lw, x, lgamma, torch.float64)


@register(aten.digamma.default)
def lower_digamma(lw: Lowerer, node: torch.fx.Node, x: Any) -> TensorRef:
    return unary_lowering(lw, x, digamma)


@register(aten.polygamma.default)
def lower_polygamma(lw: Lowerer, node: torch.fx.Node, n: Any, x: Any) -> TensorRef:
    if not isinstance(n, int) or n < 0:
        raise Unsupported("polygamma of a symbolic or negative order")
    return unary_lowering(lw, x, lambda v: polygamma(n, v))


@register(aten.erfinv.default)
def lower_erfinv(lw: Lowerer, node: torch.fx.Node, x: Any) -> TensorRef:
    return unary_lowering(lw, x, erfinv)


@register(aten.special_ndtri.default)
def lower_ndtri(lw: Lowerer, node: torch.fx.Node, x: Any) -> TensorRef:
    return unary_lowering(lw, x, ndtri)


@register(aten.special_zeta.default, aten.special_zeta.self_scalar, aten.special_zeta.other_scalar)
def lower_zeta(lw: Lowerer, node: torch.fx.Node, x: Any, q: Any) -> TensorRef:
    """Hurwitz zeta(x, q), accumulated in float64 (eager's CPU accumulation type)."""
    dt = lw.out_val().dtype
    if not dt.is_floating_point:
        raise Unsupported("zeta with a non-float result")

    def point(p: list[sympy.Symbol]) -> Value:
        xv = F(value_of(x, p, torch.float64))
        qv = F(value_of(q, p, torch.float64))
        return cast(zeta(xv, qv).v, dt)

    return lw.pointwise(point)
