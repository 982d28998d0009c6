"""The printers against sympy: every construct of sizes, strides, offsets and index expressions,
evaluated at random integers, must print to text that computes sympy's value.

`pyexpr` text is evaluated as Python. `texpr` text is evaluated with C's integer division and
remainder (rounding toward zero: what Triton compiles `//` and `%` to) and `tl.where`, so a form
that is only right under Python's rounding fails here. Sizes (positive), loop indices
(non-negative) and unbacked symbols (any sign) take values of their kind.
"""

from __future__ import annotations

import ast
import random
from typing import Any

import pytest
import sympy
from coil.lowering_ir.printing import pyexpr, texpr
from torch.utils._sympy.functions import (
    CeilDiv,
    CleanDiv,
    FloorDiv,
    IntTrueDiv,
    ModularIndexing,
    PythonMod,
    ToFloat,
)
from torch.utils._sympy.functions import Max as TorchMax
from torch.utils._sympy.functions import Min as TorchMin

S0, S1 = sympy.symbols("s0 s1", integer=True, positive=True)  # backed sizes
X0 = sympy.Symbol("x0", integer=True, nonnegative=True)  # a kernel's loop index
U0, U1 = sympy.symbols("u0 u1", integer=True)  # unbacked: data-dependent, any sign

INTEGER_CASES: list[sympy.Basic] = [
    sympy.ceiling(3 * S0 / 16),  # a grid: ceiling(numel / XBLOCK) with a rational coefficient
    sympy.ceiling(3 * S0 * S1 / 128),
    sympy.ceiling(U0 / 16),
    sympy.ceiling(U0 / S0),
    sympy.ceiling((2 * U0 + S0) / 3),
    sympy.floor(U0 / 4),
    sympy.floor((2 * U0 + 3 * S1) / 6),
    sympy.floor(X0 / S0),
    sympy.floor(S0 / 2 + S1 / 3),
    FloorDiv(U0, S0),
    FloorDiv(X0 + 3, 4),
    CeilDiv(U0, 4),
    CeilDiv(S0 * S1, 8),
    CleanDiv(4 * U0 + 8, 4),
    sympy.Mod(U0, 3),
    sympy.Mod(U0 + S0, S1),
    sympy.Mod(X0, S0),
    PythonMod(U0, S0),
    ModularIndexing(X0, 2, S0),
    ModularIndexing(X0 + 3 * S0, S0, 4),
    ModularIndexing(U0 + 100, 3, 7),
    sympy.Min(S0, U0, 3),
    sympy.Max(U0, 0) + sympy.Min(S0 - U0, S1),
    TorchMax(1, U0) * S0 + TorchMin(U0, S1, 7),  # torch's own Min and Max (a stride of dynamic shapes)
    sympy.Float(12.0) * S0 + sympy.Float(3.0),  # floats whose value is an integer
    U0 + 6 * sympy.Piecewise((1, sympy.Eq(U0, -3) & (U0 < 0)), (0, True)) + 3,  # a slice's end
    sympy.Piecewise((U0 + S0, U0 < 0), (sympy.Min(U0, S0), True)),
    (X0 + 1) ** 2 + FloorDiv(X0, 3) * S1,
    ModularIndexing(X0, S0, 4) * 2 + FloorDiv(U0 * U0, S1) - sympy.ceiling(U0 / 5),
]

RELATION_CASES: list[sympy.Basic] = [
    sympy.Ge(U0, 0),
    sympy.Le(U0, S0 * 2),
    sympy.Lt(U0 + 3, S1),
    sympy.Gt(FloorDiv(U0, 2), 1),
    sympy.Eq(U0, S0),
    sympy.Ne(sympy.Mod(U0, 4), 0),
    sympy.And(U0 >= 0, U0 <= 10),
    sympy.Or(sympy.Eq(U0, 0), U0 > S0),
    sympy.Not(sympy.Eq(U0, 1)),
    sympy.And(sympy.Or(U0 < 0, U0 > 3), sympy.Not(U0 < -5)),
]


