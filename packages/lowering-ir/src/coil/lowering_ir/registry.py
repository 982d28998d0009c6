"""The lowering table: ATen op -> lowering function. Rules are data: list, count, test one by one.

A lowering is `fn(lw, node, *args, **kwargs)` where tensor arguments arrive as TensorRefs and
everything else as the FX graph holds it; it returns the node's value (a TensorRef, or a tuple of
them for multi-output ops). It raises `Unsupported` for variants it does not cover: the node then
runs as an ATen fallback.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

LoweringFn = Callable[..., Any]
LOWERINGS: dict[Any, LoweringFn] = {}


def register(*ops: Any) -> Callable[[LoweringFn], LoweringFn]:
    """Register `fn` for each op; an OpOverloadPacket registers all of its overloads."""

    def deco(fn: LoweringFn) -> LoweringFn:
        for op in ops:
            if isinstance(op, torch._ops.OpOverloadPacket):
                for name in op.overloads():  # type: ignore[no-untyped-call]
                    overload = getattr(op, name)
                    if "out" not in name:
                        LOWERINGS[overload] = fn
            else:
                LOWERINGS[op] = fn
        return fn

    return deco


# operators torch defines only when a module of its is imported (Inductor's prims, which Dynamo
# itself puts into graphs: `prims::fma` for `addcmul_(..., value=v)`), by their qualified name:
# registering them must not import that module
LOWERINGS_BY_NAME: dict[str, LoweringFn] = {}


def register_by_name(*names: str) -> Callable[[LoweringFn], LoweringFn]:
    """Register `fn` for the overloads of each operator named `namespace::name`."""
    def deco(fn: LoweringFn) -> LoweringFn:
        for name in names:
            LOWERINGS_BY_NAME[name] = fn
        return fn
    return deco


def lowering_for(target: Any) -> LoweringFn | None:
    """The registered lowering of `target`, or None (the node then runs as a fallback)."""
    fn = LOWERINGS.get(target)
    if fn is None and isinstance(target, torch._ops.OpOverload):
        fn = LOWERINGS_BY_NAME.get(target._schema.name)
    return fn


def registered_ops() -> list[str]:
    """Names of every op with a native lowering, sorted."""
    return sorted([str(op) for op in LOWERINGS] + list(LOWERINGS_BY_NAME))
