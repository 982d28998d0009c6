"""Which way a reduction group's memory loads run: along x (outputs) or along r (the reduced dims).

triton-codegen tiles a group whose loads are contiguous along x and strided along r "outer"
(config.choose): wide x blocks, so each load reads neighbouring elements of every row.
"""

from __future__ import annotations

import sympy
from coil.lowering_ir import Expr, loads
from coil.scheduler import KernelGroup
from coil.scheduler.group import R_PREFIX, X_PREFIX


def _unit_step(e: Expr, sym: sympy.Symbol | None) -> int | None:
    """How far `e` moves when `sym` grows by one, if that is a constant (None if not)."""
    if sym is None:
        return 0
    d = sympy.expand(e.xreplace({sym: sym + 1}) - e)
    return int(d) if d.is_Integer else None


def x_contiguous_loads(group: KernelGroup) -> bool:
    """Do the group's r-dependent memory loads mostly run contiguously along x, strided along r?

    Looks at every load of an "r"/"reduce" member from a buffer not written in the group, in
    kernel coordinates (`Member.kernel_expr`): the innermost x dim (`x<k>`, the last of
    `x_dims`: consecutive xindex values) and the innermost r dim (`rd<j>`) are the ones a tile
    walks fastest. A load whose index moves by 1 along the innermost r dim votes "inner"; one
    that depends on r and moves by 1 along the innermost x dim but not along r votes "outer"
    (weighted by element size). Outer wins only with more weight than inner: then the kernel
    should tile wide in x (config "outer"). Data-dependent (indirect) loads do not vote, nor do
    loads that depend on r alone: a per-row value broadcast over the outputs (a log-softmax
    backward's row max, say, beside the column sum of its result) is read once per r for every
    output, a vector against the matrix the others stream, so it says nothing of how to tile.
    """
    if not group.x_dims or not group.r_dims:
        return False
    names = {f"{X_PREFIX}{len(group.x_dims) - 1}": "x", f"{R_PREFIX}d{len(group.r_dims) - 1}": "r"}
    inner = outer = 0
    for m in group.members:
        if m.kind not in ("r", "reduce", "scan"):
            continue
        for ld in loads(m.nest.body):
            if ld.indirect or any(w.op.output.name == ld.buffer for w in group.members):
                continue
            e = m.kernel_expr(ld.index)
            found = {names[s.name]: s for s in e.free_symbols if s.name in names}
            if not any(s.name.startswith(f"{R_PREFIX}d") for s in e.free_symbols):
                continue  # read once per x: not part of the streaming loop
            if not any(s.name.startswith(X_PREFIX) for s in e.free_symbols):
                continue  # read once per r, shared by every output: a broadcast row value
            size = ld.dtype.itemsize
            rstep, xstep = _unit_step(e, found.get("r")), _unit_step(e, found.get("x"))
            if rstep == 1:
                inner += size
            elif xstep == 1:
                outer += size
    return outer > inner
