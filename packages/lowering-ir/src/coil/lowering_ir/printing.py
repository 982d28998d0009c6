"""Prints sympy size, stride, offset and index expressions as source text.

`texpr(e)` gives Triton kernel text, `pyexpr(e)` Python (the wrapper). The constructs: integers
(and floats whose value is an integer), symbols, sums, products, positive integer powers,
`floor` and `ceiling` of any sum of rational multiples (`ceiling(3*s0/16)`: over a common
denominator, one integer division), torch's FloorDiv, CeilDiv, CleanDiv, ModularIndexing, Mod,
PythonMod, Min, Max, Identity, ToFloat and true division, relations (==, !=, <, <=, >, >=),
And, Or, Not, true/false, and Piecewise. Anything else raises ValueError, a rational
coefficient outside floor/ceiling (`s0/2`: not an integer in general) and a non-integer float
included.

Integer division and remainder: Python's `//` and `%` round toward minus infinity (sympy's
floor and Mod do too); Triton's, as C's, round toward zero. Python text uses them as they are.
Triton text uses them as they are only when the dividend is provably non-negative and the
divisor positive (the symbols' assumptions: loop indices are non-negative, backed sizes
positive), and otherwise the forms that are exact under both roundings: the remainder with the
divisor's sign is `((a % b) + b) % b`, and `a - that` divides exactly. Unbacked symbols (data-
dependent sizes) carry no sign, so expressions over them take those forms in kernels.
"""

from __future__ import annotations

import sympy
from sympy.logic.boolalg import BooleanFalse, BooleanTrue

_RELATIONS = frozenset({"==", "!=", "<", "<=", ">", ">="})  # printed as sympy spells them
FLOAT_FUNCTIONS = ("ToFloat", "FloatTrueDiv", "IntTrueDiv")  # sympy functions of torch's with float values
_DIVISIONS = ("FloorDiv", "CleanDiv")
_MODS = ("Mod", "PythonMod")


def texpr(e: sympy.Basic) -> str:
    """Triton source for an integer index or size expression (module docstring)."""
    return _Printer(triton=True).text(sympy.sympify(e))


def pyexpr(e: sympy.Basic, *, ite: str | None = None) -> str:
    """Python source for a size expression or a relation over size symbols (module docstring).

    A Piecewise prints as a conditional expression, or with `ite` as the call `ite(cond, then,
    else)` (for evaluators that cannot branch on a symbolic condition, e.g. FX proxies)."""
    return _Printer(triton=False, ite=ite).text(sympy.sympify(e))


def _provably_above_zero(e: sympy.Expr, *, strict: bool) -> bool:
    """e > 0 (`strict`) or e >= 0, provable from the symbols' assumptions (sympy's, then torch's
    value ranges)."""
    if e.is_positive if strict else e.is_nonnegative:
        return True
    try:
        from torch.utils._sympy.value_ranges import bound_sympy

        lower = bound_sympy(e).lower
        return bool(lower > 0 if strict else lower >= 0)
    except Exception:  # an expression value ranges do not cover: not provable
        return False


def _nonnegative(e: sympy.Expr) -> bool:
    return _provably_above_zero(e, strict=False)


def _positive(e: sympy.Expr) -> bool:
    return _provably_above_zero(e, strict=True)


def _float_valued(e: sympy.Basic) -> bool:
    """An expression over a float conversion or true division (a SymFloat): its rational
    coefficients are float factors, not integer divisions."""
    return any(type(a).__name__ in FLOAT_FUNCTIONS for a in sympy.preorder_traversal(e))


def _has_fraction(e: sympy.Expr) -> bool:
    """A sum or product with a non-integer rational coefficient or a negative power at its top
    (`3*s0/16`, `s0/s1`, `s0/2 + s1/2`)."""
    for a in sympy.Add.make_args(e):
        for f in sympy.Mul.make_args(a):
            if isinstance(f, sympy.Rational) and not isinstance(f, sympy.Integer):
                return True
            if isinstance(f, sympy.Pow) and f.exp.is_negative:
                return True
    return False


