"""The two kernel groups of a Scatter step (`scatter_groups`).

A Scatter stays one step of the schedule (the wrapper decides whether its output starts as a
copy of the base or takes the base's storage), but it runs as two kernels, each a KernelGroup
that Triton codegen generates like any other:

  - `<op>_init`: a pointwise group writing the output: a copy of the base (cast to the output's
    dtype when they differ), or zeros when there is no base;
  - `<op>_scatter`: one "x" member, the Scatter itself, over the source points (`op.ranges`);
    each point computes its value and its target index (loaded indices bound through
    `op.target.indirect`) and stores or accumulates it into the output, which is the group's
    only store.
"""

from __future__ import annotations

from coil.lowering_ir import Constant, Op, Pointwise, Scatter, Value, load
from coil.scheduler.canonical import LoopNest, syms
from coil.scheduler.group import X_PREFIX, KernelGroup, Member, loop_mapping, plan


def scatter_groups(op: Scatter) -> tuple[KernelGroup, KernelGroup]:
    """(init group, scatter group) for `op`, named `<op.name>_init` and `<op.name>_scatter`."""
    out = op.output
    p = syms("p", len(out.layout.size))
    body: Value = load(op.base, list(p)) if op.base is not None else Constant(0, out.layout.dtype)
    if body.dtype != out.layout.dtype:
        body = Op("cast", (body,), out.layout.dtype)
    init_op = Pointwise(f"{op.name}_init", op.origins, out, out.layout.size, body, out.layout.index(list(p)))
    init = plan(f"{op.name}_init", [init_op], {out.name}, set())
    ranges = list(op.ranges)
    ps = syms("p", len(ranges))
    nest = LoopNest(tuple(ranges), (), ps, (), op.value, op.target.index)
    member = Member(op, "x", nest, loop_mapping(ranges, ps, ranges, syms(X_PREFIX, len(ranges))))
    scatter = KernelGroup(f"{op.name}_scatter", [member], ranges, [], stores=[out.name])
    return init, scatter
