"""Prints sympy index and size expressions as integer arithmetic, valid in Python and Triton."""

from __future__ import annotations

import sympy


def texpr(e: sympy.Expr) -> str:
    """Triton source for an integer index expression (Add, Mul, Mod, floor, symbols)."""
    if isinstance(e, sympy.Integer):
        return str(int(e))
    if isinstance(e, sympy.Symbol):
        return str(e.name)
    if isinstance(e, sympy.Add):
        terms = sorted(e.args, key=sympy.default_sort_key)
        return "(" + " + ".join(texpr(t) for t in terms) + ")"
    if isinstance(e, sympy.Mul):
        num = [a for a in e.args if not (isinstance(a, sympy.Rational) and not isinstance(a, sympy.Integer))]
        fr = [a for a in e.args if isinstance(a, sympy.Rational) and not isinstance(a, sympy.Integer)]
        if fr:
            raise ValueError(f"non-integer index expression {e}")
        return "(" + " * ".join(texpr(a) for a in num) + ")"
    if isinstance(e, sympy.Mod):
        return f"({texpr(e.args[0])} % {texpr(e.args[1])})"
    if isinstance(e, sympy.floor):
        # floor(N / D) for an integer expression N and integer D (indices are non-negative)
        num, den = sympy.fraction(sympy.together(e.args[0]))
        if isinstance(den, sympy.Integer):
            return f"({texpr(sympy.expand(num))} // {int(den)})"
        raise ValueError(f"cannot print {e}")
    if isinstance(e, sympy.ceiling):
        inner = e.args[0]
        if isinstance(inner, sympy.Mul):
            fr = [a for a in inner.args if isinstance(a, sympy.Rational) and not isinstance(a, sympy.Integer)]
            if len(fr) == 1 and fr[0].p == 1:
                rest = sympy.Mul(*[a for a in inner.args if a is not fr[0]])
                return f"(-(-{texpr(sympy.expand(rest))} // {int(fr[0].q)}))"
        raise ValueError(f"cannot print {e}")
    name = type(e).__name__
    if name == "ToFloat" and len(e.args) == 1:
        return f"({texpr(e.args[0])} * 1.0)"
    if name in ("FloorDiv", "CleanDiv", "IntTrueDiv") and len(e.args) == 2:
        return f"({texpr(e.args[0])} // {texpr(e.args[1])})"
    if name in ("ModularIndexing",) and len(e.args) == 3:
        return f"(({texpr(e.args[0])} // {texpr(e.args[1])}) % {texpr(e.args[2])})"
    if name in ("PythonMod", "Mod") and len(e.args) == 2:
        return f"({texpr(e.args[0])} % {texpr(e.args[1])})"
    if isinstance(e, sympy.Max | sympy.Min):
        fn = "max" if isinstance(e, sympy.Max) else "min"
        return f"{fn}({', '.join(texpr(a) for a in e.args)})"
    if isinstance(e, sympy.Pow) and isinstance(e.exp, sympy.Integer) and int(e.exp) > 0:
        return "(" + " * ".join([texpr(e.base)] * int(e.exp)) + ")"
    raise ValueError(f"cannot print index expression {e} ({type(e).__name__})")