def _value(sym: sympy.Symbol, rng: random.Random) -> int:
    if sym.is_positive:
        return rng.randint(1, 40)
    if sym.is_nonnegative:
        return rng.randint(0, 40)
    return rng.randint(-40, 40)


def _samples(e: sympy.Basic, n: int = 200) -> list[dict[sympy.Symbol, int]]:
    rng = random.Random(str(e))
    syms = sorted(e.free_symbols, key=str)
    return [{s: _value(s, rng) for s in syms} for _ in range(n)]


def _oracle(e: sympy.Basic, env: dict[sympy.Symbol, int]) -> Any:
    got = e.xreplace({s: sympy.Integer(v) for s, v in env.items()})
    if got in (sympy.true, sympy.false):
        return bool(got)
    return int(got)


def _c_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def _c_mod(a: int, b: int) -> int:
    return a - b * _c_div(a, b)


class _CSemantics(ast.NodeTransformer):
    """`a // b` and `a % b` as C's (and Triton's) integer division and remainder."""

    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
        self.generic_visit(node)
        fn = {ast.FloorDiv: "_c_div", ast.Mod: "_c_mod"}.get(type(node.op))
        if fn is None:
            return node
        return ast.copy_location(ast.Call(ast.Name(fn, ast.Load()), [node.left, node.right], []), node)


class _TL:
    @staticmethod
    def where(c: Any, a: Any, b: Any) -> Any:
        return a if c else b


def _eval_c(src: str, env: dict[sympy.Symbol, int]) -> Any:
    tree = ast.fix_missing_locations(_CSemantics().visit(ast.parse(src, mode="eval")))
    names = {"_c_div": _c_div, "_c_mod": _c_mod, "tl": _TL, "min": min, "max": max}
    return eval(compile(tree, "<texpr>", "eval"), {"__builtins__": {}}, {**names, **{s.name: v for s, v in env.items()}})


def _eval_py(src: str, env: dict[sympy.Symbol, int], **extra: Any) -> Any:
    names = {"min": min, "max": max, **extra}
    return eval(src, {"__builtins__": {}}, {**names, **{s.name: v for s, v in env.items()}})


@pytest.mark.parametrize("expr", INTEGER_CASES + RELATION_CASES, ids=str)
def test_python_text_computes_sympys_value(expr: sympy.Basic) -> None:
    src, with_ite = pyexpr(expr), pyexpr(expr, ite="ite")
    for env in _samples(expr):
        want = _oracle(expr, env)
        assert _eval_py(src, env) == want, (src, env)
        assert _eval_py(with_ite, env, ite=lambda c, a, b: a if c else b) == want, (with_ite, env)


@pytest.mark.parametrize("expr", INTEGER_CASES + RELATION_CASES, ids=str)
def test_triton_text_computes_sympys_value_with_c_division(expr: sympy.Basic) -> None:
    src = texpr(expr)
    for env in _samples(expr):
        assert _eval_c(src, env) == _oracle(expr, env), (src, env)


def test_non_negative_operands_keep_the_plain_operators() -> None:
    """Loop indices over positive sizes need no sign-safe form: kernels keep `//` and `%`."""
    assert texpr(ModularIndexing(X0, 2, S0)) == "((x0 // 2) % s0)"
    assert texpr(sympy.ceiling(3 * S0 / 16)) == "((15 + (3 * s0)) // 16)"
    assert texpr(FloorDiv(U0, 4)) != "(u0 // 4)"  # u0 may be negative: a form exact under both roundings


def test_float_conversions_and_true_division() -> None:
    assert _eval_py(pyexpr(ToFloat(S0) / 2), {S0: 5}) == 2.5
    assert _eval_py(pyexpr(IntTrueDiv(S0, 2)), {S0: 5}) == 2.5
    assert _eval_py(pyexpr(ToFloat(S0) / S1 + sympy.Float(0.25)), {S0: 5, S1: 4}) == 1.5


@pytest.mark.parametrize("expr", [S0 / 2, sympy.Float(1.5), sympy.sqrt(S0), U0 / S0], ids=str)
def test_non_integer_expressions_are_rejected(expr: sympy.Basic) -> None:
    for printer in (texpr, pyexpr):
        with pytest.raises(ValueError):
            printer(expr)