class _Printer:
    def __init__(self, *, triton: bool, ite: str | None = None) -> None:
        self.triton = triton
        self.ite = ite
        self.floating = False  # inside a float-valued sum or product

    # -- integer division ------------------------------------------------------------------
    def floordiv(self, a: sympy.Expr, b: sympy.Expr) -> str:
        """floor(a / b) for integers a, b != 0."""
        x, y = self.text(a), self.text(b)
        if not self.triton or (_nonnegative(a) and _positive(b)):
            return f"({x} // {y})"
        return f"(({x} - {self.pymod(x, y)}) // {y})"

    def mod(self, a: sympy.Expr, b: sympy.Expr) -> str:
        """a - b * floor(a / b) (the sign of b) for integers a, b != 0."""
        return self.mod_text(self.text(a), _nonnegative(a), b)

    def mod_text(self, x: str, nonnegative: bool, b: sympy.Expr) -> str:
        """`mod` of a dividend printed as `x` (`nonnegative`: provably >= 0)."""
        y = self.text(b)
        if not self.triton or (nonnegative and _positive(b)):
            return f"({x} % {y})"
        return self.pymod(x, y)

    @staticmethod
    def pymod(x: str, y: str) -> str:
        """Python's remainder, exact under C's rounding too."""
        return f"((({x} % {y}) + {y}) % {y})"

    def ceildiv(self, a: sympy.Expr, b: sympy.Expr) -> str:
        """ceiling(a / b) for integers a, b != 0."""
        if _positive(b) and (not self.triton or _nonnegative(a)):
            return self.floordiv(sympy.expand(a + b - 1), b)
        return f"(-{self.floordiv(sympy.expand(-a), b)})"

    def fraction(self, e: sympy.Expr) -> tuple[sympy.Expr, sympy.Expr]:
        """`e` as numerator and denominator over a common denominator."""
        num, den = sympy.fraction(sympy.together(e))
        return sympy.expand(num), sympy.expand(den)

    # -- the walk --------------------------------------------------------------------------
    def text(self, e: sympy.Basic) -> str:
        if isinstance(e, BooleanTrue):
            return "True"
        if isinstance(e, BooleanFalse):
            return "False"
        if isinstance(e, sympy.Integer):
            return str(int(e))
        if isinstance(e, sympy.Float):  # an integer's value, printed as an integer
            if float(e).is_integer():
                return str(int(e))
            if self.floating:
                return repr(float(e))
            raise ValueError(f"cannot print the non-integer {e} as an index expression")
        if isinstance(e, sympy.Symbol):
            return str(e.name)
        if isinstance(e, sympy.Rational):
            if self.floating:
                return f"({e.p} / {e.q})"
            raise ValueError(f"cannot print the non-integer {e} as an index expression")
        if isinstance(e, sympy.Add | sympy.Mul) and _float_valued(e) and not self.floating:
            self.floating = True
            try:
                return self.text(e)
            finally:
                self.floating = False
        if isinstance(e, sympy.Add | sympy.Mul) and _has_fraction(e) and not self.floating:
            num, den = self.fraction(e)
            if den != 1:  # a rational coefficient outside floor/ceiling: not an integer in general
                raise ValueError(f"non-integer index expression {e}")
            e = num
        if isinstance(e, sympy.Add):
            return "(" + " + ".join(self.text(t) for t in sorted(e.args, key=sympy.default_sort_key)) + ")"
        if isinstance(e, sympy.Mul):
            return "(" + " * ".join(self.text(a) for a in e.args) + ")"
        if isinstance(e, sympy.Pow) and isinstance(e.exp, sympy.Integer):
            if int(e.exp) > 0:
                return self.power(e.base, int(e.exp))
            if self.floating and int(e.exp) < 0:
                return f"(1 / {self.power(e.base, -int(e.exp))})"
        if isinstance(e, sympy.floor):
            num, den = self.fraction(e.args[0])
            return self.text(num) if den == 1 else self.floordiv(num, den)
        if isinstance(e, sympy.ceiling):
            num, den = self.fraction(e.args[0])
            return self.text(num) if den == 1 else self.ceildiv(num, den)
        if isinstance(e, sympy.Mod):
            return self.mod(e.args[0], e.args[1])
        if isinstance(e, sympy.Min | sympy.Max) or type(e).__name__ in ("Min", "Max"):
            # sympy's, or torch's own Min and Max (torch.utils._sympy.functions), which are not
            # subclasses of sympy's
            fn = "min" if type(e).__name__ == "Min" else "max"
            return f"{fn}({', '.join(self.text(a) for a in e.args)})"
        if isinstance(e, sympy.core.relational.Relational) and e.rel_op in _RELATIONS:
            return f"({self.text(e.lhs)} {e.rel_op} {self.text(e.rhs)})"
        if isinstance(e, sympy.And | sympy.Or):
            op = " & " if isinstance(e, sympy.And) else " | "
            return "(" + op.join(self.text(a) for a in sorted(e.args, key=sympy.default_sort_key)) + ")"
        if isinstance(e, sympy.Not):
            return f"({self.text(e.args[0])} == False)"  # `not` fails on Triton values and FX proxies
        if isinstance(e, sympy.Piecewise):
            return self.piecewise(list(e.args))
        return self.function(e)

    def power(self, base: sympy.Basic, n: int) -> str:
        """base ** n for n >= 1, as a product (exact for integers, no pow in kernels)."""
        return "(" + " * ".join([self.text(base)] * n) + ")"

    def piecewise(self, pieces: list[tuple[sympy.Basic, sympy.Basic]]) -> str:
        (value, cond), rest = pieces[0], pieces[1:]
        if isinstance(cond, BooleanTrue) or not rest:
            return self.text(value)
        then, other, c = self.text(value), self.piecewise(rest), self.text(cond)
        if self.triton:
            return f"tl.where({c}, {then}, {other})"
        if self.ite is not None:
            return f"{self.ite}({c}, {then}, {other})"
        return f"({then} if {c} else {other})"

    def function(self, e: sympy.Basic) -> str:
        """torch's sympy functions (torch.utils._sympy.functions), matched by name."""
        name, args = type(e).__name__, e.args
        if name in _DIVISIONS and len(args) == 2:
            return self.floordiv(args[0], args[1])
        if name == "CeilDiv" and len(args) == 2:
            return self.ceildiv(args[0], args[1])
        if name in _MODS and len(args) == 2:
            return self.mod(args[0], args[1])
        if name == "ModularIndexing" and len(args) == 3:  # (x // d) % m
            base = self.text(args[0]) if args[1] == 1 else self.floordiv(args[0], args[1])
            return self.mod_text(base, _nonnegative(args[0]) and _positive(args[1]), args[2])
        if name in ("IntTrueDiv", "FloatTrueDiv") and len(args) == 2:
            return f"({self.text(args[0])} / {self.text(args[1])})"
        if name == "ToFloat" and len(args) == 1:
            return f"({self.text(args[0])} * 1.0)"
        if name == "Identity" and len(args) == 1:
            return self.text(args[0])
        if name == "PowByNatural" and len(args) == 2 and isinstance(args[1], sympy.Integer) and int(args[1]) > 0:
            return self.power(args[0], int(args[1]))
        raise ValueError(f"cannot print index expression {e} ({type(e).__name__})")
