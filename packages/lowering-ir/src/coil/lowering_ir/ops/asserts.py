"""Run-time checks on size symbols: `_assert_scalar` and the range constraints.

Dynamo turns what it assumed of data-dependent sizes (`u0 >= 0`, `u0 <= numel`, a user's
`torch._check`) into these nodes. Each is an intended extern: the wrapper calls the ATen op on
the printed condition (or size), which raises as in eager when the check fails at run time.
A condition the ShapeEnv already reduced to true holds by construction and is dropped; one it
reduced to false still raises, when the graph runs, as eager would.
"""

from __future__ import annotations

from typing import Any

import sympy
import torch
import torch.fx
from coil.lowering_ir.lowerer import Lowerer
from coil.lowering_ir.registry import register

aten = torch.ops.aten


@register(aten._assert_scalar.default)
def assert_scalar(lw: Lowerer, node: torch.fx.Node, cond: Any, msg: str) -> None:
    if cond is True or cond is sympy.true:
        return None  # true by construction (the ShapeEnv proved it): nothing to check
    lw.extern(aten._assert_scalar.default, (cond, msg), {}, fallback=False)
    return None


@register(aten.sym_constrain_range.default, aten.sym_constrain_range_for_size.default)
def constrain_range(lw: Lowerer, node: torch.fx.Node, *args: Any, **kwargs: Any) -> None:
    """ATen raises when the size is outside [min, max] (a real check, kept)."""
    lw.extern(node.target, args, kwargs, fallback=False)
    return None
