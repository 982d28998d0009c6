"""A scalar size expression used as a value keeps its type: float-valued ones are never truncated."""

from __future__ import annotations

import sympy
import torch
from coil.lowering_ir import IndexValue
from coil.lowering_ir.ops.common import float_valued, value_of
from torch.utils._sympy.functions import FloatTrueDiv, IntTrueDiv, ToFloat

s0, s1 = sympy.symbols("s0 s1", integer=True, positive=True)


def test_float_valued_expressions() -> None:
    assert float_valued(IntTrueDiv(128 * s0 * s1, 16))
    assert float_valued(FloatTrueDiv(sympy.Float(1.0), IntTrueDiv(s0, 4)))
    assert float_valued(ToFloat(s0) * 2)
    assert float_valued(sympy.Symbol("scalar0", integer=False))  # an unbacked SymFloat
    assert not float_valued(8 * s0 * s1)
    assert not float_valued(sympy.floor(s0 / 3))


def test_value_of_a_float_expression_is_a_float64_index_value() -> None:
    e = FloatTrueDiv(sympy.Float(1.0), IntTrueDiv(128 * s0 * s1, 16))
    v = value_of(e, [])
    assert isinstance(v, IndexValue) and v.dtype == torch.float64 and v.index == e
    w = value_of(8 * s0, [])
    assert isinstance(w, IndexValue) and w.dtype == torch.int64
