"""Kernels for a Scatter: an init kernel (copy of the base, or zeros) and the scatter kernel.

The scatter kernel iterates the source points; each computes its target position (indices
loaded from tensors) and value, then `tl.atomic_add` (accumulate) or `tl.store`s it.
"""

from __future__ import annotations

import sympy
from coil.lowering_ir import Buffer, Constant, Op, Pointwise, Scatter, Value, load
from coil.lowering_ir.lowerer import index_symbols
from coil.scheduler import KernelGroup, Member, plan
from coil.scheduler.canonical import LoopNest, syms
from coil.scheduler.group import X_PREFIX, _mapping
from coil.triton_codegen.config import CodegenOptions
from coil.triton_codegen.kernel import KernelSource, generate


def generate_scatter(op: Scatter, buffers: dict[str, Buffer], target: str,
                     hints: dict[sympy.Symbol, int] | None = None,
                     options: CodegenOptions | None = None) -> list[KernelSource]:
    """[init kernel, scatter kernel] for `op` (names `<op>_init`, `<op>_scatter`).

    With `options.debug_asserts` the scatter kernel asserts every target index (see `generate`).
    """
    out = op.output
    p = index_symbols("p", len(out.layout.size))
    body: Value = load(op.base, list(p)) if op.base is not None else Constant(0, out.layout.dtype)
    if body.dtype != out.layout.dtype:
        body = Op("cast", (body, ), out.layout.dtype)
    init_op = Pointwise(f"{op.name}_init", op.origins, out, out.layout.size, body, out.layout.index(p))
    init = plan(f"{op.name}_init", [init_op], {out.name}, set())
    ranges = list(op.ranges)
    ps = syms("p", len(ranges))
    nest = LoopNest(tuple(ranges), (), ps, (), op.value, op.target.index)
    xs = syms(X_PREFIX, len(ranges))
    member = Member(op, "x", nest, _mapping(ranges, ps, ranges, xs))  # type: ignore[arg-type]
    group = KernelGroup(f"{op.name}_scatter", [member], ranges, [], stores=[out.name])
    return [generate(init, buffers, target, hints=hints, options=options),
            generate(group, buffers, target, hints=hints, options=options)]


def generate_schedule(sched: object, buffers: dict[str, Buffer], target: str, strategy: str = "auto",
                      hints: dict[sympy.Symbol, int] | None = None,
                      options: CodegenOptions | None = None) -> list[KernelSource]:
    """Every kernel a schedule needs, in step order: one per kernel group, two per Scatter.

    `options` (default: `CodegenOptions()`, all off) goes to every kernel (see `generate`).
    """
    from coil.scheduler import Schedule

    assert isinstance(sched, Schedule)
    out: list[KernelSource] = []
    for st in sched.steps:
        if isinstance(st, KernelGroup):
            out.append(generate(st, buffers, target, strategy, hints, options))
        elif isinstance(st, Scatter):
            out.extend(generate_scatter(st, buffers, target, hints, options))
    return out
